"""Qwen3-VL on GPUs (issue 17): random weights at a real shape, each workload against the naive
path, in the same run.

    python3 benchmarks/qwen3.py --shape 8b          # cuda:0; builds /tmp/chord-rand-q3-8b once
    python3 benchmarks/qwen3.py --cpu               # test-qwen3 on the CPU (harness smoke)

Workloads (``--workloads``, default ``decode,agree,w1,ground``):

* ``decode`` — tokens/s at batch 1 and 8, ours (fast decoder) vs naive ``generate``, and the
  memory-bandwidth bound measured in the same run (``speed.bench_decode``);
* ``agree`` — greedy tokens of ours vs naive (exact rows, teacher-forced top-1);
* ``w1`` — many 30-frame 448×252 clips described, clips/min, ours vs naive;
* ``ground`` — one clip grounded per frame (every sampled frame) and by two passes (the whole
  clip asked when the target is visible, then only the frames inside the spans): frames
  grounded and latency of each. Random weights cannot answer "when", so the first pass
  generates ``--span-tokens`` tokens (the length of a short JSON answer) and its TEXT is then
  fixed to ``--spans``; the request itself runs and is timed, and the result records whether
  the model's own answer parsed;
* ``w2x`` (opt-in) — W1 and per-frame W2 through worker processes on 1 and then 2 GPUs.

Writes JSON to ``--out`` after every workload (a run cut short still reports what it did).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed  # noqa: E402 — this folder: the scripts share helpers
from bench_common import ground_req, make_clips, timed  # noqa: E402

from chord_core.config import SamplingConfig  # noqa: E402

W1_WH = (448, 252)


def bench_ground(engine, clip: str, tokens: int, spans_text: str, span_tokens: int, batch: int,
                 repeats: int, res: dict) -> None:
    """Per-frame vs two-pass grounding of one clip: frames grounded, seconds. The first pass
    generates exactly ``span_tokens`` tokens (a real span answer is a short JSON list; a
    random model would otherwise run to the cap), then its text is replaced."""
    from chord_core.analysis import two_pass
    from chord_core.analysis.spans import parse_spans
    from chord_core.model import loading as m
    from chord_core.model.prompts import spans_prompt

    real = two_pass.ask_spans
    own: list[str] = []
    first_s: list[float] = []

    def fixed(lm, frames, meta, target, cancel=None):
        t0 = time.perf_counter()
        out = m.describe(lm, frames, meta, spans_prompt(target), span_tokens,
                         min_new_tokens=span_tokens, cancel=cancel)
        first_s.append(time.perf_counter() - t0)
        own.append(out.text)
        return replace(out, text=spans_text)

    per = replace(ground_req(clip, tokens, batch), score_boxes=False)
    two = replace(per, ground_method="two_pass")
    engine.analyze(per)  # warm-up
    t_per, r_per = timed(lambda: engine.analyze(per), repeats)
    two_pass.ask_spans = fixed
    try:
        engine.analyze(two)  # warm-up (the first-pass video shape)
        t_two, r_two = timed(lambda: engine.analyze(two), repeats)
    finally:
        two_pass.ask_spans = real
    grounded = r_two.grounded_frames
    res["ground"] = {
        "clip_s": r_per.video.duration_s, "sampled_frames": r_per.sampling.num_frames,
        "batch": batch, "tokens_per_frame_answer": tokens,
        "per_frame": {"frames_grounded": r_per.sampling.num_frames, "latency_s": t_per},
        "two_pass": {"method": r_two.method, "spans": [list(s) for s in r_two.spans],
                     "frames_grounded": r_two.sampling.num_frames if grounded is None
                     else len(grounded), "latency_s": t_two,
                     "first_pass_s": first_s[-1], "first_pass_tokens": span_tokens,
                     "first_pass_answer_fixed_to": spans_text,
                     "own_answer_parsed": parse_spans(own[-1] if own else "").usable},
        "latency_ratio_two_pass_vs_per_frame": t_two / t_per,
    }


def checkpoint(args) -> tuple[str, str]:
    """(model, device): test-qwen3 on the CPU, or the random-weight shape built on cuda:0."""
    if args.cpu:
        return "test-qwen3", "cpu"
    from chord_core.testing.tiny_qwen3 import build_checkpoint

    ckpt = Path(args.ckpt.format(shape=args.shape))
    if not (ckpt / "config.json").exists():
        t0 = time.perf_counter()
        build_checkpoint(ckpt, shape=args.shape, device="cuda")
        print(f"built {ckpt} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return str(ckpt), "cuda:0"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="8b", choices=("2b", "4b", "8b"))
    ap.add_argument("--ckpt", default="/tmp/chord-rand-q3-{shape}")
    ap.add_argument("--workloads", default="decode,agree,w1,ground")
    ap.add_argument("--clips", type=int, default=16, help="W1 clips for our path")
    ap.add_argument("--naive-clips", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--ground-tokens", type=int, default=32)
    ap.add_argument("--ground-seconds", type=float, default=30.0)
    ap.add_argument("--spans", default='[{"start": 12.0, "end": 18.0}]',
                    help="the first pass's answer text for the ground workload")
    ap.add_argument("--span-tokens", type=int, default=32,
                    help="tokens the first pass generates (its text is then --spans)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cpu", action="store_true", help="test-qwen3 on the CPU (harness smoke)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "qwen3.json"))
    args = ap.parse_args()
    work = set(args.workloads.split(","))
    if args.cpu:
        args.clips, args.naive_clips, args.tokens, args.ground_tokens = 3, 2, 128, 4
        args.repeats, args.ground_seconds, args.batch = 1, 6.0, 4
        args.spans = '[{"start": 1.0, "end": 2.0}]'
    model, device = checkpoint(args)
    res: dict = {"family": "qwen3-vl", "shape": "tiny" if args.cpu else args.shape,
                 "workloads": sorted(work)}
    root = Path(os.environ.get("CHORD_BENCH_DIR", "/tmp/chord-speed"))
    wh = W1_WH if not args.cpu else (112, 84)
    clips = make_clips(root / "q3w1", args.clips, 15.0 if not args.cpu else 2.0, wh)

    def save() -> None:
        Path(args.out).write_text(json.dumps(res, indent=2, default=str))

    lm_fast, lm_naive, e_fast, e_naive = speed.load_in_process(model, device, res)
    res["fast_decoder"] = lm_fast.decoder is not None
    save()
    if "decode" in work:
        speed.bench_decode({"naive": lm_naive, "ours": lm_fast}, clips, args.tokens,
                           args.repeats, res, args.cpu)
        save()
    if "agree" in work and lm_fast.decoder is not None:
        speed.bench_agree(lm_fast, lm_naive, clips, args.tokens, res)
        save()
    if "w1" in work:
        speed.bench_describe(e_fast, e_naive, clips, args.naive_clips, args.tokens,
                             SamplingConfig(fps=2.0), args.repeats, "w1", res)
        save()
    long_clip = make_clips(root / "q3w2", 1, args.ground_seconds, wh)[0]
    if "ground" in work:
        bench_ground(e_fast, long_clip, args.ground_tokens, args.spans, args.span_tokens,
                     args.batch, args.repeats, res)
        save()
    if "w2x" in work:
        from chord_core.model.loading import release_memory

        lm_fast = lm_naive = e_fast = e_naive = None  # noqa: F841 — workers load their own
        release_memory()
        gpus = 2 if args.cpu else speed.torch_gpus()
        n = len(clips) if args.cpu else 4 * args.batch * gpus
        speed.bench_workers(model, (clips * n)[:n], long_clip, args.tokens, args.ground_tokens,
                            args.batch, args.repeats, gpus, args.cpu, res)
        save()
    save()
    print(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
