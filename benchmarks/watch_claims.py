"""How fast a watch folder takes a folder full of new files (issue 40: "1,500 files took more
than 23 s to claim 1,000"): a real ``python -m chord_core watch`` process (one CPU worker, the
tiny test model) on a folder of ``--files`` distinct short clips already there when it
starts. Counts the rows of ``library_watch_files`` (a row = a file claimed: hashed, keyed,
inserted under the lease) every 50 ms from the moment the watcher says it is watching, and
prints JSON: seconds to claim the first 1,000 and all files, files claimed per second.
The jobs the claims submit run meanwhile (the worker describes the clips, the dispatcher
probes each one), as they would in use.

    python benchmarks/watch_claims.py [--files 1500] [--settle-s 0]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chord_core.testing.videos import make_video  # noqa: E402


def _count(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM library_watch_files").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1500)
    ap.add_argument("--settle-s", type=float, default=0.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="chord-watch-bench-") as tmp:
        media, data = Path(tmp) / "media", Path(tmp) / "data"
        folder = media / "cams"
        folder.mkdir(parents=True)
        base = make_video(Path(tmp) / "base.mp4", duration_s=0.4, fps=5.0, size_wh=(64, 48),
                          seed=1).path.read_bytes()
        for i in range(args.files):  # distinct contents: each is its own key
            (folder / f"cam-{i:05d}.mp4").write_bytes(base + f"{i:08d}".encode())
        env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data))
        log = Path(tmp) / "watch.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "chord_core", "watch", str(folder), "--model", "test",
             "--cpu-workers", "1", "--settle-s", str(args.settle_s), "--rescan-s", "3600",
             "--max-new-tokens", "2"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
            stderr=log.open("w"))
        try:
            while "watching " not in log.read_text():
                if proc.poll() is not None:
                    raise SystemExit(log.read_text()[-2000:])
                time.sleep(0.05)
            t0, marks = time.monotonic(), {}
            db = data / "chord.sqlite3"
            while len(marks) < 2 and time.monotonic() - t0 < 600:
                n = _count(db)
                for want in (min(1000, args.files), args.files):
                    if n >= want and want not in marks:
                        marks[want] = time.monotonic() - t0
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(30)
    total = marks.get(args.files)
    print(json.dumps({"files": args.files, "settle_s": args.settle_s,
                      "s_to_claim_1000": round(marks.get(min(1000, args.files), -1), 2),
                      "s_to_claim_all": round(total, 2) if total else None,
                      "files_per_s": round(args.files / total, 1) if total else None}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
