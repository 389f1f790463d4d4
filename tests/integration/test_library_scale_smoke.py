"""benchmarks/library_scale.py in its smoke size, so it cannot rot unnoticed (the real run,
10k → 1M passages, is in docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_library_scale_smoke(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/library_scale.py", "--sizes", "300,600",
                           "--queries", "20", "--dir", str(tmp_path)], cwd=ROOT,
                          env={**os.environ, "OUT": str(tmp_path)}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "library_scale.json").read_text())["sizes"]
    assert [(r["passages"], r["results"]) for r in rows] == [(300, 30), (600, 60)]
    for row in rows:
        assert row["p99_ms"] >= row["p50_ms"] > 0 and row["index_passages_per_s"] > 0
        assert row["cpu_p99_ms"] >= row["cpu_p50_ms"] > 0
        assert row["mean_hits"] > 0 and row["index_mb"] > 0
