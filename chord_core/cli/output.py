"""What the command line shows and writes: progress on stderr, results as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from chord_core.config import SamplingConfig
from chord_core.types import ProgressEvent


def one_line(text: str) -> str:
    """``text`` as one line a terminal shows as it is: a control or format character (a line
    break, ESC, a right-to-left override) written as its escape (``\\n``, ``\\x1b``,
    ``\\u202e``). A file name in a watched folder is anyone's who may write there: raw,
    ``a\\ndone: b.mp4`` printed a forged ``done:`` line, and ESC sequences reach the
    terminal."""
    import unicodedata

    return "".join(c.encode("unicode_escape").decode("ascii")
                   if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c
                   for c in text)


def sampling_from(args: argparse.Namespace) -> SamplingConfig:
    fields: dict[str, Any] = {}
    if args.fps is not None:
        fields["fps"] = args.fps
    if args.max_frames is not None:
        fields["max_frames"] = args.max_frames
    if args.max_pixels is not None:
        fields["max_pixels"] = args.max_pixels
        fields["ground_max_pixels"] = args.max_pixels
        fields["min_pixels"] = min(SamplingConfig().min_pixels, args.max_pixels)
    if args.token_budget is not None:
        fields["token_budget"] = args.token_budget
    return SamplingConfig(**fields)


def emit(doc: dict[str, Any], json_out: str | None) -> None:
    from chord_core.runtime import outputs

    if json_out:  # checked before the work began; an OSError now is the caller's to handle
        Path(json_out).expanduser().parent.mkdir(parents=True, exist_ok=True)
        outputs.write_json(Path(json_out).expanduser(), doc)  # whole or not at all
        print(f"wrote {json_out}", file=sys.stderr)
    else:
        print(json.dumps(doc, indent=2, ensure_ascii=False))


class ProgressLine:
    """Progress on stderr: one rewritten line on a terminal, one line per stage otherwise."""

    open = False

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.tty, self.stage = quiet, sys.stderr.isatty(), ""

    def __call__(self, ev: ProgressEvent) -> None:
        if self.quiet:
            return
        if ev.stage == "placed":  # the placement decision: a plan line of its own
            ProgressLine.end()
            print(f"plan: {ev.message}", file=sys.stderr, flush=True)
            return
        count = f" [{ev.done}/{ev.total}]" if ev.total else ""
        text = f"{ev.elapsed_s:7.1f}s  {ev.stage:<16} {ev.message}{count}"
        if self.tty:
            print(f"\r{text}\033[K", end="", file=sys.stderr, flush=True)
            ProgressLine.open = ev.stage != "done"
            if ev.stage == "done":
                print(file=sys.stderr)
        elif ev.stage != self.stage:
            print(text, file=sys.stderr, flush=True)
        self.stage = ev.stage

    @staticmethod
    def end() -> None:
        if ProgressLine.open:
            print(file=sys.stderr)
            ProgressLine.open = False


def batch_bar(total: int) -> Callable[[Any], None]:
    """A one-line progress bar of a batch run, rewritten in place."""
    def show(summary: Any) -> None:
        c = summary.counts()
        done = c.get("done", 0) + c.get("skipped", 0) + c.get("failed", 0) + \
            c.get("cancelled", 0)
        filled = int(30 * done / max(1, total))
        print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total}  "
              f"running {c.get('running', 0)}  failed {c.get('failed', 0)}  "
              f"skipped {c.get('skipped', 0)}  {summary.wall_s:6.1f}s\033[K",
              end="", file=sys.stderr, flush=True)
    return show
