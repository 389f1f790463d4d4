"""``python -m chord_core batch``: many clips on every worker, resumable."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from chord_core.cli.output import ProgressLine, batch_bar, sampling_from
from chord_core.config import model_config_from_env
from chord_core.errors import exit_code_for


def cmd_batch(args: argparse.Namespace) -> int:
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.runtime import batch as batch_mod
    from chord_core.runtime.batch import collect_videos, run_batch
    from chord_core.runtime.cluster import start_manager
    from chord_core.runtime.outputs import check_folder
    from chord_core.runtime.parallel_config import load_parallel_config
    from chord_core.runtime.store_read import StoreView

    videos = collect_videos(args.videos)
    request = AnalysisRequest(str(videos[0]), args.task, args.query, sampling_from(args),
                              args.max_new_tokens)
    parallel = load_parallel_config(args.config, overrides={
        "gpus": args.gpus, "num_gpus": args.num_gpus, "strategy": args.strategy,
        "cpu_workers": args.cpu_workers, "batch_size_per_gpu": args.batch_size})
    cfg = model_config_from_env(model=args.model, device=args.device,
                                max_memory=args.max_memory, allow_offload=args.allow_offload)
    check_folder(args.out, "batch results")  # before the workers load a model
    store = StoreView.open()  # the manager writes it; run_batch reads results back
    for notice in store.notices:
        print(f"warning: {notice}", file=sys.stderr)
    manager, plan = start_manager(cfg, parallel, store=store, executor=args.executor,
                                  ray_address=args.ray_address)
    for line in plan.lines:
        print(f"plan: {line}", file=sys.stderr)
    stopped = False
    try:
        with batch_mod.stop_on_sigterm():
            t0 = time.time()
            manager.wait_ready()
            print(f"plan: workers ready in {time.time() - t0:.1f} s", file=sys.stderr)
            summary = run_batch(manager, store, videos, request, Path(args.out),
                                model=cfg.model,
                                on_update=None if args.quiet else batch_bar(len(videos)))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: stop now, keep the queue
        stopped = True
        ProgressLine.end()
        raise batch_mod.stopped(exc) from None
    finally:
        manager.shutdown(abort=stopped)
    problem = manager.store_problem()  # e.g. a full disk under the store: results are files
    if problem:
        print(f"\nwarning: {problem['message']}\nhint: {problem['hint']}", file=sys.stderr)
    summary.plan = plan.to_dict()
    counts = summary.counts()
    print(f"\n{len(videos)} clip(s): " + ", ".join(f"{v} {k}" for k, v in counts.items())
          + f"; wall {summary.wall_s:.1f} s, speed-up {summary.speedup:.2f}× "
          f"(Σ busy / wall); results in {args.out}", file=sys.stderr)
    errors = [i.error or {} for i in summary.items if i.state == "failed"]
    if summary.unwritten():
        raise batch_mod.unwritten_error(summary, Path(args.out), store.path)
    if not errors:
        return 0
    # exit 2 when every failure was the input's (by class: errors.EXIT_CODES), else 1
    return 2 if all(exit_code_for(e) == 2 for e in errors) else 1
