"""Visual entailment throughput (issue 13): pairs/s for 448×448 images (≈ 256 visual tokens).
``--images photos``: unique JPEG crops of real photographs, 500 × 375 (≈ 240 visual tokens).

    python3 benchmarks/entail.py --shape 7b --pairs 512 --out $OUT/entail.json

- ``naive``: transformers ``generate`` one pair at a time, one new token, reading the first
  answer token's probabilities (what a script without Chord would do);
- ``engine``: ``Engine.entail_many`` in this process, one GPU;
- ``workers-1`` / ``workers-2``: entail jobs through the JobManager and worker processes on
  1 and 2 GPUs (what the app and the service run);
- ``service-1`` / ``service-2``: ``POST /batch_predict`` to ``python -m chord_core serve`` on
  1 and 2 GPUs, with the overhead against the same jobs submitted in-process;
- ``service-threads`` (part ``service-threads``): the same on 1 GPU with the bodies read on
  the service's own threads (``CHORD_API_READERS=0``) instead of its reader processes;
- ``box-scores``: what scoring grounding boxes costs against grounding the same frames;
- ``ofa-loop``: OFA-VE's seed client's own loop through ``serve`` on one GPU: ``--tasks`` (32)
  tasks a request, one request after another, every pair unique (an image and a statement
  never sent before: the content-key cache answers none), then the same requests again
  (repeated pairs, answered from the store);
- ``naive`` (alone): the naive path's pairs/s without the engine rows, the loop's baseline;
- ``halves``: one worker call of ``--tasks`` pairs in process, scored as one pass against
  two halves (issue 36: the second half read while the first is scored), alternated.

``--cpu`` runs it all on the CPU with the test model (a harness check, not a figure).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench_common import timed
from photos import SOURCE_DIR as PHOTO_SOURCES
from photos import describe as describe_images
from photos import make_photos

ROOT = Path(__file__).resolve().parents[1]


def make_images(folder: Path, n: int, side: int) -> list[str]:
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        p = folder / f"e{side}_{i}.png"
        if not p.exists():
            Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    return paths


def requests_for(paths: list[str]) -> list:
    from chord_core.analysis.request import AnalysisRequest

    return [AnalysisRequest(p, "entail", statement(i)) for i, p in enumerate(paths)]


def statement(i: int) -> str:  # the same texts in process and through the service
    return f"the picture shows object number {i}"


def bench_in_process(model: str, device: str, paths: list[str], naive_pairs: int,
                     batch: int, box_scores: bool) -> dict:
    import torch

    from chord_core.analysis import entailment as ent
    from chord_core.analysis.engine import Engine
    from chord_core.config import ModelConfig

    engine = Engine(ModelConfig(model=model, device=device, compile=False, batch_size=batch))
    lm = engine.load()
    reqs = requests_for(paths)
    engine.entail_many(reqs[:64])  # warm-up (and the one check of the device-built inputs)
    t, out = timed(lambda: engine.entail_many(reqs))
    bad = [r for r in out if not hasattr(r, "entailment")]
    if bad:
        raise SystemExit(f"engine: {len(bad)} failed: {bad[:2]}")
    res = {"engine_pairs_per_s": len(reqs) / t, "visual_tokens": out[0].sampling.visual_tokens,
           "input_wh": out[0].sampling.input_wh, "batch": batch,
           "inputs_on_device": bool(getattr(lm, "_chord_image_batch", False))}
    res.update(profile_batch(engine, lm, reqs[:batch], out[:batch]))
    # the same engine with the processor building every batch on the CPU (before issue 13's
    # second round): the same-run ratio of the device-built inputs and the overlap
    object.__setattr__(lm, "_chord_image_batch", False)
    part = reqs[:256]
    t_cpu, _ = timed(lambda: engine.entail_many(part))
    object.__setattr__(lm, "_chord_image_batch", res["inputs_on_device"])
    res["engine_processor_inputs_pairs_per_s"] = len(part) / t_cpu
    ids = ent.answer_token_ids(lm.processor.tokenizer)
    frames = [engine.read_frames(o.video, o.sampling)[0][0] for o in out[:naive_pairs]]

    def naive() -> None:
        for img, req in zip(frames, reqs):
            text = lm.processor.apply_chat_template(ent.entail_messages(req.query),
                                                    tokenize=False, add_generation_prompt=True)
            inputs = ent._processor_inputs(lm, [img], [text]).to(lm.input_device)
            with torch.inference_mode():
                gen = lm.model.generate(**inputs, max_new_tokens=1, do_sample=False,
                                        output_scores=True, return_dict_in_generate=True)
            probs = torch.softmax(gen.scores[0].float(), -1)
            [float(probs[0, ids[k]].sum()) for k in ent.LABELS]

    naive()  # warm-up
    t, _ = timed(naive)
    res["naive_pairs_per_s"] = len(frames) / t
    res["engine_over_naive"] = res["engine_pairs_per_s"] / res["naive_pairs_per_s"]
    if box_scores:
        res.update(bench_box_scores(engine, lm))
    return res


def profile_batch(engine, lm, reqs: list, results: list) -> dict:
    """Where one batch's time goes: reading the images, building the inputs (the processor
    on the CPU vs on the device), and the prefill. Medians of 3, GPU work included."""
    from chord_core.analysis import entailment as ent
    from chord_core.model.image_batch import image_batch_inputs

    n = len(reqs)
    t_read, frames = timed(lambda: [engine.read_frames(o.video, o.sampling)[0][0]
                                    for o in results], 3)
    texts = [lm.processor.apply_chat_template(ent.entail_messages(r.query), tokenize=False,
                                              add_generation_prompt=True) for r in reqs]
    t_proc, inputs = timed(lambda: ent._processor_inputs(lm, frames, texts), 3)
    t_dev, _ = timed(lambda: image_batch_inputs(lm, frames, texts, None), 3)
    t_pre, _ = timed(lambda: ent._prefill(lm, inputs), 3)
    return {"profile_pairs": n, "profile_read_s": t_read, "profile_processor_inputs_s": t_proc,
            "profile_device_inputs_s": t_dev, "profile_prefill_s": t_pre,
            "profile_prefill_tokens": int(inputs["attention_mask"].sum()),
            "tokens_per_pair": int(inputs["attention_mask"].sum()) / n}


def bench_box_scores(engine, lm) -> dict:
    """Grounding 32 frames vs scoring two boxes on each of them (canned answers: random
    weights rarely write parseable boxes)."""
    import numpy as np

    from chord_core.analysis.box_scores import score_outputs
    from chord_core.analysis.ground_chunks import FrameOutput
    from chord_core.model.loading import ground_images

    rng = np.random.default_rng(2)
    frames = rng.integers(0, 255, (32, 728, 1288, 3), dtype=np.uint8)
    t_ground, _ = timed(lambda: ground_images(lm, list(frames), "the green square",
                                              batch_size=16, max_new_tokens=32,
                                              min_new_tokens=32))
    text = '[{"bbox_2d": [100, 80, 420, 400]}, {"bbox_2d": [700, 300, 900, 650]}]'
    outs = [FrameOutput(i, i / 2, text, (1288, 728)) for i in range(len(frames))]
    score_outputs(lm, outs[:4], frames[:4], "the green square")  # warm-up
    t_score, _ = timed(lambda: score_outputs(lm, outs, frames, "the green square"))
    return {"ground_32_frames_s": t_ground, "score_64_boxes_s": t_score,
            "box_scores_cost_pct": 100 * t_score / t_ground}


def bench_workers(model: str, paths: list[str], gpus: tuple[int, ...], cpu: bool,
                  batch: int = 32) -> float:
    from chord_core.config import ModelConfig
    from chord_core.runtime.jobs import JobSpec, JobState
    from chord_core.runtime.manager import JobManager
    from chord_core.runtime.workers import cpu_specs, gpu_specs

    cfg = ModelConfig(model=model, batch_size=batch, compile=False)  # entail never decodes
    specs = cpu_specs(len(gpus), cfg, threads=1) if cpu else \
        gpu_specs(tuple((g,) for g in gpus), cfg)
    manager = JobManager(specs)
    try:
        manager.wait_ready()
        reqs = requests_for(paths)
        warm = [manager.submit(JobSpec(r)) for r in reqs[:64]]
        [manager.wait(j, 600) for j in warm]
        busy0 = sum(w["busy_s"] for w in manager.workers())
        t0 = time.perf_counter()
        ids = [manager.submit(JobSpec(r)) for r in reqs]
        finals = [manager.wait(j, 600) for j in ids]
        wall = time.perf_counter() - t0
        if any(f.state is not JobState.DONE for f in finals):
            raise SystemExit("workers: some entail jobs failed")
        busy = sum(w["busy_s"] for w in manager.workers()) - busy0
        print(f"workers on {len(gpus)} GPU(s): {len(reqs) / wall:.1f} pairs/s; the workers "
              f"were in model calls {100 * busy / wall / len(gpus):.0f} % of the wall time",
              file=sys.stderr)
        return len(reqs) / wall
    finally:
        manager.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_service(model: str, paths: list[str], gpus: str, cpu: bool,
                  readers: str | None = None) -> float | None:
    """pairs/s through POST /batch_predict, 64 tasks per request, 4 requests in flight;
    ``readers`` sets CHORD_API_READERS (None: the service's default)."""
    from concurrent.futures import ThreadPoolExecutor

    port = _free_port()
    cmd = [sys.executable, "-m", "chord_core", "serve", "--port", str(port), "--model", model]
    cmd += ["--cpu-workers", "1"] if cpu else ["--gpus", gpus]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "CHORD_BATCH_SIZE": "32",
                                            **({"CHORD_API_READERS": readers} if readers
                                               else {})})
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 400
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(1)
        else:
            raise SystemExit("service did not become ready")
        images = [base64.b64encode(Path(p).read_bytes()).decode() for p in paths]
        bodies = [json.dumps({"tasks": [{"image_data": img, "text": statement(i + k)}
                                        for k, img in enumerate(images[i:i + 64])]}).encode()
                  for i in range(0, len(images), 64)]

        def post(body: bytes) -> int:
            req = urllib.request.Request(base + "/batch_predict", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=600) as r:
                return len(json.loads(r.read())["predictions"])

        def busy() -> float:  # seconds the workers have spent in model calls
            with urllib.request.urlopen(base + "/health", timeout=10) as r:
                return sum(w["busy_s"] for w in json.loads(r.read())["workers"])

        post(bodies[0])  # warm-up
        busy0, t0 = busy(), time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            done = sum(pool.map(post, bodies))
        wall = time.perf_counter() - t0
        share = (busy() - busy0) / wall / (1 if cpu else len(gpus.split(",")))
        print(f"service on GPUs {gpus}: {done / wall:.1f} pairs/s; the workers were in model "
              f"calls {100 * share:.0f} % of the wall time", file=sys.stderr)
        return done / wall
    finally:
        proc.terminate()
        proc.wait(30)


class Served:
    """``python -m chord_core serve`` on a free port for the test's lifetime (``env`` added),
    on a data folder of its own (a fresh store: no pair was scored before, whatever earlier
    runs on this machine scored; removed at the end)."""

    def __init__(self, model: str, gpus: str, cpu: bool, env: dict | None = None) -> None:
        import tempfile

        self.data = tempfile.mkdtemp(prefix="chord-entail-serve-")
        env = {"CHORD_DATA_DIR": self.data, **(env or {})}
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "chord_core", "serve", "--port", str(self.port),
               "--model", model]
        cmd += ["--cpu-workers", "1"] if cpu else ["--gpus", gpus]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "CHORD_BATCH_SIZE": "32",
                                          **(env or {})})

    def __enter__(self) -> "Served":
        deadline = time.time() + 400
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("serve ended: " + (self.proc.stderr.read() or "")[-2000:])
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(1)
        raise SystemExit("service did not become ready")

    def __exit__(self, *exc: object) -> None:
        import shutil

        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.data, ignore_errors=True)

    def cpu_s(self) -> dict:
        """CPU seconds so far of the service process, its reader processes and its worker
        (the child holding the most memory): a per-request cost that a busy machine does not
        inflate as it does wall time."""
        try:
            import psutil
        except ImportError:  # not on every GPU host: the figures are then left out
            return {}
        main = psutil.Process(self.proc.pid)
        kids = [k for k in main.children(recursive=True)
                if "resource_tracker" not in " ".join(k.cmdline())]
        worker = max(kids, key=lambda k: k.memory_info().rss) if kids else None

        def cpu(p) -> float:
            t = p.cpu_times()
            return t.user + t.system

        return {"service": cpu(main), "worker": cpu(worker) if worker else 0.0,
                "readers": sum(cpu(k) for k in kids if k is not worker)}

    def post(self, body: bytes, stages: dict | None = None) -> dict:
        """The answer; ``stages`` given, the seconds of each stage the answer's
        ``Server-Timing`` header names are added to it."""
        req = urllib.request.Request(self.base + "/batch_predict", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            if stages is not None:
                for part in (r.headers.get("Server-Timing") or "").split(","):
                    name, _, dur = part.strip().partition(";dur=")
                    if dur:
                        stages[name] = stages.get(name, 0.0) + float(dur) / 1000
            return json.loads(r.read())

    def job_timing(self, job_id: str) -> dict:
        with urllib.request.urlopen(f"{self.base}/v1/jobs/{job_id}/result", timeout=30) as r:
            return json.loads(r.read()).get("timing") or {}


def ofa_body(paths: list[str], first: int, prefix: str = "") -> bytes:
    """One request as OFA-VE's seed client builds it: each image file read and base64-encoded,
    one statement per task, the JSON dumped — inside the client's loop."""
    tasks = [{"image_data": base64.b64encode(Path(p).read_bytes()).decode(),
              "text": prefix + statement(first + k), "id": first + k}
             for k, p in enumerate(paths)]
    return json.dumps({"tasks": tasks}).encode()


def bench_ofa_loop(model: str, paths: list[str], cpu: bool, tasks: int = 32,
                   env: dict | None = None, gpus: str = "0") -> dict:
    """OFA-VE's seed client's loop through ``serve``: ``tasks`` tasks a request, one request
    after another (the next is sent when the answer is in), every pair UNIQUE (an image and
    a statement never sent before, so the content-key cache answers none); then the same
    requests sent again (answered from the store: the repeated-pairs row)."""
    with Served(model, gpus, cpu, env) as srv:  # several GPUs: idle workers share a request
        srv.post(ofa_body(paths[:tasks], 0, "warm-up: "))  # its statements are never reused
        chunks = [(i, paths[i:i + tasks]) for i in range(0, len(paths), tasks)]
        cpu0 = srv.cpu_s()
        lat, done, t0, stages, jobs = [], 0, time.perf_counter(), {"client body": 0.0}, []
        for i, part in chunks:
            t = time.perf_counter()
            body = ofa_body(part, i)
            stages["client body"] += time.perf_counter() - t
            out = srv.post(body, stages)["predictions"]
            lat.append(time.perf_counter() - t)
            done += sum(1 for p in out if "entailment" in p)
            jobs += [p["job_id"] for p in out if "job_id" in p]
        wall = time.perf_counter() - t0
        cpu1 = srv.cpu_s()
        worker = {"read": 0.0, "inputs": 0.0, "passes": 0.0}
        for job in jobs:  # after the loop: not in its time
            timing = srv.job_timing(job)
            for k, key in (("read", "decode_s"), ("inputs", "preprocess_s"),
                           ("passes", "generate_s")):
                worker[k] += timing.get(key) or 0.0
        if done != len(paths):
            raise SystemExit(f"ofa loop: {len(paths) - done} tasks failed")
        t1 = time.perf_counter()
        for i, part in chunks:
            srv.post(ofa_body(part, i))
        again = time.perf_counter() - t1
        cpu2 = srv.cpu_s()
    lat.sort()
    stages["rest"] = wall - sum(stages.values())  # HTTP, the answer's JSON, the client's read
    breakdown = {k: v / len(chunks) for k, v in stages.items()}
    breakdown.update({f"worker {k}": v / len(chunks) for k, v in worker.items()})
    print("a request's time (s, mean): " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                     breakdown.items()) +
          " (worker read: the tasks' image reads summed over its threads; inputs: built "
          "beside the passes)", file=sys.stderr)
    res = {"ofa_loop_request_breakdown_s": breakdown,
           "ofa_loop_unique_pairs_per_s": len(paths) / wall, "ofa_loop_tasks": tasks,
           "ofa_loop_requests": len(chunks),
           "ofa_loop_request_s_p50": lat[len(lat) // 2], "ofa_loop_request_s_max": lat[-1],
           "ofa_loop_repeated_pairs_per_s": len(paths) / again}
    for role in cpu0:  # CPU seconds a request, by process
        res[f"ofa_loop_cpu_s_per_request_{role}"] = (cpu1[role] - cpu0[role]) / len(chunks)
        res[f"ofa_loop_repeated_cpu_s_per_request_{role}"] = \
            (cpu2[role] - cpu1[role]) / len(chunks)
    print(f"OFA-VE loop ({tasks} tasks a request, unique pairs): "
          f"{res['ofa_loop_unique_pairs_per_s']:.1f} pairs/s, a request "
          f"{res['ofa_loop_request_s_p50']:.3f} s (p50); repeated pairs "
          f"{res['ofa_loop_repeated_pairs_per_s']:.1f} pairs/s; CPU s a request: " +
          ", ".join(f"{r} {res[f'ofa_loop_cpu_s_per_request_{r}']:.3f}" for r in cpu0),
          file=sys.stderr)
    return res


def bench_halves(model: str, device: str, paths: list[str], tasks: int, rounds: int) -> dict:
    """One worker call of ``tasks`` image pairs (a ``/batch_predict`` request's), in process:
    scored as one pass (before) against two halves (``entail_batch.pass_size``: the second
    half read and built while the first is scored), alternated ``rounds`` times, medians.
    Each round's pairs are new statements (nothing cached)."""
    import statistics

    import torch

    from chord_core.analysis import entail_batch
    from chord_core.analysis.engine import Engine
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.config import ModelConfig

    engine = Engine(ModelConfig(model=model, device=device, compile=False, batch_size=32))
    split = entail_batch.MIN_SPLIT
    times: dict[str, list[float]] = {"one pass": [], "halves": []}
    for r in range(rounds + 1):  # round 0: warm-up
        for how in times:
            entail_batch.MIN_SPLIT = split if how == "halves" else 10 ** 9
            reqs = [AnalysisRequest(p, "entail", f"round {r} {how}: " + statement(i))
                    for i, p in enumerate(paths[:tasks])]
            t, out = timed(lambda: engine.entail_many(reqs))
            if any(not hasattr(o, "entailment") for o in out):
                raise SystemExit(f"halves: some pairs failed: {out[:2]}")
            if r:
                times[how].append(t)
    entail_batch.MIN_SPLIT = split
    engine.unload()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    one, halves = (statistics.median(times[k]) for k in ("one pass", "halves"))
    print(f"a {tasks}-pair call: one pass {one:.3f} s, two halves {halves:.3f} s "
          f"({one / halves:.2f}x), medians of {rounds}", file=sys.stderr)
    return {"call_pairs": tasks, "call_one_pass_s": one, "call_halves_s": halves,
            "call_halves_speedup": one / halves, "call_rounds": rounds}


def bench_naive(model: str, device: str, paths: list[str], n: int) -> float:
    """pairs/s of the naive path alone (transformers ``generate``, one pair at a time, one
    new token, the answer words' probabilities read): the OFA loop's baseline."""
    import numpy as np
    import torch
    from PIL import Image

    from chord_core.analysis import entailment as ent
    from chord_core.config import ModelConfig
    from chord_core.model.loading import load_model

    lm = load_model(ModelConfig(model=model, device=device, compile=False))
    ids = ent.answer_token_ids(lm.processor.tokenizer)

    def one(i: int) -> None:
        img = np.asarray(Image.open(paths[i]).convert("RGB"))
        text = lm.processor.apply_chat_template(ent.entail_messages(statement(i)),
                                                tokenize=False, add_generation_prompt=True)
        inputs = ent._processor_inputs(lm, [img], [text]).to(lm.input_device)
        with torch.inference_mode():
            gen = lm.model.generate(**inputs, max_new_tokens=1, do_sample=False,
                                    output_scores=True, return_dict_in_generate=True)
        probs = torch.softmax(gen.scores[0].float(), -1)
        [float(probs[0, ids[k]].sum()) for k in ent.LABELS]

    one(0)  # warm-up
    t, _ = timed(lambda: [one(i) for i in range(n)])
    del lm
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return n / t


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="7b", choices=("3b", "7b"))
    ap.add_argument("--ckpt", default="/tmp/chord-rand-{shape}{vocab}")
    ap.add_argument("--vocab", metavar="FILE",
                    help="build the checkpoint with this BPE rank file's vocabulary "
                         "(Qwen's qwen.tiktoken): real prompt lengths")
    ap.add_argument("--pairs", type=int, default=512)
    ap.add_argument("--naive-pairs", type=int, default=32)
    ap.add_argument("--parts", default="engine,workers,service")
    ap.add_argument("--gpus", type=int, default=2, help="measure on 1..this many GPUs")
    ap.add_argument("--batch", type=int, default=32, help="pairs per forward pass")
    ap.add_argument("--no-box-scores", action="store_true")
    ap.add_argument("--tasks", type=int, default=32,
                    help="tasks a request (ofa-loop), pairs a call (halves)")
    ap.add_argument("--rounds", type=int, default=5, help="alternations (halves)")
    ap.add_argument("--ofa-gpus", default="0",
                    help="the GPUs the ofa-loop's service gets, runs separated by ';' "
                         "(\"0;0,1;0,1,2,3\": one GPU, then two, then four)")
    ap.add_argument("--images", choices=("noise", "photos"), default="noise",
                    help="noise: 448×448 PNGs of random noise (≈ 600 KB each, the rows "
                         "before 2026-12-07); photos: unique JPEG crops of real photographs "
                         "(benchmarks/photos.py, ≈ 77 KB each, as OFA-VE's Flickr30k data)")
    ap.add_argument("--photo-sources", default=str(PHOTO_SOURCES),
                    help="the folder of the photographs to cut from (opencv-doc's data)")
    ap.add_argument("--cpu-pairs", type=int, default=24, help="pairs with --cpu")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "entail.json"))
    return ap


def main() -> int:
    args = parser().parse_args()
    parts = args.parts.split(",")
    model = "test" if args.cpu else args.ckpt.format(shape=args.shape,
                                                      vocab="-vocab" if args.vocab else "")
    if not args.cpu and not (Path(model) / "config.json").exists():
        vocab = ["--vocab", str(Path(args.vocab).resolve())] if args.vocab else []
        subprocess.run([sys.executable, "-m", "chord_core", "make-tiny-model", model, "--shape",
                        args.shape, "--device", "cuda", *vocab], check=True, cwd=ROOT)
    n = args.cpu_pairs if args.cpu else args.pairs
    if args.images == "photos":  # real photographs' crops, JPEG (benchmarks/photos.py)
        paths = make_photos(Path("/tmp/chord-photos"), n, Path(args.photo_sources))
    else:
        paths = make_images(Path("/tmp/chord-entail"), n, 448)
    res: dict = {"shape": "tiny" if args.cpu else args.shape, "pairs": n,
                 "vocabulary": Path(args.vocab).name if args.vocab else "small test BPE",
                 "image_kind": args.images, **describe_images(paths)}

    def save() -> None:
        Path(args.out).write_text(json.dumps(res, indent=2, default=str))

    if "engine" in parts:
        res.update(bench_in_process(model, "cpu" if args.cpu else "cuda:0", paths,
                                    4 if args.cpu else args.naive_pairs, args.batch,
                                    not args.no_box_scores))
        save()
    if "naive" in parts and "engine" not in parts:
        res["naive_pairs_per_s"] = bench_naive(model, "cpu" if args.cpu else "cuda:0", paths,
                                               4 if args.cpu else args.naive_pairs)
        save()
    if "halves" in parts:
        res.update(bench_halves(model, "cpu" if args.cpu else "cuda:0", paths, args.tasks,
                                args.rounds))
        save()
    if "ofa-loop" in parts:
        for gpus in args.ofa_gpus.split(";"):  # "0;0,1": the loop on GPU 0, then on 0 and 1
            got = bench_ofa_loop(model, paths, args.cpu, args.tasks, gpus=gpus)
            res.update(got if gpus == "0" else
                       {f"{k} (GPUs {gpus})": v for k, v in got.items()})
        if res.get("naive_pairs_per_s") and "ofa_loop_unique_pairs_per_s" in res:
            res["ofa_loop_over_naive"] = (res["ofa_loop_unique_pairs_per_s"]
                                          / res["naive_pairs_per_s"])
        save()
    counts = (1,) if args.cpu else tuple(range(1, min(2, args.gpus) + 1))
    for k in counts:
        if "workers" in parts:
            res[f"workers_{k}_pairs_per_s"] = bench_workers(model, paths, tuple(range(k)),
                                                            args.cpu, args.batch)
            save()
        if "service" in parts:
            res[f"service_{k}_pairs_per_s"] = bench_service(
                model, paths, ",".join(str(g) for g in range(k)), args.cpu)
            if f"workers_{k}_pairs_per_s" in res:
                res[f"service_{k}_overhead_pct"] = 100 * (
                    1 - res[f"service_{k}_pairs_per_s"] / res[f"workers_{k}_pairs_per_s"])
            save()
        if "service-threads" in parts and k == 1:
            res["service_1_threads_pairs_per_s"] = bench_service(model, paths, "0", args.cpu,
                                                                 readers="0")
            if res.get("service_1_pairs_per_s"):
                res["service_1_readers_over_threads"] = (res["service_1_pairs_per_s"]
                                                         / res["service_1_threads_pairs_per_s"])
            save()
    if "workers_2_pairs_per_s" in res:
        res["workers_2_over_1"] = res["workers_2_pairs_per_s"] / res["workers_1_pairs_per_s"]
    if res.get("service_2_pairs_per_s"):
        res["service_2_over_1"] = res["service_2_pairs_per_s"] / res["service_1_pairs_per_s"]
    save()
    print(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
