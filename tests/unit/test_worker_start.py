"""Worker start-up helpers: the bytecode cache for installs without valid bytecode, the
weight prefetch, and the model stack's imports begun on a thread (``model/preimport.py``)."""

from __future__ import annotations

import os
import py_compile
import sys
from importlib.machinery import ModuleSpec

import pytest

from chord_core.runtime import startup


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text("X = 1\n")
    return path


def test_bytecode_validity_follows_the_source(source):
    assert not startup.bytecode_valid(str(source))  # never compiled
    py_compile.compile(str(source), doraise=True)
    assert startup.bytecode_valid(str(source))
    st = source.stat()
    os.utime(source, (st.st_atime, st.st_mtime + 10))  # a copy that did not keep times
    assert not startup.bytecode_valid(str(source))


@pytest.mark.parametrize("compiled, want_prefix", [(True, False), (False, True)],
                         ids=["valid-bytecode-left-alone", "no-bytecode-cached-in-chord"])
def test_worker_caches_bytecode_only_where_the_install_has_none(
        source, tmp_path, monkeypatch, compiled, want_prefix):
    if compiled:
        py_compile.compile(str(source), doraise=True)
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: ModuleSpec(name, None, origin=str(source)))
    monkeypatch.setenv("CHORD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    startup.bytecode_cache()
    if want_prefix:
        assert sys.pycache_prefix == str(tmp_path / "cache" / "pycache")
        assert not sys.dont_write_bytecode
    else:
        assert sys.pycache_prefix is None and sys.dont_write_bytecode


def test_weights_are_prefetched_for_a_folder_and_not_for_a_hub_id(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "model-00001.safetensors").write_bytes(b"x" * 5000)
    (tmp_path / "config.json").write_text("{}")
    assert startup.prefetch_weights(str(tmp_path)) == 5000
    assert startup.prefetch_weights("Qwen/Qwen2.5-VL-7B-Instruct") == 0


# -- the model stack's imports, begun on a thread at the worker's start ---------------------
_WORKER = """
import json, queue, sys, time
t0 = time.perf_counter()
from chord_core.config import ModelConfig
from chord_core.model import preimport
from chord_core.runtime.messages import StopWorker
from chord_core.runtime.workers import WorkerSpec, prepare_process, serve

spec = WorkerSpec("cpu0", (), ModelConfig(model="test"), warmup=False)
prepare_process(spec)   # begins the imports on their thread (torch waited for)
preimport.join()        # they finished before the load step starts
before = sorted(m for m in sys.modules if m.startswith("transformers.models.qwen2"))
inbox, outbox, control = queue.Queue(), queue.Queue(), queue.Queue()
inbox.put(StopWorker())
control.put(StopWorker())
serve(spec, inbox, outbox, control, t0=t0)
ready = [m for m in list(outbox.queue) if type(m).__name__ == "Ready"][0]
print(json.dumps({"startup": ready.startup, "error": ready.error, "before": before}))
"""


@pytest.mark.slow  # a fresh process imports torch and transformers: ~15 s idle, 60 s loaded
def test_the_load_step_imports_nothing_once_the_early_imports_finished(tiny_model_dir):
    """A fresh worker process (torch not imported yet): the thread imports torch,
    transformers, the test model's class and its processor classes, and the load step's own
    imports (``load_imports_s``) are then a small part of what the thread took
    (``early_imports_s``), both in the Ready message's start-up split."""
    import json
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _WORKER], cwd=root, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["error"] is None, doc
    split = doc["startup"]
    assert {"imports_s", "early_imports_s", "load_imports_s", "load_s"} <= set(split)
    # the class and processor modules were there before the load began
    assert {"transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
            "transformers.models.qwen2_5_vl.processing_qwen2_5_vl",
            "transformers.models.qwen2_vl.image_processing_qwen2_vl",
            "transformers.models.qwen2_vl.video_processing_qwen2_vl"} <= set(doc["before"])
    assert split["load_imports_s"] < 0.05 * split["early_imports_s"], split


def test_an_import_error_on_the_thread_is_the_loads_error_with_its_hint(monkeypatch, tmp_path):
    """The thread fails (a package missing): the load raises it as a ModelError with what to
    do, and the worker reports it in Ready (it stays up for other models)."""
    import queue

    from chord_core.analysis.engine import Engine
    from chord_core.config import ModelConfig
    from chord_core.model import preimport
    from chord_core.runtime.messages import Ready
    from chord_core.runtime.workers import WorkerSpec

    monkeypatch.setenv("CHORD_CACHE_DIR", str(tmp_path))
    broken = preimport.EarlyImports(("json", "chord_no_such_package.models:Thing")).start()
    monkeypatch.setattr(preimport, "_PENDING", broken)
    spec = WorkerSpec("cpu0", (), ModelConfig(model="test", device="cpu"), warmup=False)
    outbox: queue.Queue = queue.Queue()
    engine, steps, _ = startup.start_engine(spec, outbox, 0.0, Engine, spec.model_cfg)
    ready = [m for m in list(outbox.queue) if isinstance(m, Ready)]
    assert engine is None and steps == [] and len(ready) == 1
    err = ready[0].error
    assert err is not None and err["type"] == "ModelError", err
    assert "chord_no_such_package.models" in err["message"]
    assert "No module named 'chord_no_such_package'" in err["message"]
    assert "pip install -r requirements.txt" in err["hint"]


def test_a_processor_class_that_fails_to_import_is_left_to_the_load():
    """An optional name (a processor class: without torchvision the load takes the PIL image
    processor instead) that fails does not fail the join; a required one does."""
    from chord_core.errors import ModelError
    from chord_core.model import preimport

    missing = "chord_no_such_package:ImageProcessor"
    ok = preimport.EarlyImports(("json", missing), frozenset({missing})).start()
    ok.join()
    assert ok.failed is None and ok.took_s is not None
    bad = preimport.EarlyImports(("json", missing)).start()
    with pytest.raises(ModelError, match="chord_no_such_package.ImageProcessor"):
        bad.join()


@pytest.mark.parametrize("model_type, wanted", [
    ("qwen2_5_vl", {"transformers:Qwen2_5_VLForConditionalGeneration",
                    "transformers:Qwen2_5_VLProcessor", "transformers:Qwen2VLVideoProcessor"}),
    ("qwen3_vl", {"transformers:Qwen3VLForConditionalGeneration",
                  "transformers:Qwen3VLProcessor", "transformers:Qwen3VLVideoProcessor"}),
    ("llama", set()),  # not one of ours: the load says so; only the base imports
], ids=["qwen2.5-vl", "qwen3-vl", "other"])
def test_the_import_plan_follows_the_checkpoints_model_type(tmp_path, model_type, wanted):
    import json

    from chord_core.model import preimport

    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    plan = preimport.import_plan(str(tmp_path))
    assert plan[:2] == ("torch", "transformers")
    assert wanted <= set(plan) and len(plan) == len(preimport.BASE) + (4 + 1 if wanted else 0)
    assert preimport.import_plan(str(tmp_path / "missing")) == preimport.BASE


def test_the_worker_points_the_compile_cache_at_the_chord_cache_before_torch(
        monkeypatch, tmp_path):
    """The worker's set-up names inductor's and Triton's cache dirs before anything of
    inductor can pick its own (/tmp/torchinductor_<user>, lost with the container); a dir the
    user set is kept."""
    from chord_core.config import ModelConfig
    from chord_core.model import preimport
    from chord_core.runtime.workers import WorkerSpec, prepare_process

    monkeypatch.setattr(preimport, "_PENDING", None)
    monkeypatch.setenv("CHORD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    prepare_process(WorkerSpec("cpu0", (), ModelConfig(model="test"), warmup=False))
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "compile" /
                                                        "inductor")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")
    assert preimport._PENDING is not None  # and the imports were begun on their thread
    preimport.join()
