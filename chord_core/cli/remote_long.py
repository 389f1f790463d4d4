"""``chapters`` / ``ground-long`` / ``search`` (in one long video) through a running Chord
service, as the one-clip commands go (``remote.py``): the same discovery (``service.json``,
``--server`` / ``CHORD_SERVER``, ``--local``), the same proof before any key or clip is
sent, and the run falls back to this process when no service is found.

The service runs the whole run (``POST /v1/jobs`` with task chapters, ground-long or
search-long: its parent job, its chunks on the service's workers, kept in its store), this
process follows its events (a line per chunk finished, as here) and writes the same outputs
from the document it gets back (``--json``, and for chapters ``--vtt``, ``--srt``, ``--md``).
Options only this process can honour run it here: the workers' (``--in-process``,
``--gpus``, ``--cpu-workers``, ``--config``, ``--batch-size``, placement) and search's
``--chapters FILE``. The same command run again while the service still runs it follows the
same run (its id is a content key); after a service crash, the restarted service resumes it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Callable

from chord_core.cli.remote import LOCAL_WORDS, choose_server, follow, submit
from chord_core.cli.remote_http import MAX_RESULT_BYTES
from chord_core.errors import ConfigError
from chord_core.longvideo.cli import COMMANDS as LOCAL_COMMANDS

log = logging.getLogger(__name__)
TASKS = {"chapters": "chapters", "ground-long": "ground-long", "search": "search-long"}
Command = Callable[[argparse.Namespace], int]


def _here_only(args: argparse.Namespace) -> str:
    """The first long-video option that needs this process (its own workers, a file)."""
    checks = (("--in-process", bool(getattr(args, "in_process", False))),
              ("--gpus", getattr(args, "gpus", None) is not None),
              ("--cpu-workers", getattr(args, "cpu_workers", None) is not None),
              ("--config", getattr(args, "config", None) is not None),
              ("--chapters", getattr(args, "chapters_json", None) is not None))
    return next((name for name, hit in checks if hit), "")


def choose(args: argparse.Namespace) -> tuple[str | None, str]:
    """(the service's URL or None for this process, why), by ``remote.choose_server``'s
    rules plus the long-video options that keep the run here."""
    named = getattr(args, "server", None)
    blocker = _here_only(args)
    if blocker and not getattr(args, "local", False):
        if named and named.strip().lower() not in LOCAL_WORDS:
            raise ConfigError(f"{blocker} needs the run in this process, and --server names "
                              "a service", hint="leave the option out to use the service, "
                                                "or add --local")
        return None, f"{blocker} runs it in this process"
    short = argparse.Namespace(**vars(args))  # the one-clip rules: no such options here
    short.method, short.scores, short.annotated_video, short.strategy = \
        "per_frame", False, None, None
    return choose_server(short)


def job_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The run's request: the task, its text and every setting the command was given, with
    the long-video defaults this process reads (``CHORD_LONG_*``), so the run is the one a
    local run would be (its id, its chunks)."""
    import math

    from chord_core.longvideo.settings import settings_from_env

    task = TASKS[args.command]
    base = settings_from_env(threshold_s=args.long_after, chunk_s=args.chunk_s,
                             chapter_s=args.chapter_s)
    fields: dict[str, Any] = {"task": task, "chunk_s": base.chunk_s,
                              "chapter_s": base.chapter_s}
    if math.isfinite(base.threshold_s):
        fields["long_after"] = base.threshold_s
    for name in ("cuts", "frames_per_chunk", "max_new_tokens"):
        if getattr(args, name, None) is not None:
            fields[name] = getattr(args, name)
    if task == "ground-long":
        fields["target"] = args.target
        for name in ("fps", "ground_max_pixels", "ground_tokens"):
            if getattr(args, name, None) is not None:
                fields[name] = getattr(args, name)
    elif task == "search-long":
        fields.update(query=args.query, method=args.method, max_chapters=args.max_chapters,
                      fps=args.fps, max_frames=args.max_frames)
    return fields


def run_remote(url: str, why: str, args: argparse.Namespace) -> dict[str, Any]:
    """Submit the run, follow it (a line per step on stderr unless ``-q``), return its
    document."""
    job_id, how = submit(url, job_fields(args), args.video)
    print(f"note: running on the Chord service at {url} ({why}; clip {how}), run {job_id}; "
          "--local runs it in this process", file=sys.stderr, flush=True)

    def progress(event: Any) -> None:
        if not args.quiet:
            print(f"{event.elapsed_s:7.1f}s  {event.message}", file=sys.stderr, flush=True)
    return follow(url, job_id, progress, MAX_RESULT_BYTES)


def _write(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """The outputs a local run writes (``longvideo.cli``'s own writers), from the service's
    document."""
    from chord_core.longvideo.cli import emit_doc, test_note, write_chapter_files

    emit_doc(doc, args.json_out)
    if args.command == "chapters":
        from chord_core.longvideo.doc import ChaptersDoc

        chapters = ChaptersDoc.from_dict(doc)
        write_chapter_files(chapters, args)
        test_note(chapters.test_model)
        return
    if args.command == "ground-long":
        test_note(bool((doc.get("model") or {}).get("test_model")))
        return
    for w in list(doc.get("warnings") or [])[:3]:
        if not args.quiet:
            print(f"warning: {w}", file=sys.stderr)
    test_note(bool(doc.get("test_model")))


def remote_first(local: Command) -> Command:
    """``local`` (the long-video command run in this process), handed to a running
    service first when one is found (see the module docstring)."""
    def command(args: argparse.Namespace) -> int:
        from chord_core.longvideo.cli import check_outputs

        # before any work, here or there
        check_outputs(*(getattr(args, k, None) for k in ("json_out", "vtt", "srt", "md")))
        url, why = choose(args)
        if url is None:
            log.info("running in this process: %s", why)
            return local(args)
        _write(args, run_remote(url, why, args))
        return 0
    return command


LONG_VIDEO_COMMANDS: dict[str, Command] = {name: remote_first(cmd)
                                           for name, cmd in LOCAL_COMMANDS.items()}
