"""A bounded load test of the HTTP service: N requests at concurrency C, latency p50/p99.

Talks only to the URL given (a service started with ``python -m chord_core serve``; keep it
on 127.0.0.1). Each request is one ``/batch_predict`` task (an image + a statement) or one
``/v1/chat/completions`` question about the image. Counts every answer by status: a 5xx or
a missing/extra prediction is a failure; nothing is retried.

    python benchmarks/service_load.py --url http://127.0.0.1:8080 --image img.png \
        [--requests 200] [--concurrency 32] [--endpoint batch_predict|chat]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any


def _body(endpoint: str, image_b64: str, i: int) -> dict[str, Any]:
    if endpoint == "batch_predict":
        return {"tasks": [{"image_data": image_b64, "text": f"statement number {i}",
                           "id": f"r{i}"}]}
    return {"model": "chord", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "text", "text": f"question {i}: what is shown?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image_b64}"}}]}]}


def _complete(endpoint: str, i: int, data: Any) -> bool:
    """Whether the answer is whole: its own prediction, or a chat message."""
    if endpoint == "batch_predict":
        preds = data.get("predictions") or []
        return len(preds) == 1 and preds[0].get("id") == f"r{i}" and \
            preds[0].get("entailment") in ("yes", "maybe", "no")
    return isinstance(data["choices"][0]["message"]["content"], str)


async def run_load(url: str, image: Path, *, requests: int = 200, concurrency: int = 32,
                   endpoint: str = "batch_predict", timeout_s: float = 120.0) -> dict[str, Any]:
    """Send the requests; returns counts by status, lost answers and latency percentiles."""
    import httpx

    image_b64 = base64.b64encode(image.read_bytes()).decode()
    path = "/batch_predict" if endpoint == "batch_predict" else "/v1/chat/completions"
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    lost: list[int] = []

    async def one(client: httpx.AsyncClient, i: int) -> None:
        async with gate:
            t0 = time.perf_counter()
            try:
                r = await client.post(url + path, json=_body(endpoint, image_b64, i))
            except httpx.HTTPError as exc:
                statuses[type(exc).__name__] += 1
                lost.append(i)
                return
            latencies.append(time.perf_counter() - t0)
            statuses[str(r.status_code)] += 1
            if r.status_code != 200 or not _complete(endpoint, i, r.json()):
                lost.append(i)

    limits = httpx.Limits(max_connections=concurrency)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        await asyncio.gather(*(one(client, i) for i in range(requests)))
    wall = time.perf_counter() - t0
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 \
        else (latencies or [float("nan")]) * 99
    return {"endpoint": endpoint, "requests": requests, "concurrency": concurrency,
            "statuses": dict(statuses), "lost": len(lost),
            "server_errors": sum(v for k, v in statuses.items() if k.startswith("5")),
            "p50_s": round(q[49], 3), "p99_s": round(q[98], 3), "wall_s": round(wall, 2),
            "requests_per_s": round(requests / wall, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--image", type=Path, required=True)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--endpoint", choices=("batch_predict", "chat"), default="batch_predict")
    a = p.parse_args()
    stats = asyncio.run(run_load(a.url.rstrip("/"), a.image, requests=a.requests,
                                 concurrency=a.concurrency, endpoint=a.endpoint))
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
