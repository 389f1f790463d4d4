"""Start-up, as a user waits for it: worker start (cold and warm cache), the first and second
request through the service, the one-shot CLI in-process and through the running service.

Every figure comes from one run of this script, so the ratios are same-run ratios:
- worker ready, cold: ``serve`` with an empty ``CHORD_CACHE_DIR`` (compile cache, test model)
  until ``/health`` answers 200, with the worker's own split (imports / load / warm-up) from
  ``/health``'s ``startup`` block (``early_imports_s``: the import thread's own seconds beside
  ``imports_s``; ``load_imports_s``: what the load step still waited for of them;
  ``load_processor_thread_s``: the processor, loaded beside the weights);
- worker ready, warm: the same again on the cache the cold start left;
- first and second request: two ``describe`` jobs of different clips (the same clip would be
  answered from the first job: the content key) on the warm service, submit to result;
- the CLI through the service: ``python -m chord_core describe CLIP`` with that service
  running (it finds it through the data dir), wall clock of the whole process;
- the CLI in-process: the same with ``--local`` (loads the model itself), and its load time;
- weight load: the checkpoint's safetensors bytes over the worker's load seconds (the whole
  load step, imports included) and over its weights step alone (``weights_gb_per_s``);
- ``serve --warmup lazy``: until ``/health`` is 200 (ready once loaded), and its first request
  while the warm-up runs in the background;
- in-process: ``Engine.warmup()``, then two ``describe_many`` calls of two different clips
  each: the first one's extra time and the decode graphs a request captured (0 is the goal).

``serve`` is started with no warm-up flags: its defaults are what is measured (one number,
the user's). The compile cache's hits and misses come from ``/health`` (``compile_cache``).

  python3 benchmarks/startup.py --smoke                 # CPU, the test model (this machine)
  python3 benchmarks/startup.py --model /ckpt/7b --clip clip10s.mp4   # a GPU host

Writes ``$OUT/startup.json`` (or ``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def start_service(model: str, env: dict[str, str], extra: list[str], log: Path,
                  timeout: float) -> tuple[subprocess.Popen, str, float, dict[str, Any]]:
    """``serve`` as a user starts it; (process, url, seconds to ready, /health document)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "chord_core", "serve", "--model", model,
                             "--port", str(port), *extra], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            status, doc = _get(url + "/health", 2.0)
        except OSError:
            status, doc = 0, {}
        if status == 200:
            return proc, url, time.perf_counter() - t0, doc
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"serve not ready in {timeout} s: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def request_latency(url: str, clip: str, timeout: float) -> float:
    """Submit one describe job and wait for its result, through the jobs API."""
    body = json.dumps({"task": "describe", "video_path": clip}).encode()
    t0 = time.perf_counter()
    req = urllib.request.Request(url + "/v1/jobs", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        job = json.loads(resp.read())["job_id"]
    while time.perf_counter() - t0 < timeout:
        status, doc = _get(f"{url}/v1/jobs/{job}")
        if doc.get("state") == "done":
            return time.perf_counter() - t0
        if doc.get("state") in ("failed", "cancelled"):
            raise SystemExit(f"job {job} {doc.get('state')}: {doc.get('error')}")
        time.sleep(0.02)
    raise SystemExit(f"job {job} not done in {timeout} s")


def cli_wall(args: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any], str]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "chord_core", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"CLI {' '.join(args)} exited {out.returncode}: {out.stderr[-2000:]}")
    return wall, json.loads(out.stdout), out.stderr


def _weights_bytes(model: str, cache: Path) -> int:
    from chord_core.config import TEST_MODELS

    folder = cache / "models" if model in TEST_MODELS else Path(model)
    return sum(p.stat().st_size for p in folder.rglob("*.safetensors"))


def _clips(args: argparse.Namespace, work: Path) -> list[str]:
    """Three different clips of one shape (given: copies with different content keys)."""
    if args.clip:
        import shutil

        out = []
        for i in range(8):  # the same frames, a different file: a byte appended at the end
            dst = work / f"clip{i}{Path(args.clip).suffix}"
            shutil.copyfile(args.clip, dst)
            with dst.open("ab") as fh:
                fh.write(bytes([i]))
            out.append(str(dst))
        return out
    from chord_core.testing.videos import make_video

    return [str(make_video(work / f"clip{i}.mp4", duration_s=10.0, fps=10.0,
                           size_wh=(320, 240), seed=i).path) for i in range(8)]


def _save(args: argparse.Namespace, res: dict[str, Any]) -> None:
    """Write what was measured so far (a run cut short keeps its figures)."""
    Path(args.out).write_text(json.dumps(res, indent=2))


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="chord-startup-"))
    cache, data = work / "cache", work / "data"
    clips = _clips(args, work)
    env = {k: v for k, v in os.environ.items() if k not in ("CHORD_SERVER", "CHORD_MODEL")}
    env.update(CHORD_CACHE_DIR=str(cache), CHORD_DATA_DIR=str(data),
               CHORD_MEDIA_ROOTS=str(work))
    extra = ["--cpu-workers", "1"] if args.smoke else []
    res: dict[str, Any] = {"model": args.model, "clip": args.clip or "synthetic 10 s 320x240"}
    for name in ("cold", "warm"):
        proc, url, ready_s, health = start_service(args.model, env, extra,
                                                   work / f"serve-{name}.log", args.timeout)
        res[f"worker_ready_{name}_s"] = round(ready_s, 2)
        res[f"worker_startup_{name}"] = health["workers"][0].get("startup")
        res[f"compile_cache_{name}"] = health["workers"][0].get("compile_cache")
        if name == "warm":
            first = request_latency(url, clips[0], args.timeout)
            second = request_latency(url, clips[1], args.timeout)
            res.update(first_request_s=round(first, 3), second_request_s=round(second, 3),
                       first_extra_s=round(first - second, 3))
            wall, doc, err = cli_wall(["describe", clips[2]], env)
            assert "running on the Chord service" in err, err[-500:]
            res["cli_through_service_s"] = round(wall, 2)
        stop(proc)
        _save(args, res)
    wall, doc, _ = cli_wall(["describe", clips[2], "--local", "--model", args.model], env)
    res["cli_in_process_s"] = round(wall, 2)
    res["cli_in_process_load_s"] = doc["timing"]["load_s"]
    split = res["worker_startup_warm"] or {}
    load, weights = split.get("load_s") or 0.0, split.get("load_weights_s") or 0.0
    size = _weights_bytes(args.model, cache)
    res["weights_mb"] = round(size / 1e6, 3)
    # over the whole load step (its imports included), and over the weights step alone: on
    # the H200 the step was 8.0 s of which 4.2 s imports and 3.0 s weights (2026-12-02)
    res["load_gb_per_s"] = round(size / 1e9 / load, 4) if load else None
    res["weights_gb_per_s"] = round(size / 1e9 / weights, 4) if weights else None
    _save(args, res)
    res.update(in_process(args, clips[3:7], env))
    _save(args, res)
    proc, url, ready_s, health = start_service(args.model, env, [*extra, "--warmup", "lazy"],
                                               work / "serve-lazy.log", args.timeout)
    res["serve_lazy_ready_s"] = round(ready_s, 2)
    res["serve_lazy_warming_at_ready"] = health.get("warm_up")
    res["serve_lazy_first_request_s"] = round(request_latency(url, clips[7], args.timeout), 3)
    stop(proc)
    _save(args, res)
    res["cli_ratio_in_process_over_service"] = round(res["cli_in_process_s"] /
                                                     res["cli_through_service_s"], 2)
    return res


def in_process(args: argparse.Namespace, clips: list[str], env: dict[str, str]
               ) -> dict[str, Any]:
    """``Engine.warmup()`` then two ``describe_many`` calls of two new clips each, in a fresh
    process (this one has not imported torch): seconds, and graphs captured on a request."""
    code = f"""
import json, time
from chord_core.analysis.engine import Engine
from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
e = Engine(ModelConfig(model={args.model!r}, device={"cpu" if args.smoke else "auto"!r}))
t = time.perf_counter(); e.load(); load = time.perf_counter() - t
t = time.perf_counter(); w = e.warmup(); warm = time.perf_counter() - t
dec = e.load().decoder
times = []
for pair in ({clips[:2]!r}, {clips[2:]!r}):
    t = time.perf_counter()
    e.describe_many([AnalysisRequest(c, "describe") for c in pair], batch_size=2)
    times.append(time.perf_counter() - t)
print(json.dumps({{"load_s": load, "warmup_s": warm, "warmup": w, "first": times[0],
                  "second": times[1], "captured_on_request":
                  dec.stats["captured_on_request"] if dec else None}}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise SystemExit(f"in-process run exited {out.returncode}: {out.stderr[-2000:]}")
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return {"engine_warmup_s": round(doc["warmup_s"], 2),
            "engine_warmup_split": doc["warmup"],
            "first_describe_many_s": round(doc["first"], 3),
            "second_describe_many_s": round(doc["second"], 3),
            "first_describe_many_extra_s": round(doc["first"] - doc["second"], 3),
            "describe_many_graphs_captured_on_request": doc["captured_on_request"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="CPU workers, the test model")
    p.add_argument("--model", default=None, help="checkpoint folder or hub id (default: test)")
    p.add_argument("--clip", default=None, help="a 10 s clip (default: a synthetic one)")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--out", default=None, help="JSON file (default $OUT/startup.json)")
    args = p.parse_args()
    args.model = args.model or "test"
    args.out = str(args.out or Path(os.environ.get("OUT", ".")) / "startup.json")
    res = run(args)
    for key, value in res.items():
        if not isinstance(value, dict):
            print(f"{key:36} {value}")
    for name in ("cold", "warm"):
        split = res.get(f"worker_startup_{name}") or {}
        print(f"split {name:30} " + ", ".join(f"{k} {v:.2f}" for k, v in split.items()
                                             if isinstance(v, (int, float))))
    _save(args, res)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
