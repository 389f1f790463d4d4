"""One long-video command's run (``chapters``, ``search``, ``ground-long`` in
:mod:`chord_core.longvideo.cli`): its executor (worker processes, or one model in this
process), the job store and the probed clip, closed together; a run that makes chapters
scans the clip for cuts while its workers load the model (``chapters.ScanAhead``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def settings_of(args: argparse.Namespace) -> Any:
    """The run's long-video settings from the command line (and the environment)."""
    from chord_core.longvideo.settings import settings_from_env

    return settings_from_env(threshold_s=args.long_after, chunk_s=args.chunk_s,
                             cuts=args.cuts, chapter_s=args.chapter_s,
                             describe_max_frames=args.frames_per_chunk,
                             max_new_tokens=args.max_new_tokens,
                             ground_fps=getattr(args, "fps", None)
                             if args.command == "ground-long" else None)


class Session:
    """The executor (workers or in-process), the store and the clip, closed together."""

    def __init__(self, args: argparse.Namespace, *, chapters: bool = False) -> None:
        from chord_core.analysis.request import probe_input
        from chord_core.config import model_config_from_env
        from chord_core.errors import ConfigError
        from chord_core.media.content_keys import file_hash
        from chord_core.runtime.store_read import StoreView

        if getattr(args, "batch_size", None) is not None and args.batch_size < 1:
            raise ConfigError(f"--batch-size must be at least 1, got {args.batch_size}",
                              hint="e.g. --batch-size 8")
        self.settings = settings_of(args)
        self.info = probe_input(args.video)
        if self.info.container == "image":
            raise ConfigError(f"{Path(args.video).name} is an image; long-video mode needs "
                              "a video", hint="use `describe` or `entail` for an image")
        self.key = file_hash(args.video)
        self.cfg = model_config_from_env(model=args.model, device=args.device,
                                         max_memory=args.max_memory,
                                         allow_offload=args.allow_offload)
        self.quiet = args.quiet
        self.reads: list[tuple[str, str]] = []  # (reader, note) of every job's result
        self.store = StoreView.open()  # the manager writes the run's rows
        for notice in self.store.notices:
            print(f"warning: {notice}", file=sys.stderr)
        self.executor, self.in_flight = self._start(args)
        self.scan: Any = None
        if args.in_process:  # the model loads in a thread of this one; the run goes on
            return
        # worker processes: a run that makes chapters scans the clip for cuts while they
        # load the model (a thread started after this process's imports are done)
        if chapters:
            from chord_core.longvideo.chapters import ScanAhead

            self.scan = ScanAhead(self.info, self.settings)
        try:
            self.executor.wait_ready()
        except BaseException:
            if self.scan is not None:
                self.scan.cancel()
            self.executor.shutdown()
            raise

    def _start(self, args: argparse.Namespace) -> tuple[Any, int]:
        from chord_core.longvideo.settings import chunks_in_flight, one_shot_config, one_shot_env

        if args.in_process:
            from chord_core.runtime.cluster import in_process_manager

            cfg = one_shot_config(self.cfg.with_overrides(batch_size=args.batch_size))
            # the manager writes the run's rows (a parent job and its chunks); it resumes only
            # this run's chunks (the run asks for them), not other jobs queued in the store
            return (in_process_manager(cfg, store=self.store, resume=False),
                    self.settings.in_flight or 2)
        from chord_core.runtime.cluster import start_manager
        from chord_core.runtime.parallel_config import load_parallel_config

        parallel = load_parallel_config(args.config, overrides={
            "gpus": args.gpus, "cpu_workers": args.cpu_workers,
            "batch_size_per_gpu": args.batch_size})
        manager, plan = start_manager(one_shot_config(self.cfg), parallel, store=self.store,
                                      resume=False, worker_env=one_shot_env())
        for line in plan.lines:
            self.say(f"plan: {line}")
        width = len(plan.specs) * max(1, parallel.batch_size_per_gpu)
        return manager, chunks_in_flight(width, self.settings.in_flight)

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def saw(self, result: Any) -> None:
        """A job's result came back: remember which reader read its frames."""
        self.reads.append((result.sampling.reader, result.sampling.reader_note))

    def say_reader(self) -> None:
        """The one line saying which reader ran (``media.readers.reader_line``)."""
        from chord_core.media.readers import reader_line

        self.say(reader_line(self.reads))

    def progress(self, event: Any) -> None:
        self.say(f"{event.elapsed_s:7.1f}s  {event.message}")

    def close(self) -> None:
        if self.scan is not None:  # a scan no run asked for (an error before it) stops
            self.scan.cancel()
        self.executor.shutdown()
        self.store.close()
