"""A bounded load test on CPU (test model, 127.0.0.1 only): 200 requests at concurrency 32
on /batch_predict, none lost, no 5xx; p50/p99 logged (``benchmarks/service_load.py`` runs
the same against any service)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger(__name__)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_200_requests_at_concurrency_32_lose_nothing(server, media) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from service_load import run_load

    stats = asyncio.run(run_load(server.url, media["img"], requests=200, concurrency=32,
                                 endpoint="batch_predict", timeout_s=90))
    log.warning("service load: %s", json.dumps(stats))
    assert stats["server_errors"] == 0 and stats["lost"] == 0
    assert stats["statuses"] == {"200": 200}
    assert 0 < stats["p50_s"] <= stats["p99_s"] < 60
