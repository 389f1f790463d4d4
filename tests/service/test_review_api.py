"""``/v1/review``, ``/v1/ask`` and ``/v1/cases``: ask end to end on the shared real service (a
CPU worker, the tiny model: a describe job, then the question searched, its hits checked by
real entail jobs on the clip's frames, the answer citing clip@time), and the review routes
on a keyed uvicorn over a store holding alerts (auth, marking, bounds, no tracebacks)."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest
from service_server import free_port

KEY = "review-test-key"


def _wait_done(c: httpx.Client, job_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while c.get(f"/v1/jobs/{job_id}").json()["state"] != "done":
        assert time.monotonic() < deadline, c.get(f"/v1/jobs/{job_id}").json()
        time.sleep(0.2)


def test_ask_searches_checks_the_frames_and_cites_clip_at_time(server, media):
    with httpx.Client(base_url=server.url, timeout=180) as c:
        job = c.post("/v1/jobs", json={"task": "describe", "video_path": str(media["clip"]),
                                       "max_new_tokens": 16}).json()["job_id"]
        _wait_done(c, job)
        r = c.post("/v1/ask", json={"question": "clip", "check": 2, "threshold": 0.01})
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["schema"] == "chord.ask/v1" and doc["candidates"] >= 1
        assert 1 <= doc["checked"] <= 2 and len(doc["claims"]) == doc["checked"]
        for claim in doc["claims"]:
            assert claim["job_id"] and claim["error"] is None, claim
            assert 0.0 <= claim["p_entailment"] <= 1.0
            assert 0.0 <= claim["at_s"] <= 2.0  # a frame of the 2 s clip, by its PTS
            assert re.fullmatch(r"clip\.mp4@0:0[0-2]", claim["citation"]), claim
            state = c.get(f"/v1/jobs/{claim['job_id']}").json()
            assert (state["state"], state["task"]) == ("done", "entail")
        supported = [cl for cl in doc["claims"] if cl["supported"]]
        assert doc["supported"] == len(supported)
        for claim in supported:  # every supported claim is in the answer with its citation
            assert claim["citation"] in doc["answer"]
        assert doc["timings_ms"]["total"] >= doc["timings_ms"]["check"] > 0
        nothing = c.post("/v1/ask", json={"question": "zebraxylophone", "check": 1}).json()
        assert (nothing["candidates"], nothing["claims"]) == (0, [])
        assert c.post("/v1/ask", json={"question": "", "check": 1}).status_code in (400, 422)
        assert c.post("/v1/ask", json={"question": "x", "check": 99}).status_code in (400, 422)


def _store_ground_job(store, job_id: str) -> None:  # noqa: ANN001
    """A done grounding job over a real 3 s clip in the uploads folder (a media root)."""
    from chord_core.config import default_data_dir
    from chord_core.media.probe import probe
    from chord_core.testing.videos import make_video
    from chord_core.types import ModelInfo, Result, SamplingPlan, Segment, Timing

    (default_data_dir() / "uploads").mkdir(parents=True, exist_ok=True)
    clip = make_video(default_data_dir() / "uploads" / "dock.mp4", duration_s=3.0, fps=10.0,
                      size_wh=(96, 72)).path
    plan = SamplingPlan(task="ground", fps=2.0, frame_indices=(0, 10), timestamps_s=(0.0, 1.0),
                        input_wh=(96, 72), visual_tokens=8, tokens_per_frame=4)
    result = Result(task="ground", query="the green square", video=probe(clip), sampling=plan,
                    model=ModelInfo(id="test", dtype="float32", device_map={"": "cpu"},
                                    test_model=True),
                    timing=Timing(probe_s=0.0, decode_s=0.0, generate_s=0.0, total_s=0.1),
                    segments=(Segment(1, 0.5, 1.5, "green square"),),
                    created_at="2026-12-01T10:00:00+00:00")
    store.add_job(job_id, video_path=str(clip), task="ground", query="the green square",
                  model="test", state="running")
    store.save_result(job_id, result)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    import uvicorn

    from chord_core.library.alerts import store_alert
    from chord_core.library.index import LibraryIndex
    from chord_core.runtime.store import Store
    from chord_core.service.app import create_app
    from chord_core.service.runtime import ServiceRuntime
    from chord_core.service.settings import ServiceSettings

    tmp = tmp_path_factory.mktemp("reviewapi")
    store = Store(tmp / "chord.sqlite3")
    index = LibraryIndex(tmp / "chord.sqlite3")
    for n, (statement, start) in enumerate([("a person climbs the fence", 1.0),
                                            ("a forklift enters the walkway", 4.0)]):
        store_alert(index, "w-1", {"clip_key": f"k{n}", "statement": statement,
                                   "path": f"/media/yard/cam{n}.mp4", "job_id": f"j{n}"},
                    {"start_s": start, "end_s": start + 1, "probability": 0.9,
                     "evidence": [{"t_s": start, "frame_index": 3, "entailment": 0.9}]})
    index.close()
    _store_ground_job(store, "g-1")
    port = free_port()
    app = create_app(ServiceRuntime(manager=None, store=store),
                     ServiceSettings(port=port, api_key=KEY))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)
    store.close()


def test_review_lists_marks_and_guards(keyed):
    auth = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=keyed, timeout=20, headers=auth) as c:
        assert httpx.get(keyed + "/v1/review").status_code == 401
        assert httpx.post(keyed + "/v1/review/mark", json={"all": True}).status_code == 401
        doc = c.get("/v1/review").json()
        assert doc["schema"] == "chord.review-items/v1" and doc["unreviewed"] == 2
        fence = [i for i in doc["items"] if "fence" in i["statement"]][0]
        r = c.post("/v1/review/mark", json={"ids": [fence["id"]], "by": "ana"})
        assert r.json() == {"changed": 1}
        left = c.get("/v1/review", params={"reviewed": "false"}).json()["items"]
        assert [i["statement"] for i in left] == ["a forklift enters the walkway"]
        done = c.get("/v1/review", params={"reviewed": "true"}).json()["items"]
        assert [(i["id"], i["reviewed_by"]) for i in done] == [(fence["id"], "ana")]
        assert c.post("/v1/review/mark", json={"all": True}).json() == {"changed": 1}
        assert c.get("/v1/review").json()["unreviewed"] == 0
        bad = c.post("/v1/review/mark", json={"ids": ["1 OR 1=1"]})
        assert bad.status_code == 400 and "hint" in bad.json() and "Traceback" not in bad.text
        assert c.get("/v1/review", params={"reviewed": "maybe"}).status_code == 400
        assert c.get("/v1/review", params={"severity": "urgent"}).status_code == 400
        assert c.post("/v1/review/mark", json={"ids": ["a1"], "extra": 1}).status_code == 422
        assert c.get("/v1/review/thumbnail", params={"item": "a999"}).status_code == 404
        added = c.post("/v1/cases/yard%20night/items", json={"ids": [fence["id"]]})
        assert added.json() == {"added": 1}, added.text
        assert [(k["name"], k["moments"]) for k in c.get("/v1/cases").json()["cases"]] == [
            ("yard night", 1)]
        assert c.post("/v1/cases/..%2Fetc/items", json={"ids": ["a1"]}).status_code in (400,
                                                                                        404)


def test_cases_take_hits_and_job_spans_and_export_as_a_zip(keyed):
    import io
    import zipfile

    from chord_core.library.case_export import CASE_JSON_SCHEMA

    jsonschema = pytest.importorskip("jsonschema")
    auth = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=keyed, timeout=60, headers=auth) as c:
        url = "/v1/cases/dock%20case/items"
        assert httpx.post(keyed + url, json={"job_id": "g-1", "start_s": 0, "end_s": 1}
                          ).status_code == 401
        assert c.get("/v1/cases/dock%20case/export").status_code == 404  # no moments yet
        span = c.post(url, json={"job_id": "g-1", "start_s": 0.5, "end_s": 1.5})
        assert span.json() == {"added": 1}, span.text
        again = c.post(url, json={"job_id": "g-1", "start_s": 0.5, "end_s": 1.5})
        assert again.json() == {"added": 0}  # the same moment is kept once
        hits = c.get("/v1/search", params={"q": "green square"}).json()["hits"]
        hit = next(h for h in hits if h["source"] == "g-1")
        added = c.post(url, json={"hit": hit | {"video_path": "/etc/passwd"}})  # path ignored
        assert added.json() == {"added": 1}, added.text
        bad = {  # each refused with a message and a hint, never a traceback
            "no job": ({"job_id": "nope", "start_s": 0, "end_s": 1}, 404),
            "past the clip": ({"job_id": "g-1", "start_s": 1, "end_s": 9}, 400),
            "reversed": ({"job_id": "g-1", "start_s": 2, "end_s": 1}, 400),
            "unknown hit": ({"hit": {"source": "g-1", "start_s": 0.1, "end_s": 0.2}}, 400),
            "two kinds": ({"ids": ["a1"], "job_id": "g-1", "start_s": 0, "end_s": 1}, 400),
            "nothing": ({}, 400),
        }
        for why, (payload, status) in bad.items():
            r = c.post(url, json=payload)
            assert r.status_code == status and "hint" in r.json(), (why, r.text)
            assert "Traceback" not in r.text
        assert c.post("/v1/cases/..%2Fetc/items", json={"job_id": "g-1", "start_s": 0,
                                                         "end_s": 1}).status_code in (400, 404)
        assert c.post("/v1/cases/" + "x" * 81 + "/items",
                      json={"job_id": "g-1", "start_s": 0, "end_s": 1}).status_code == 400
        assert httpx.get(keyed + "/v1/cases/dock%20case/export").status_code == 401
        r = c.get("/v1/cases/dock%20case/export")
        assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(r.content)) as z:
        names = z.namelist()
        doc = json.loads(z.read(next(n for n in names if n.endswith("case.json"))))
    jsonschema.validate(doc, CASE_JSON_SCHEMA)
    assert [(m["origin"], m["error"]) for m in doc["moments"]] == [("result", None),
                                                                   ("search", None)]
    assert doc["moments"][0]["label"] == "green square"
    assert doc["moments"][0]["result"]["query"] == "the green square"
    assert all(m["path"].endswith("dock.mp4") for m in doc["moments"])
    clips = [n for n in names if "/clips/" in n and not n.endswith("/")]
    assert len(clips) == 2 and all(n.endswith(".mp4") for n in clips)
