"""Command line: ``python -m chord_core {probe,describe,ground,make-tiny-model} …``.

Exit codes: 0 ok, 2 bad input or usage, 1 internal error, 130 interrupted, 141 the reader of
stdout closed it (`| head`). Errors are one ``error:`` line plus
a ``hint:`` line on stderr — never a traceback (set CHORD_DEBUG=1 to see one).
Results are ``chord.result/v1`` JSON on stdout, or in the file given by ``--json``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Sequence

from chord_core.cli.batch import cmd_batch
from chord_core.cli.example import cmd_example_clip
from chord_core.cli.output import ProgressLine, emit, sampling_from
from chord_core.cli.remote import add_args as _where_args
from chord_core.cli.remote import choose_server, run_remote
from chord_core.config import (
    MAX_NEW_TOKENS_DEFAULT,
    env_value,
    model_config_from_env,
)
from chord_core.errors import ChordError, ConfigError
from chord_core.families import FAMILIES
from chord_core.cli.remote_long import LONG_VIDEO_COMMANDS  # a running service first
from chord_core.longvideo.cli import run_if_long
from chord_core.media.native_logs import quiet_native_logs

log = logging.getLogger("chord_core.cli")


def _sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--fps", type=float, default=None,
                   help="frames per second to sample (default: automatic by task and length)")
    g.add_argument("--max-frames", type=int, default=None, help="cap on sampled frames")
    g.add_argument("--max-pixels", type=int, default=None,
                   help="per-frame pixel cap (multiples of 28×28 are used)")
    g.add_argument("--token-budget", type=int, default=None,
                   help="visual-token budget per model request (default 24000)")


def _model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default=None,
                   help="hub id, local folder, or 'test' (default: $CHORD_MODEL or "
                        "Qwen/Qwen2.5-VL-3B-Instruct)")
    g.add_argument("--device", default=None, help="auto (default), cpu, cuda, cuda:N")
    g.add_argument("--max-memory", default=None,
                   help="per-GPU cap: fraction (0.9) or size (20GiB)")
    g.add_argument("--allow-offload", action="store_true", default=None,
                   help="allow weights on CPU/disk when GPUs are present (slow)")
    g.add_argument("--batch-size", type=int, default=None, help="frames per generate call")


def _placement_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategy", default=None,
                   help="where the model goes: auto (default: one GPU when it fits, else the "
                        "fewest GPUs), single, or shard (over every visible GPU)")


def _long_after_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--long-after", type=float, default=None, metavar="SECONDS",
                   help="a clip longer than this is a long video: describe makes chapters, "
                        "ground runs in chunks over the whole clip (default: "
                        "$CHORD_LONG_VIDEO_S or 600; inf: never)")


def _output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT",
                   help="write the result JSON here instead of stdout")
    p.add_argument("--annotated-video", default=None, metavar="OUT.mp4",
                   help="also write an MP4 with the boxes drawn")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--no-store", action="store_true",
                   help="keep no job of a run in this process (by default it is stored in "
                        "the data dir: History, export and search find it)")


class _Parser(argparse.ArgumentParser):
    """argparse keeping the CLI's promise: usage mistakes are one ``error:`` line and one
    ``hint:`` line (exit 2); an unknown option that is an existing file gets the ``--`` hint."""

    _argv: list[str] = []

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):  # type: ignore[override]
        dashed = [a for a in self._argv if len(a) > 1 and a.startswith("-")
                  and os.path.lexists(a)]
        print(f"error: {message}", file=sys.stderr)
        if dashed:
            print(f"hint: put -- before file names starting with '-', e.g. "
                  f"`{self.prog} -- {dashed[0]}`", file=sys.stderr)
        else:
            print(f"hint: see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(2)


def _check_args(args: argparse.Namespace) -> None:
    """Option values argparse cannot judge, refused before any work starts."""
    batch = getattr(args, "batch_size", None)
    if batch is not None and batch < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {batch}",
                          hint="give frames per generate call, e.g. --batch-size 8, or leave "
                               "it out for the default")
    spec = getattr(args, "max_memory", None)
    if spec is not None:
        from chord_core.model.placement import parse_max_memory

        # the real GPU sizes are known only later: any ordinal, a size no cap exceeds
        parse_max_memory(spec, {i: 1 << 60 for i in range(64)})


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m chord_core", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("probe", help="show what a video file really contains, and sampling plans")
    p.add_argument("video")
    _sampling_args(p)
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT")

    p = sub.add_parser("describe", help="describe a clip in words")
    p.add_argument("video")
    p.add_argument("--prompt", default="", help="what to ask (default: a detailed description)")
    p.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS_DEFAULT,
                   help="maximum generated tokens, 128–2048 (default 512)")
    _sampling_args(p), _model_args(p), _placement_args(p), _output_args(p), _long_after_arg(p)
    _where_args(p)

    p = sub.add_parser("ground", help="find a target: boxes with timestamps, tracks, segments")
    p.add_argument("video")
    p.add_argument("target", help='what to find, e.g. "the cyclist in a red helmet"')
    p.add_argument("--method", choices=("per_frame", "two_pass"), default="per_frame",
                   help="per_frame: ground every sampled frame (exact); two_pass: ask the clip "
                        "when the target is visible, ground only those frames (Qwen3-VL)")
    p.add_argument("--scores", action="store_true",
                   help="give every box a score: the probability that its crop shows the "
                        "target (one extra prefill per box; slower)")
    _sampling_args(p), _model_args(p), _placement_args(p), _output_args(p), _long_after_arg(p)
    _where_args(p)

    p = sub.add_parser("entail", help="check a statement against a clip or an image: a "
                                      "verdict, a probability curve over time, the moments")
    p.add_argument("video", help="a video, or an image (png, jpg, webp, bmp)")
    p.add_argument("statement", help='what should be true, e.g. "a person opens the car door"')
    _sampling_args(p), _model_args(p), _placement_args(p), _output_args(p), _where_args(p)

    p = sub.add_parser("batch", help="analyse many clips on all workers; resumable")
    p.add_argument("videos", nargs="+", metavar="VIDEO_OR_DIR")
    p.add_argument("--task", choices=("describe", "ground", "entail"), required=True)
    p.add_argument("--query", default="", help="target (ground) or prompt (describe)")
    p.add_argument("--out", required=True, help="folder for one JSON per clip + summary.json")
    p.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS_DEFAULT)
    g = p.add_argument_group("parallel")
    g.add_argument("--config", default=None, help="multigpu_config.yaml")
    g.add_argument("--gpus", default=None, help="CUDA ordinals to use, e.g. 0,1")
    g.add_argument("--num-gpus", type=int, default=None)
    g.add_argument("--strategy", default=None, help="auto, replicate (data_parallel), shard")
    g.add_argument("--cpu-workers", type=int, default=None,
                   help="run N CPU worker processes (no GPU needed)")
    g.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where the workers run: local processes (default) or a Ray cluster")
    g.add_argument("--ray-address", default="auto", metavar="auto|HOST:PORT",
                   help="the Ray cluster (auto: the one this machine joined with `ray start`)")
    _sampling_args(p), _model_args(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("export", help="write a stored result (a job id) as JSON")
    p.add_argument("job_id", help="as named by an error, the History page or summary.json")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT")
    p.add_argument("--coco", default=None, metavar="DIR", help="a grounding result as a COCO "
                   "dataset: the sampled frames and their boxes, under DIR/coco/")
    p.add_argument("--yolo", default=None, metavar="DIR", help="…as a YOLO dataset, under "
                   "DIR/yolo/ (images, labels, data.yaml)")

    from chord_core.longvideo.cli import add_parsers as add_long_video_parsers
    from chord_core.service.cli import (
        add_parser as add_serve_parser,  # light: argparse only
    )

    from chord_core.cli.example import add_parser as add_example_parser

    add_serve_parser(sub, _model_args)
    add_example_parser(sub)
    add_long_video_parsers(sub, lambda p: (_model_args(p), _where_args(p)))  # + --server
    from chord_core.cli.library import add_library_args

    add_library_args(sub.choices["search"])  # search: the library, or inside one long video
    from chord_core.cli.watch import add_parser as add_watch_parser

    add_watch_parser(sub, _model_args)
    from chord_core.cli.review import add_parsers as add_review_parsers

    add_review_parsers(sub, _model_args)  # review, ask

    p = sub.add_parser("make-tiny-model",
                       help="write a random-weight Qwen2.5-VL or Qwen3-VL checkpoint")
    p.add_argument("dir")
    p.add_argument("--family", choices=tuple(FAMILIES), default="qwen2.5-vl")
    p.add_argument("--shape", choices=("tiny", "2b", "3b", "4b", "7b", "8b"), default="tiny",
                   help="tiny (< 2 MB, tests) or a real shape for GPU benchmarks: 3b/7b "
                        "(qwen2.5-vl), 2b/4b/8b (qwen3-vl)")
    p.add_argument("--device", default="cpu", help="where to initialise the weights")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", metavar="FILE", help="take the vocabulary from a BPE rank file "
                   "(Qwen's qwen.tiktoken): real prompt lengths for benchmarks (qwen2.5-vl)")
    return parser


def cmd_probe(args: argparse.Namespace) -> int:
    from chord_core.media.probe import probe
    from chord_core.media.sampling import plan_sampling
    from chord_core.runtime.outputs import check_file

    check_file(args.json_out, "the JSON output")
    info = probe(args.video)
    sampling = sampling_from(args)
    plans = {task: plan_sampling(info, task, sampling).to_dict() for task in ("describe", "ground")}
    emit({"video": info.to_dict(), "plans": plans}, args.json_out)
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.runtime import outputs

    outputs.check_file(args.json_out, "the JSON output")  # before any work, not after it
    outputs.check_file(args.annotated_video, "the annotated video")
    task = args.command
    query = {"describe": getattr(args, "prompt", ""), "ground": getattr(args, "target", ""),
             "entail": getattr(args, "statement", "")}[task]
    request = AnalysisRequest(
        video_path=args.video, task=task, query=query, sampling=sampling_from(args),
        max_new_tokens=getattr(args, "max_new_tokens", MAX_NEW_TOKENS_DEFAULT),
        batch_size=args.batch_size,  # the annotated video is made below, after the JSON
        ground_method=getattr(args, "method", "per_frame"),
        score_boxes=bool(getattr(args, "scores", False)))
    if task in ("describe", "ground"):  # past the threshold: chapters / long grounding
        code = run_if_long(args, request.sampling)
        if code is not None:
            return code
    url, why = choose_server(args)
    if url is not None:  # a running service has the model loaded: no load here
        doc = run_remote(url, why, args, query, ProgressLine(args.quiet))
        emit(doc, args.json_out)
        _say_reader(args, [(doc.get("sampling", {}).get("reader", ""),
                            doc.get("sampling", {}).get("reader_note", ""))])
        return 0
    log.info("running in this process: %s", why)
    cfg = model_config_from_env(model=args.model, device=args.device,
                                max_memory=args.max_memory, allow_offload=args.allow_offload,
                                strategy=args.strategy)
    if cfg.compile is None:  # one clip per process: compiling costs more than it saves
        cfg = cfg.with_overrides(compile=False)
    progress = ProgressLine(args.quiet)
    from chord_core.cli.local_run import run_local

    result, stored = run_local(cfg, request, progress, store=not args.no_store)  # searchable
    try:
        emit(result.to_dict(), args.json_out)
    except OSError as exc:  # e.g. the disk filled up during the analysis
        raise outputs.keep_result(result.to_dict(), args.json_out, exc, model=cfg.model,
                                  stored=stored) from None
    if args.annotated_video:  # the result is safe first: a full disk now costs only the video
        outputs.write_annotated_video(result, args.annotated_video, progress,
                                      saved_as=args.json_out or "stdout")
    _say_reader(args, [(result.sampling.reader, result.sampling.reader_note)])
    if result.model.test_model:
        print("note: test model — random weights; its text is meaningless", file=sys.stderr)
    return 0


def _say_reader(args: argparse.Namespace, reads: list[tuple[str, str]]) -> None:
    """One line on stderr (unless -q): which frame reader ran, and why a faster one did not."""
    from chord_core.media.readers import reader_line

    if not args.quiet:
        print(reader_line(reads), file=sys.stderr, flush=True)


def cmd_export(args: argparse.Namespace) -> int:
    from chord_core.runtime.store_read import StoreView

    with StoreView.open() as store:
        doc = store.get_result(args.job_id)
        where = store.path
    if doc is None:
        raise ChordError(f"no stored result for job {args.job_id} in {where}",
                         hint="check the job id; CHORD_DATA_DIR must be the same as when it ran")
    if args.coco or args.yolo:
        return _export_datasets(doc, args)
    emit(doc, args.json_out)
    return 0


def _export_datasets(doc: dict, args: argparse.Namespace) -> int:
    """``export JOB --coco DIR / --yolo DIR``: the clip read again under the media roots."""
    from chord_core.analysis.dataset_export import export
    from chord_core.media.roots import check_regular_video
    from chord_core.types import Result

    result = Result.from_dict(doc)
    clip = check_regular_video(result.video.path)
    for fmt, out in (("coco", args.coco), ("yolo", args.yolo)):
        if out:
            folder = export(result, clip, out, fmt)
            print(f"wrote the {fmt.upper()} dataset to {folder}", file=sys.stderr)
    return 0


def cmd_make_tiny_model(args: argparse.Namespace) -> int:
    from chord_core.testing.checkpoints import family_builder

    build = family_builder(args.family)[1]  # shape checked there (ConfigError, exit 2)
    extra = {"vocab_file": args.vocab} if args.vocab else {}
    path = build(Path(args.dir), shape=args.shape, seed=args.seed, device=args.device, **extra)
    print(f"wrote random-weight {args.family} {args.shape} checkpoint to {path}",
          file=sys.stderr)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from chord_core.service.cli import cmd_serve as serve  # FastAPI only when serving

    return serve(args)


COMMANDS = {"probe": cmd_probe, "batch": cmd_batch, "describe": cmd_analyze, "ground": cmd_analyze,
            "entail": cmd_analyze,
            "export": cmd_export, "serve": cmd_serve, "make-tiny-model": cmd_make_tiny_model}
COMMANDS.update(LONG_VIDEO_COMMANDS)
COMMANDS["example-clip"] = cmd_example_clip


def cmd_search(args: argparse.Namespace) -> int:
    from chord_core.cli.library import cmd_search as search

    return search(args, LONG_VIDEO_COMMANDS["search"])


def cmd_watch(args: argparse.Namespace) -> int:
    from chord_core.cli.watch import cmd_watch as watch

    return watch(args)


def cmd_review(args: argparse.Namespace) -> int:
    from chord_core.cli.review import cmd_review as review

    return review(args)


def cmd_ask(args: argparse.Namespace) -> int:
    from chord_core.cli.review import cmd_ask as ask

    return ask(args)


COMMANDS["search"] = cmd_search
COMMANDS["watch"] = cmd_watch
COMMANDS["review"] = cmd_review
COMMANDS["ask"] = cmd_ask


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from chord_core.gpus.devices import apply_device_order

    apply_device_order()  # GPU numbers mean what nvidia-smi shows, unless the user chose
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    quiet_native_logs(args.verbose)
    try:
        _check_args(args)
        return COMMANDS[args.command](args)
    except ChordError as exc:
        ProgressLine.end()
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_gone()
    except Exception as exc:  # noqa: BLE001 — the CLI contract: one line, no traceback
        if env_value("CHORD_DEBUG"):
            raise
        ProgressLine.end()
        print(f"error: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("hint: this is a bug in Chord; rerun with CHORD_DEBUG=1 for the traceback "
              "and report it", file=sys.stderr)
        return 1



def _reader_gone() -> int:
    """``… | head``: the reader closed the pipe, which is its choice, not a bug. Exit as a
    tool killed by SIGPIPE does (128 + 13), silently; stdout goes to /dev/null so Python's
    own flush at exit does not raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


if __name__ == "__main__":
    from chord_core.threads import exit_now

    exit_now(main())
