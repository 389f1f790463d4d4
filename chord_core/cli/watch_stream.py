"""``python -m chord_core watch rtsp://…|rtsps://…|http(s)://….m3u8|/dev/videoN``: watch a
live stream — record it into segments under the data dir, describe every chunk, check the
standing statements (alerts) and ground ``--query`` with ``--task ground``. Runs until
Ctrl-C (or ``--stop-after S``); then the open segment is closed and its chunk analysed
before it exits. Prints the stream's states (the URL masked), each chunk as it is analysed
and each alert with its segment and second."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any


def add_stream_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("live streams (DIR is rtsp://, rtsps://, http(s)://….m3u8 or "
                             "/dev/videoN)")
    g.add_argument("--chunk-s", type=float, default=None,
                   help="seconds per recorded segment and analysed chunk (CHORD_LIVE_CHUNK_S, "
                        "default 10)")
    g.add_argument("--stop-after", type=float, default=None, metavar="S",
                   help="stop the stream after S seconds (its last chunk is still analysed)")
    g.add_argument("--stall-s", type=float, default=20.0,
                   help="no frame for this long: reconnect (default 20)")


def cmd_watch_stream(args: argparse.Namespace) -> int:
    from chord_core.config import default_data_dir, model_config_from_env
    from chord_core.errors import InputError
    from chord_core.runtime.cluster import start_manager
    from chord_core.runtime.parallel_config import load_parallel_config
    from chord_core.runtime.store_read import StoreView
    from chord_core.streams.background import live_settings
    from chord_core.streams.hub import StreamHub
    from chord_core.streams.ingest import IngestSettings
    from chord_core.streams.sources import parse_source

    source = parse_source(args.dir)  # a bad address is said before any worker starts
    if args.task in ("chapters", "entail") and not (args.task == "entail" and args.query):
        raise InputError(f"a live stream takes --task describe or ground, not {args.task}",
                         hint="standing checks: --statement TEXT (repeatable)")
    cfg = model_config_from_env(model=args.model, device=args.device,
                                max_memory=args.max_memory, allow_offload=args.allow_offload)
    statements = tuple(args.statement) + ((args.query,) if args.task == "entail" else ())
    settings = live_settings(
        cfg.model, chunk_s=args.chunk_s, statements=statements or None,
        threshold=args.threshold, max_new_tokens=args.max_new_tokens,
        prompt=args.query if args.task == "describe" else "",
        target=args.query if args.task == "ground" else "",
        ingest=IngestSettings(stall_s=args.stall_s), hook=args.hook or None)
    store = StoreView.open()  # read here; the manager writes it
    parallel = load_parallel_config(args.config, overrides={
        "gpus": args.gpus, "cpu_workers": args.cpu_workers, "batch_size_per_gpu":
        args.batch_size})
    manager, plan = start_manager(cfg, parallel, store=store)
    for line in plan.lines:
        print(f"plan: {line}", file=sys.stderr)
    hub = StreamHub(manager, store, default_data_dir())
    try:
        row = hub.start(args.dir, settings)
        print(f"watching {source.shown} (stream {row['id']}; chunks of "
              f"{settings.chunk_s:g} s under {hub.root / row['id']})", file=sys.stderr, flush=True)
        state = _follow(hub, row["id"], args.stop_after)
        hub.stop(row["id"])
        print("stopped: analysing the last chunks…", file=sys.stderr, flush=True)
        hub.wait_idle(300)
        _print_new(hub, row["id"], set(), set())
    finally:
        hub.shutdown()
        manager.shutdown()
        store.close()
    if state == "failed":
        final = hub.table.stream(row["id"]) or {}
        print(f"error: {final.get('last_error', 'the stream failed')}", file=sys.stderr)
        return 2
    return 0


def _follow(hub: Any, stream_id: str, stop_after: float | None) -> str:
    """Print states, chunks and alerts until Ctrl-C, ``stop_after`` or a failed stream
    (woken by the hub's ``changed`` event: nothing polls)."""
    stop = threading.Event()

    def interrupted(*_: Any) -> None:
        stop.set()
        hub.changed.set()

    old = signal.signal(signal.SIGINT, interrupted)
    began, last_state = time.monotonic(), ""
    seen_chunks: set[str] = set()
    seen_alerts: set[int] = set()
    try:
        while not stop.is_set():
            hub.changed.clear()  # before reading: a change meanwhile wakes the next wait
            info = hub.describe(stream_id)
            if info["state"] != last_state:
                last_state = info["state"]
                err = f" ({info['last_error']})" if info.get("last_error") else ""
                print(f"state: {last_state}{err}", file=sys.stderr, flush=True)
            _print_new(hub, stream_id, seen_chunks, seen_alerts)
            if last_state == "failed" or (stop_after is not None
                                          and time.monotonic() - began >= stop_after):
                break
            left = None if stop_after is None else stop_after - (time.monotonic() - began)
            hub.changed.wait(left)  # woken by a state change, a finished chunk, Ctrl-C
    finally:
        signal.signal(signal.SIGINT, old)
    return last_state


def _print_new(hub: Any, stream_id: str, chunks: set[str], alerts: set[int]) -> None:
    from chord_core.library.alerts import list_alerts

    for c in reversed(hub.table.chunks(stream_id, limit=20)):
        if c["state"] in ("recorded", "analysing") or c["path"] in chunks:
            continue
        chunks.add(c["path"])
        print(f"chunk {c['seq']}: {c['state']} {c['path']} ({c['duration_s']:.1f} s)",
              flush=True)
    for a in list_alerts(hub.index, watch=stream_id, limit=100):
        if a["id"] not in alerts:
            alerts.add(a["id"])
            print(f"alert: {a['statement']!r} at {a['start_s']:.1f} s of {a['path']} "
                  f"(P={a['probability']:.2f})", flush=True)
