"""``python -m chord_core example-clip PATH``: the example clip (or a still of it) to try the
commands on — the input the README's examples are run with, in CI as by a reader."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``example-clip`` on the CLI's subparsers."""
    p = sub.add_parser("example-clip",
                       help="write the example clip (a 6 s synthetic scene: a red ball and a "
                            "blue square) to PATH; a .jpg/.png PATH gets one frame of it")
    p.add_argument("path", nargs="+", metavar="PATH",
                   help="where to write it: .mp4/.mkv/.mov/.avi, or .jpg/.png for a still")


def cmd_example_clip(args: argparse.Namespace) -> int:
    """Write each PATH and name it on stdout."""
    from chord_core.testing.example_clip import write_example

    for path in args.path:
        print(write_example(path))  # noqa: T201 — the command's output is the paths it wrote
    return 0
