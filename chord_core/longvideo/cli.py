"""Command line of long-video mode: ``chapters``, ``search`` and ``ground-long``.

    python -m chord_core chapters CLIP [--vtt OUT.vtt --srt OUT.srt --md OUT.md --json OUT]
    python -m chord_core search CLIP "a person opens the car door" [--method entail|ground]
    python -m chord_core ground-long CLIP "the red car" [--json OUT]

Work runs as jobs of the job runtime — worker processes like ``batch`` (``--gpus``,
``--cpu-workers``, ``--config``), or one model in this process (``--in-process``) — and
every finished chunk is kept in the job store: the same command run again after a crash or
Ctrl-C resumes at the chunk where it stopped. Errors follow the CLI's rule: one ``error:``
line, one ``hint:`` line, exit 2 for bad input. Module import is light (argparse only).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from chord_core.longvideo.settings import CUT_MODES

if TYPE_CHECKING:
    from chord_core.longvideo.session import Session


def _long_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("long video")
    g.add_argument("--long-after", type=float, default=None, metavar="SECONDS",
                   help="clips longer than this are long videos (default: "
                        "$CHORD_LONG_VIDEO_S or 600)")
    g.add_argument("--chunk-s", type=float, default=None,
                   help="target chunk length in seconds (default: $CHORD_LONG_CHUNK_S or 60)")
    g.add_argument("--cuts", choices=CUT_MODES, default=None,
                   help="where chunks start: scene cuts of every frame (scene), of keyframes "
                        "only (keyframes), fixed windows (fixed), or the cheapest (auto)")
    g.add_argument("--chapter-s", type=float, default=None,
                   help="about one chapter per this many seconds (default 300)")
    g.add_argument("--frames-per-chunk", type=int, default=None,
                   help="at most this many frames describe a chunk (default 16)")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens per chunk description and per chapter answer, 128–2048 "
                        "(default 192)")


def _run_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where it runs")
    g.add_argument("--in-process", action="store_true",
                   help="one model in this process instead of worker processes")
    g.add_argument("--gpus", default=None, help="GPU numbers for the workers, e.g. 0,1")
    g.add_argument("--cpu-workers", type=int, default=None, help="N CPU worker processes")
    g.add_argument("--config", default=None, help="multigpu_config.yaml")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


def add_parsers(sub: Any, model_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add the long-video subcommands to the CLI's subparsers."""
    p = sub.add_parser("chapters", help="long video: chapters (start–end, title, summary) "
                                        "and an overall summary; resumable")
    p.add_argument("video")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT",
                   help="the chord.chapters/v1 document (default: stdout)")
    p.add_argument("--vtt", default=None, metavar="OUT.vtt", help="chapters as WebVTT")
    p.add_argument("--srt", default=None, metavar="OUT.srt", help="chapters as SRT")
    p.add_argument("--md", default=None, metavar="OUT.md", help="a Markdown summary")
    _long_args(p), model_args(p), _run_args(p)

    p = sub.add_parser("search", help='long video: when does something happen? time ranges '
                                      'with evidence frames')
    p.add_argument("video")
    p.add_argument("query", help='what to find, e.g. "a person opens the car door"')
    p.add_argument("--method", choices=("entail", "ground"), default="entail",
                   help="check frames by entailment (default) or by grounding")
    p.add_argument("--chapters", dest="chapters_json", default=None, metavar="CHAPTERS.json",
                   help="a chapters document of this clip (default: made or resumed now)")
    p.add_argument("--max-chapters", type=int, default=3,
                   help="candidate chapters checked frame by frame (default 3)")
    p.add_argument("--fps", type=float, default=1.0, help="frames per second checked")
    p.add_argument("--max-frames", type=int, default=32, help="frames checked per chapter")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT")
    _long_args(p), model_args(p), _run_args(p)

    p = sub.add_parser("ground-long", help="long video: ground a target over the whole clip "
                                           "in chunks on every worker; resumable")
    p.add_argument("video")
    p.add_argument("target")
    p.add_argument("--fps", type=float, default=None, help="frames per second (default 1)")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT")
    ground_long_args(p)
    _long_args(p), model_args(p), _run_args(p)


def ground_long_args(p: argparse.ArgumentParser) -> None:
    """Long-clip grounding's frame size and answer length (defaults: the benchmark's,
    ``settings.GROUND_LONG_*``); the frames per generate call are ``--batch-size``."""
    from chord_core.longvideo.settings import GROUND_LONG_MAX_PIXELS, GROUND_LONG_TOKENS

    g = p.add_argument_group("long-clip grounding")
    g.add_argument("--ground-max-pixels", type=int, default=None, metavar="PIXELS",
                   help=f"pixel cap of a grounded frame (default {GROUND_LONG_MAX_PIXELS}: "
                        "448×252)")
    g.add_argument("--ground-tokens", type=int, default=None, metavar="N",
                   help=f"answer tokens per frame (default {GROUND_LONG_TOKENS}: one box; "
                        "256 for several instances a frame)")


def ground_long_options(args: argparse.Namespace) -> tuple[Any, int, int]:
    """(sampling, answer tokens per frame, frames per generate call) of long-clip
    grounding: the flags given, else the benchmark's settings (``settings.GROUND_LONG_*``).
    ``--max-pixels`` (the one-clip ``ground``'s) counts as ``--ground-max-pixels``."""
    from chord_core.errors import ConfigError
    from chord_core.longvideo.settings import (
        GROUND_LONG_BATCH,
        GROUND_LONG_TOKENS,
        ground_long_sampling,
    )

    px = getattr(args, "ground_max_pixels", None) or getattr(args, "max_pixels", None)
    tokens = getattr(args, "ground_tokens", None) or GROUND_LONG_TOKENS
    if tokens < 1 or (px is not None and px < 28 * 28):
        raise ConfigError("--ground-tokens must be ≥ 1 and --ground-max-pixels ≥ 784",
                          hint="e.g. --ground-tokens 64 --ground-max-pixels 112896")
    return ground_long_sampling(px), tokens, getattr(args, "batch_size", None) or \
        GROUND_LONG_BATCH


def _session(args: argparse.Namespace, *, chapters: bool = False) -> Session:
    from chord_core.longvideo.session import Session

    return Session(args, chapters=chapters)


def emit_doc(doc: dict[str, Any], out: str | None) -> None:
    """The run's document: to ``out`` (``--json``), else to stdout."""
    from chord_core.runtime.outputs import write_json

    if out:
        write_json(Path(out).expanduser(), doc)
        print(f"wrote {out}", file=sys.stderr)
    else:
        print(json.dumps(doc, indent=2, ensure_ascii=False))


def check_outputs(*targets: str | None) -> None:
    from chord_core.runtime.outputs import check_file

    for t in targets:
        check_file(t, "the output")


def _check_request(video: str, task: str, query: str) -> None:
    """The query refused before any worker starts (empty, too long)."""
    from chord_core.analysis.request import AnalysisRequest

    AnalysisRequest(video, task, query)


def _note_length(s: Session) -> None:
    mode = "long" if s.settings.is_long(s.info.duration_s) else "short"
    s.say(f"note: {Path(s.info.path).name} is {s.info.duration_s:.0f} s long; long-video mode "
          f"starts past {s.settings.threshold_s:.0f} s (--long-after)"
          + ("" if mode == "long" else ": a short clip, made into chapters as asked"))


def cmd_chapters(args: argparse.Namespace) -> int:
    from chord_core.longvideo.chapters import ChaptersRun

    check_outputs(args.json_out, args.vtt, args.srt, args.md)
    s = _session(args, chapters=True)
    try:
        _note_length(s)
        doc = ChaptersRun(s.executor, s.info, s.key, s.settings, s.cfg.model,
                          in_flight=s.in_flight, on_progress=s.progress, on_result=s.saw,
                          scan=s.scan)()
    finally:
        s.close()
    s.say_reader()
    emit_doc(doc.to_dict(), args.json_out)
    write_chapter_files(doc, args)
    test_note(doc.test_model)
    return 0


def write_chapter_files(doc: Any, args: argparse.Namespace) -> None:
    """``--vtt``, ``--srt`` and ``--md`` of a chapters run (a ``ChaptersDoc``)."""
    from chord_core.longvideo.exports import write_exports

    targets = {k: v for k, v in (("vtt", args.vtt), ("srt", args.srt), ("md", args.md)) if v}
    for path in write_exports(doc, targets):
        print(f"wrote {path}", file=sys.stderr)


def _load_chapters(path: str, info: Any) -> Any:
    from chord_core.errors import InputError
    from chord_core.longvideo.doc import ChaptersDoc

    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the chapters file {path}: {exc}",
                         hint="give a JSON file written by `python -m chord_core chapters "
                              "--json`") from None
    doc = ChaptersDoc.from_dict(data)
    if abs(doc.duration_s - info.duration_s) > 0.5:
        raise InputError(f"{path} describes a {doc.duration_s:.0f} s clip, but the video is "
                         f"{info.duration_s:.0f} s long", hint="give the chapters of this clip, "
                         "or leave --chapters out to make them")
    return doc


def cmd_search(args: argparse.Namespace) -> int:
    from chord_core.errors import ConfigError
    from chord_core.longvideo.chapters import ChaptersRun
    from chord_core.longvideo.search import search

    if args.max_chapters < 1 or args.max_frames < 4 or not 0 < args.fps <= 60:
        raise ConfigError("--max-chapters must be ≥ 1, --max-frames ≥ 4, --fps in (0, 60]",
                          hint="e.g. --max-chapters 3 --max-frames 32 --fps 1")
    if not args.query.strip():
        raise ConfigError("search needs something to look for",
                          hint='say what happens, e.g. "a person opens the car door"')
    check_outputs(args.json_out)
    _check_request(args.video, args.method, args.query)
    s = _session(args, chapters=not args.chapters_json)
    try:
        doc = _load_chapters(args.chapters_json, s.info) if args.chapters_json else \
            ChaptersRun(s.executor, s.info, s.key, s.settings, s.cfg.model,
                        in_flight=s.in_flight, on_progress=s.progress, on_result=s.saw,
                        scan=s.scan)()
        found = search(s.executor, s.info, s.key, doc, args.query, s.cfg.model,
                       method=args.method, max_chapters=args.max_chapters, fps=args.fps,
                       max_frames=args.max_frames, in_flight=s.in_flight,
                       on_progress=s.progress, on_result=s.saw)
    finally:
        s.close()
    s.say_reader()
    emit_doc(found.to_dict(), args.json_out)
    for w in found.warnings[:3]:
        s.say(f"warning: {w}")
    test_note(found.test_model)
    return 0


def cmd_ground_long(args: argparse.Namespace) -> int:
    from chord_core.longvideo.ground import ground_long

    check_outputs(args.json_out)
    _check_request(args.video, "ground", args.target)
    sampling, tokens, batch = ground_long_options(args)
    s = _session(args)
    try:
        _note_length(s)
        result = ground_long(s.executor, s.info, s.key, args.target, s.settings,
                             s.cfg.model, sampling=sampling, in_flight=s.in_flight,
                             on_progress=s.progress, batch_size=batch,
                             max_new_tokens=tokens, on_result=s.saw)
    finally:
        s.close()
    s.say_reader()
    emit_doc(result.to_dict(), args.json_out)
    test_note(result.model.test_model)
    return 0


def run_if_long(args: argparse.Namespace, sampling: Any) -> int | None:
    """``describe`` / ``ground`` on a clip past the long-video threshold: chapters, or
    grounding in chunks over the whole clip, in this process (as the one-clip commands run),
    with a note saying so. None for a short clip (or an image): the caller analyses it as
    always, unchanged. ``--long-after inf`` keeps every clip one prompt."""
    from chord_core.analysis.request import probe_input
    from chord_core.config import MAX_NEW_TOKENS_DEFAULT
    from chord_core.longvideo.settings import settings_from_env

    threshold = settings_from_env(threshold_s=args.long_after)
    info = probe_input(args.video)
    if info.container == "image" or not threshold.is_long(info.duration_s):
        return None
    describe = args.command == "describe"
    tokens = getattr(args, "max_new_tokens", None)
    ns = argparse.Namespace(**vars(args))
    ns.command = "chapters" if describe else "ground-long"
    ns.chunk_s = ns.cuts = ns.chapter_s = ns.frames_per_chunk = None
    ns.max_new_tokens = None if tokens in (None, MAX_NEW_TOKENS_DEFAULT) else tokens
    ns.in_process, ns.gpus, ns.cpu_workers, ns.config = True, None, None, None
    what = "chapters (chord.chapters/v1)" if describe else \
        f"grounding over the whole clip in chunks at {args.fps or 1:g} fps (chord.result/v1)"
    print(f"note: {Path(args.video).name} is {info.duration_s:.0f} s long, past the "
          f"long-video threshold of {threshold.threshold_s:.0f} s (--long-after, "
          f"CHORD_LONG_VIDEO_S): long-video mode — {what}; --long-after inf analyses it "
          "as one prompt", file=sys.stderr, flush=True)
    s = _session(ns, chapters=describe)
    try:
        if describe:
            from chord_core.longvideo.chapters import ChaptersRun

            if (args.prompt or "").strip():
                s.say("warning: --prompt is not used in long-video mode: each chunk is "
                      "described, then merged into chapters")
            doc = ChaptersRun(s.executor, s.info, s.key, s.settings, s.cfg.model,
                              in_flight=s.in_flight, on_progress=s.progress,
                              on_result=s.saw, scan=s.scan)()
            out, test_model = doc.to_dict(), doc.test_model
        else:
            from chord_core.longvideo.ground import ground_long

            px_sampling, tokens, batch = ground_long_options(args)
            sampling = replace(sampling, ground_max_pixels=px_sampling.ground_max_pixels,
                               min_pixels=min(sampling.min_pixels, px_sampling.min_pixels))
            result = ground_long(s.executor, s.info, s.key, args.target, s.settings,
                                 s.cfg.model, sampling=sampling,
                                 in_flight=s.in_flight, on_progress=s.progress,
                                 batch_size=batch, max_new_tokens=tokens,
                                 on_result=s.saw)
            out, test_model = result.to_dict(), result.model.test_model
    finally:
        s.close()
    s.say_reader()
    emit_doc(out, args.json_out)
    if args.annotated_video:
        if describe:
            s.say("warning: --annotated-video is not written for chapters")
        else:
            from chord_core.runtime.outputs import write_annotated_video

            write_annotated_video(result, args.annotated_video,
                                  saved_as=args.json_out or "stdout")
    test_note(test_model)
    return 0


def test_note(test_model: bool) -> None:
    if test_model:
        print("note: test model — random weights; its text is meaningless", file=sys.stderr)


COMMANDS = {"chapters": cmd_chapters, "search": cmd_search, "ground-long": cmd_ground_long}
