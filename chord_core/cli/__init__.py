"""The command line's pieces (``python -m chord_core``: the parser and commands are in
``chord_core/__main__.py``)."""
