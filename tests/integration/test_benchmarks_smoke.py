"""The GPU benchmark scripts, run in their CPU smoke modes so they cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_multigpu_harness_cpu_mode(tmp_path, tiny_model_dir):
    proc = _run(["benchmarks/multigpu.py", "--shape", "tiny", "--cpu-gpus", "2", "--clips", "2",
                 "--ground-tokens", "4", "--ckpt", str(tmp_path / "ckpt")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "multigpu.json").read_text())
    assert res["frames_grounded"] == 60
    for key in ("throughput_speedup", "ground_split_ratio"):
        assert res[key] > 0
    for key in ("agree_replicas", "agree_shard", "agree_split_ground", "agree_1gpu_rerun"):
        assert res[key]["exact"] == 1.0, key  # CPU float32 is deterministic
    assert len(res["planner_auto"]["workers"]) == 2


def test_agreement_check_cpu_mode(tmp_path, tiny_model_dir):
    proc = _run(["benchmarks/agreement.py", "--cpu", "--tokens", "8"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "agreement.json").read_text())
    assert res["first_rerun"]["max_abs_logit_diff"] == 0.0
    assert res["first_rerun"]["shared_token_prefix"] == 8


def test_speed_harness_cpu_mode(tmp_path, tiny_model_dir):
    env_dir = tmp_path / "clips"
    proc = subprocess.run(
        [sys.executable, "benchmarks/speed.py", "--cpu", "--workloads",
         "decode,agree,w1,w2,w3,w2x,cold"], cwd=ROOT, capture_output=True, text=True,
        timeout=600, env={**os.environ, "OUT": str(tmp_path), "CHORD_BENCH_DIR": str(env_dir)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "speed.json").read_text())
    for name in ("naive_b1", "ours_b1", "naive_b8", "ours_b8"):
        assert res["decode"][name]["tokens_per_s"] > 0, name
    agree = res["agree"]  # CPU float32: the fast path reproduces generate exactly
    assert agree["ours_vs_naive_exact_rows"] == agree["rows"] == 3
    assert agree["teacher_forced_top1_agreement"] == 1.0
    for key in ("w1", "w3"):
        assert res[key]["naive_clips_per_min"] > 0 and res[key]["ours_clips_per_min"] > 0
        assert res[key]["frames"] == 4
    assert res["w2"]["frames"] > 0 and res["w2"]["ratio"] > 0
    workers = res["workers"]
    assert workers["w1_speedup"] > 0 and workers["w2_ratio"] > 0
    assert {w["worker"] for w in workers["workers_2gpu"]} == {"gpu0", "gpu1"}
    assert res["cold"]["fresh_cache_state"] == res["cold"]["warm_cache_state"] == ["ready"]
    startup = res["cold"]["fresh_cache_startup"][0]  # where the worker's start went
    assert 0 < startup["load_s"] < startup["total_s"] <= res["cold"]["fresh_cache_s"]
    assert startup["load_weights_s"] > 0


def test_w1_phases_harness_cpu_mode(tmp_path, tiny_model_dir):
    """Issue 36's breakdown: every phase of every clip is seen, on the threads it ran on,
    and the phases the main thread ran add up to no more than the wall time."""
    out = tmp_path / "phases.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/w1_phases.py", "--cpu", "--clips", "3", "--seconds", "2",
         "--wh", "112x84", "--tokens", "4", "--batches", "0,2", "--out", str(out)], cwd=ROOT,
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "CHORD_BENCH_DIR": str(tmp_path / "clips")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    default, two = json.loads(out.read_text())
    assert default["batch"] == "default" and two["batch"] == 2
    assert default["generate_n"] == 1 and two["generate_n"] == 2  # 3 clips: one batch; 2 + 1
    for run in (default, two):
        assert run["read_n"] == 3 and run["read_s_main"] == 0  # read on the reader threads
        assert run["inputs_n"] == run["generate_n"] == run["text_n"]
        assert run["other_main_s"] >= 0 and run["clips_per_min"] > 0


def test_sampling_harness_cpu_mode(tmp_path):
    proc = _run(["benchmarks/sampling.py", "--minutes", "0.1", "--repeats", "1",
                 "--cache", str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "sampling.json").read_text())
    assert res["frames_in_file"] == 180 and res["sampled_frames"] == 12
    assert res["kept"]["ours"] == res["kept"]["decode_every_frame"] == 12
    assert res["ours_vs_decode_every_frame"] > 0
    assert res["ffmpeg_s"] is None or res["kept"]["ffmpeg"] == 12


def test_sampling_w4_ways_one_thread_fast_and_the_pool(tmp_path):
    """W4's extra ways: one FFmpeg thread, FFmpeg's shortcuts with their pixel error against
    the exact frames, and the product's pool with its processes' CPU counted."""
    ways = "ours_gop_t1,ours_gop_bidir,ours_gop_fast,ours_gop_pool"
    proc = _run(["benchmarks/sampling.py", "--minutes", "0.1", "--repeats", "1", "--cache",
                 str(tmp_path), "--ways", ways], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "sampling.json").read_text())
    assert res["kept"] == {"ours_gop_t1": 12, "ours_gop_bidir": 12, "ours_gop_fast": 12,
                           "ours_gop_pool": 12}
    assert res["bidir_error"]["frames"] == 12
    assert res["fast_error"]["frames"] == 12 and res["fast_error"]["mean_abs"] >= 0
    assert res["ours_gop_pool_cpu_s"] > 0 and res["ours_gop_pool_procs"] >= 2


def test_nvdec_plan_figures_and_the_simulated_sessions(tmp_path):
    """The NVDEC plan's busy shares, and the real reader's threads and queues over
    simulated sessions: 3 reads in flight keep more of the sessions busy than 1."""
    import re

    proc = _run(["benchmarks/nvdec_plan.py", "--sessions", "8", "--frames", "3000"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "x8: one 512-frame read at [0, 512, 1024]" in proc.stdout
    proc = _run(["benchmarks/nvdec_plan.py", "--sessions", "4", "--frames", "3000",
                 "--simulate", "2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    busy = [float(b) for b in re.findall(r"sessions busy ([0-9.]+)", proc.stdout)]
    assert len(busy) == 2 and 0 < busy[0] < busy[1] <= 1.0


def test_qwen3_harness_cpu_mode(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/qwen3.py", "--cpu"], cwd=ROOT, capture_output=True,
        text=True, timeout=600,
        env={**os.environ, "OUT": str(tmp_path), "CHORD_BENCH_DIR": str(tmp_path / "clips")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "qwen3.json").read_text())
    assert res["family"] == "qwen3-vl" and res["fast_decoder"] is True
    for name in ("naive_b1", "ours_b1", "naive_b8", "ours_b8"):
        assert res["decode"][name]["tokens_per_s"] > 0, name
    agree = res["agree"]  # CPU float32: the fast path reproduces generate exactly
    assert agree["ours_vs_naive_exact_rows"] == agree["rows"] == 3
    assert res["w1"]["naive_clips_per_min"] > 0 and res["w1"]["ours_clips_per_min"] > 0
    ground = res["ground"]
    assert ground["per_frame"]["frames_grounded"] == ground["sampled_frames"] == 12
    assert ground["two_pass"]["method"] == "two_pass"
    assert 0 < ground["two_pass"]["frames_grounded"] < 12
    assert ground["two_pass"]["latency_s"] > ground["two_pass"]["first_pass_s"] > 0


def test_startup_benchmark_smoke_mode(tmp_path, tiny_model_dir):
    proc = _run(["benchmarks/startup.py", "--smoke", "--timeout", "300"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "startup.json").read_text())
    for key in ("worker_ready_cold_s", "worker_ready_warm_s", "first_request_s",
                "second_request_s", "cli_through_service_s", "cli_in_process_s"):
        assert res[key] > 0, key
    for name in ("cold", "warm"):  # the worker's own split, from /health
        assert {"imports_s", "early_imports_s", "load_imports_s", "load_processor_thread_s",
                "load_s", "total_s"} <= set(res[f"worker_startup_{name}"])
    assert res["weights_mb"] > 0 and res["cli_in_process_load_s"] > 0
    assert res["serve_lazy_ready_s"] > 0 and res["serve_lazy_first_request_s"] > 0
    # in-process: after Engine.warmup() no describe_many request captured a decode step
    assert res["describe_many_graphs_captured_on_request"] == 0
    assert res["first_describe_many_s"] > 0 and res["engine_warmup_s"] > 0


def test_thinking_entail_harness_cpu_mode(tmp_path):
    proc = _run(["benchmarks/thinking.py", "--cpu"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "thinking.json").read_text())
    assert res["thinking_checkpoint"] is True and res["first_token"]["pairs_per_s"] > 0
    think = res["thinking_4"]  # random weights never close: every row hits the budget
    assert think["pairs"] == 4 and think["forced_share"] == 1.0
    assert think["cost_vs_first_token"] > 1


def test_decode_readers_cpu_rows_and_a_missing_nvdec_row(tmp_path):
    from chord_core.testing.videos import make_video

    clip = make_video(tmp_path / "c.mp4", duration_s=3.0, fps=10.0, size_wh=(160, 120)).path
    proc = _run(["benchmarks/decode_readers.py", "--clip", str(clip), "--frames", "20",
                 "--every", "5", "--decoders", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "decode_readers.json").read_text())
    for reader in ("opencv", "pyav"):
        assert res[reader]["frames"] == 20 and res[reader]["frames_per_s"] > 0, reader
    assert res["chord_sparse"]["frames"] == 4 and res["chord_sparse"]["route"] == "pyav"
    nvdec = res["nvdec_x1"]  # a host with PyNvVideoCodec and a GPU decodes for real
    assert "No module named" in nvdec.get("not available", "") or nvdec["frames"] == 20


def test_footage_repeats_a_carried_segment_to_the_length_asked(tmp_path):
    from chord_core.media.probe import probe
    from chord_core.testing.videos import make_video

    seg = make_video(tmp_path / "seg.mp4", duration_s=3.0, fps=10.0, size_wh=(160, 120)).path
    out = tmp_path / "long.mp4"
    proc = _run(["benchmarks/footage.py", "--segment", str(seg), "--minutes", "0.2",
                 "--out", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert res["packets"] == 4 * 30 and 12.0 <= res["duration_s"] < 12.5
    assert probe(out).frame_count == 120
    missing = _run(["benchmarks/footage.py", "--segment", str(tmp_path / "nope.mp4"),
                    "--out", str(out)], tmp_path)
    assert missing.returncode == 2 and "no segment at" in missing.stderr


def test_image_memory_prints_the_peak_and_the_refusal(tmp_path):
    proc = _run(["benchmarks/image_memory.py", "--count", "2", "--side", "300"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.splitlines()[-1])
    assert res["pixels_total"] == 180_000 and res["peak_added_mib"] >= 0
    proc = _run(["benchmarks/image_memory.py", "--count", "1", "--side", "5000"], tmp_path)
    assert "the limit is 16.8 MP" in json.loads(proc.stdout.splitlines()[-1])["refused"]
