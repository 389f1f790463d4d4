"""A Thinking checkpoint through the service: a real ``python -m chord_core serve --model
test-qwen3-thinking`` on 127.0.0.1 (one CPU worker process), a grounding job and an entailment
job over HTTP. The random weights rarely close their reasoning, so the grounding frames say
they were cut while reasoning and the entailment reasons for its whole budget, is closed and
scored there: the whole path runs, and the result carries the reasoning."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import pytest
from service_server import Server, start_server, stop_server

pytestmark = pytest.mark.slow  # its own server and checkpoint: about a minute on 2 cores
ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "result.schema.json").read_text())


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory) -> Server:
    srv = start_server(tmp_path_factory.mktemp("thinking"), "--model", "test-qwen3-thinking",
                       "--cpu-workers", "1", timeout=240.0)
    yield srv
    stop_server(srv)


def _done(c: httpx.Client, job_id: str) -> dict:
    with c.stream("GET", f"/v1/jobs/{job_id}/events", timeout=240) as r:
        assert r.status_code == 200
        last = ""
        for line in r.iter_lines():
            if line.startswith("data: "):
                last = line[6:]
    assert json.loads(last)["state"] == "done", last
    doc = c.get(f"/v1/jobs/{job_id}/result").json()
    jsonschema.validate(doc, SCHEMA)
    return doc


def test_thinking_ground_and_entail_jobs_over_http(thinking_server: Server) -> None:
    import numpy as np
    from PIL import Image

    from chord_core.testing.videos import make_video

    clip = make_video(thinking_server.media / "clip.mp4", duration_s=1.0, fps=10.0,
                      size_wh=(160, 120)).path
    img = thinking_server.media / "img.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (120, 160, 3), dtype=np.uint8)
                    ).save(img)
    with httpx.Client(base_url=thinking_server.url, timeout=60) as c:
        g = c.post("/v1/jobs", json={"task": "ground", "video_path": str(clip),
                                     "target": "the square", "fps": 2, "max_frames": 4,
                                     "max_new_tokens": 6})
        e = c.post("/v1/jobs", json={"task": "entail", "video_path": str(img),
                                     "statement": "a red car", "max_new_tokens": 6})
        assert g.status_code == e.status_code == 202, (g.text, e.text)
        ground, ent = _done(c, g.json()["job_id"]), _done(c, e.json()["job_id"])
    for doc in (ground, ent):
        assert doc["model"]["thinking"] is True and doc["model"]["family"] == "qwen3-vl"
    assert len(ground["reasoning"]) == len(ground["raw_outputs"]) >= 1 and any(
        ground["reasoning"])
    unclosed = sum("</think>" not in o for o in ground["raw_outputs"])
    assert sum("still reasoning" in w for w in ground["warnings"]) == unclosed
    assert len(ent["reasoning"]) == 1 and ent["reasoning"][0]
    assert any("6-token budget" in w for w in ent["warnings"])
    assert sum(ent["entailment"]["probabilities"].values()) == pytest.approx(1, abs=1e-3)


def test_batch_predict_takes_the_reasoning_budget(thinking_server: Server) -> None:
    """``think_tokens`` beside the tasks: every task reasons up to it (the job's warning
    names it); over the cap or not a whole number, the request is refused saying so."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(5).integers(0, 255, (56, 56, 3), dtype=np.uint8)
                    ).save(buf, "PNG")
    tasks = [{"image_data": base64.b64encode(buf.getvalue()).decode(), "text": t}
             for t in ("a cat", "two dogs")]
    with httpx.Client(base_url=thinking_server.url, timeout=240) as c:
        r = c.post("/batch_predict", json={"think_tokens": 5, "tasks": tasks})
        assert r.status_code == 200, r.text
        preds = r.json()["predictions"]
        assert all("entailment" in p for p in preds)
        doc = c.get(f"/v1/jobs/{preds[0]['job_id']}/result").json()
        assert doc["reasoning"][0]
        assert any("5-token budget" in w for w in doc["warnings"]), doc["warnings"]
        for bad, status in ((10 ** 9, 400), (0, 422), ("many", 422)):
            r = c.post("/batch_predict", json={"think_tokens": bad, "tasks": tasks})
            assert r.status_code == status and "think_tokens" in r.json()["error"]
