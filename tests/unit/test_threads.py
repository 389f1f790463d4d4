"""``chord_core.threads``: a pool's ``with`` block ends once its threads are gone from the OS,
not only from Python. Torch keeps Python objects in a thread's native locals and drops them
after ``Thread.join`` has returned; a process that finalizes meanwhile aborts
(pytorch/pytorch#117762; ``search --check`` exited -6 on CI after its answer). The tests put
an object whose ``__del__`` takes a while into torch's thread-local store, so the teardown
window is wide on every run, not only on a loaded machine."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from chord_core.threads import Pool

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
TASKS = Path("/proc/self/task")

SCRIPT = """
import sys, time, torch
from concurrent.futures import ThreadPoolExecutor
from chord_core.threads import Pool

class SlowToDrop:
    def __del__(self):
        time.sleep(0.05)

def work(_):
    torch._C._stash_obj_in_tls("chord-test", SlowToDrop())  # dropped at the OS thread's end

with (Pool if sys.argv[1] == "pool" else ThreadPoolExecutor)(2) as pool:
    list(pool.map(work, range(2)))
print("answered", flush=True)
"""


class SlowToDrop:
    def __del__(self) -> None:
        time.sleep(0.3)


def _stash(_: int) -> int:
    import threading

    torch._C._stash_obj_in_tls("chord-test", SlowToDrop())
    return threading.get_native_id()


@pytest.mark.skipif(not TASKS.is_dir(), reason="needs Linux's /proc/self/task")
def test_a_pools_with_block_ends_after_its_os_threads() -> None:
    t0 = time.monotonic()
    with Pool(2, thread_name_prefix="chord-test") as pool:
        tids = list(pool.map(_stash, range(2)))
    assert time.monotonic() - t0 >= 0.25  # the native teardown was waited for
    assert [tid for tid in tids if (TASKS / str(tid)).exists()] == []
    # the standard pool returns while the teardown still runs: the window Pool closes
    with ThreadPoolExecutor(1) as plain:
        tid = plain.submit(_stash, 0).result()
    assert (TASKS / str(tid)).exists()


@pytest.mark.parametrize("kind, survives", [("pool", True), ("plain", False)])
def test_a_process_that_exits_right_after_its_pool_exits_cleanly(kind: str,
                                                                survives: bool) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, kind], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert "answered" in out.stdout
    assert (out.returncode == 0) is survives, (out.returncode, out.stderr[-500:])
