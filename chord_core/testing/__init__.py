"""Test support shipped with the engine: synthetic videos (``videos``) and the tiny
random-weight model builder (``tiny_model``). Import the submodule you need; this package
imports nothing itself so that ``import chord_core.testing`` stays cheap."""
