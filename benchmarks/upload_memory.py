"""Memory of a large upload (issue 11): what saving it costs, and what the server still holds
after it finished.

Two measurements, each for ``--mb`` MiB of synthetic data:

* ``helper``: ``chord_ui.uploads.save_upload`` on an in-memory upload (Streamlit's
  UploadedFile is a BytesIO over the received bytes): peak RSS added while saving.
* ``server``: the real app (``streamlit run app.py``, 127.0.0.1 only) and headless Chromium
  upload a sparse ``.mp4`` of that size through the Analyze uploader; the server's RSS is
  sampled every 20 ms: baseline, peak while receiving and saving, and 5 s after the page
  shows the outcome (zeros are not a video: the refused upload must also be deleted).

    python benchmarks/upload_memory.py --mb 512 [--mode helper|server|both]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
log = logging.getLogger("upload_memory")


class PeakRss:
    """Samples a process's RSS in a thread; ``peak`` is the highest seen."""

    def __init__(self, pid: int, every_s: float = 0.02) -> None:
        self.proc, self.every_s, self.peak = psutil.Process(pid), every_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.every_s)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def helper(mb: int) -> dict[str, float]:
    """Peak RSS added by save_upload for an ``mb`` MiB upload already in memory."""
    from chord_ui.uploads import save_upload

    upload = io.BytesIO(os.urandom(MIB) * mb)
    with tempfile.TemporaryDirectory() as tmp:
        base = psutil.Process().memory_info().rss
        with PeakRss(os.getpid()) as rss:
            save_upload("big.mp4", upload, Path(tmp))
        return {"upload_mib": mb, "saving_added_peak_mib": round((rss.peak - base) / MIB, 1)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the app did not start")


def server(mb: int) -> dict[str, float]:
    """The app's RSS around a real browser upload of ``mb`` MiB."""
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="chord-upload-mem-"))
    big = tmp / "big.mp4"
    with big.open("wb") as f:  # sparse: no disk or memory used to make it
        f.truncate(mb * MIB)
    port = _free_port()
    env = dict(os.environ, CHORD_MODEL="test", CHORD_DATA_DIR=str(tmp / "data"),
               CHORD_CACHE_DIR=str(tmp / "cache"), HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py",
                             "--server.port", str(port), "--server.address", "127.0.0.1",
                             "--server.headless", "true"], cwd=ROOT, env=env,
                            stdout=(tmp / "server.log").open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium",
                                         args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.set_default_timeout(600_000)
            page.goto(url)
            page.get_by_role("heading", name="Analyze a clip").wait_for()
            time.sleep(3)
            base = psutil.Process(proc.pid).memory_info().rss
            start = time.monotonic()
            with PeakRss(proc.pid) as rss:
                page.locator("input[type=file]").set_input_files(str(big))
                page.locator("[data-testid=stAlertContentError]").first.wait_for()
                took = time.monotonic() - start
                time.sleep(5)
            after = psutil.Process(proc.pid).memory_info().rss
            browser.close()
        left = list((tmp / "data" / "uploads").glob("*")) if (tmp / "data").exists() else []
        return {"upload_mib": mb, "server_baseline_mib": round(base / MIB, 1),
                "server_peak_added_mib": round((rss.peak - base) / MIB, 1),
                "server_after_added_mib": round((after - base) / MIB, 1),
                "upload_to_outcome_s": round(took, 1), "upload_files_left": len(left)}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        big.unlink(missing_ok=True)
        log.info("server log: %s", tmp / "server.log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--mode", choices=("helper", "server", "both"), default="both")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.path.insert(0, str(ROOT))
    out = {}
    if args.mode in ("helper", "both"):
        out["helper"] = helper(args.mb)
    if args.mode in ("server", "both"):
        out["server"] = server(args.mb)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
