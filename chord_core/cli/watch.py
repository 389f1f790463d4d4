"""``python -m chord_core watch DIR --task describe|ground|entail|chapters``: analyse every
new or changed clip under DIR once, as soon as it is complete; runs until Ctrl-C (or, with
``--idle-exit S``, until nothing new came for S seconds; with ``--once``, until the clips
there now are done). Survives restarts: files done before are not done again (the watch
table in the job store). Each file that ends is printed (``done:`` / ``error:``), and each
run of the alert hook (its exit status, time and first line of output). The main thread
only waits: the watcher's own thread does the work, woken by file events, job handles
and timers."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable


def add_parser(sub: Any, model_args: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("watch", help="analyse each new clip in a folder (under the media "
                                     "roots) once, as it arrives; standing checks raise alerts")
    p.add_argument("dir", help="the folder to watch (under CHORD_MEDIA_ROOTS), or a live "
                               "stream: rtsp://…, rtsps://…, http(s)://….m3u8, /dev/videoN")
    p.add_argument("--task", choices=("describe", "ground", "entail", "chapters"),
                   default="describe")
    p.add_argument("--query", default="", help="target (ground), statement (entail) or "
                                               "prompt (describe)")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--settle-s", type=float, default=5.0,
                   help="a file is taken once its size and mtime held this long (default 5)")
    p.add_argument("--rescan-s", type=float, default=30.0,
                   help="rescan the folder this often, besides file events (default 30)")
    g = p.add_argument_group("standing checks (alerts)")
    g.add_argument("--statement", action="append", default=[], metavar="TEXT",
                   help='check every new clip for this, e.g. "a person climbs the fence" '
                        "(repeatable)")
    g.add_argument("--threshold", type=float, default=0.8,
                   help="P(entailment) at which a moment becomes an alert (default 0.8)")
    g.add_argument("--hook", default="", metavar="COMMAND",
                   help="a local command run per alert, the alert as JSON on its stdin "
                        "(a minimal environment: no API key; off the watcher's thread)")
    g.add_argument("--hook-timeout", type=float, default=30.0, metavar="S",
                   help="a hook still running after S seconds is killed (default 30)")
    g = p.add_argument_group("workers")
    g.add_argument("--cpu-workers", type=int, default=None, help="N CPU worker processes")
    g.add_argument("--gpus", default=None, help="GPU numbers for the workers, e.g. 0,1")
    g.add_argument("--config", default=None, help="multigpu_config.yaml")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--idle-exit", type=float, default=None, metavar="S",
                      help="stop when every file is done and nothing new came for S seconds")
    stop.add_argument("--once", action="store_true",
                      help="take the clips in the folder now, wait for them (and their "
                           "checks and hooks), then stop")
    from chord_core.cli.watch_stream import add_stream_args

    add_stream_args(p)  # DIR may be a live stream (cli/watch_stream.py)
    model_args(p)


def cmd_watch(args: argparse.Namespace) -> int:
    from chord_core.streams.sources import is_stream

    if is_stream(args.dir):  # rtsp://, rtsps://, http(s)://….m3u8, /dev/videoN
        from chord_core.cli.watch_stream import cmd_watch_stream

        return cmd_watch_stream(args)
    from chord_core.config import model_config_from_env
    from chord_core.library.alerts import StandingChecks
    from chord_core.library.watch import FolderWatcher, WatchSettings
    from chord_core.media.roots import resolve_folder
    from chord_core.runtime.cluster import start_manager
    from chord_core.runtime.parallel_config import load_parallel_config
    from chord_core.runtime.store_read import StoreView

    cfg = model_config_from_env(model=args.model, device=args.device,
                                max_memory=args.max_memory, allow_offload=args.allow_offload)
    settings = WatchSettings(args.dir, args.task, args.query, cfg.model, args.max_new_tokens,
                             args.settle_s, args.rescan_s, tuple(args.statement),
                             args.threshold, args.hook)
    resolve_folder(args.dir)  # under the media roots: said before any worker starts
    if not 0.1 <= args.hook_timeout <= 3600:
        from chord_core.errors import ConfigError

        raise ConfigError(f"--hook-timeout {args.hook_timeout:g} is not 0.1–3600 seconds",
                          hint="e.g. --hook-timeout 30")
    store = StoreView.open()  # read here; the manager writes it
    parallel = load_parallel_config(args.config, overrides={
        "gpus": args.gpus, "cpu_workers": args.cpu_workers, "batch_size_per_gpu":
        args.batch_size})
    manager, plan = start_manager(cfg, parallel, store=store)  # chapters runs: parent jobs
    for line in plan.lines:
        print(f"plan: {line}", file=sys.stderr)
    try:
        watcher = FolderWatcher(manager, store, settings, on_row=_report)
        watcher.once, watcher.idle_exit = bool(args.once), args.idle_exit
        if settings.statements:
            StandingChecks(manager, store, watcher, on_hook=_report_hook,
                           hook_timeout_s=args.hook_timeout)
        print(f"watching {watcher.folder} ({settings.task}; watch "
              f"{watcher.settings.watch_id})", file=sys.stderr, flush=True)
        watcher.start()
        try:
            watcher.finished.wait()  # set by --once / --idle-exit; else until Ctrl-C
        finally:
            watcher.stop()
    finally:
        manager.shutdown()
        store.close()
    return 0


def _report(row: dict[str, Any]) -> None:
    """A file that ended: ``done: PATH``, ``error: PATH (why)`` or ``skipped: PATH (why)``."""
    from chord_core.cli.output import one_line

    why = f" ({row['error']})" if row.get("state") != "done" and row.get("error") else ""
    print(one_line(f"{row.get('state')}: {row.get('path')}{why}"), file=sys.stderr,
          flush=True)


def _report_hook(run: Any) -> None:
    from chord_core.cli.output import one_line

    print(one_line(run.line()), file=sys.stderr, flush=True)
