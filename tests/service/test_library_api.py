"""``GET /v1/search`` and the hit thumbnail: on the shared real service (a real job, then its
words found), and on a keyed uvicorn server over a store of stored results (auth, filters,
bounds, errors without tracebacks)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx
import pytest
from service_server import free_port

from chord_core.runtime.store import Store
from chord_core.testing.library_docs import result_doc, store_result

KEY = "library-test-key"


def test_a_finished_job_is_found_by_a_word_of_its_text_and_its_file_name(server, media):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/v1/jobs", json={"task": "describe", "video_path": str(media["clip"]),
                                     "max_new_tokens": 128})
        job_id = r.json()["job_id"]
        deadline = time.monotonic() + 120
        while c.get(f"/v1/jobs/{job_id}").json()["state"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        text = c.get(f"/v1/jobs/{job_id}/result").json()["text"]
        by_name = c.get("/v1/search", params={"q": "clip", "task": "describe", "limit": 100})
        assert by_name.status_code == 200, by_name.text
        assert job_id in {h["source"] for h in by_name.json()["hits"]}
        words = re.findall(r"[^\W\d_]{3,}", text)  # random weights: whatever it wrote
        if words:
            hits = c.get("/v1/search", params={"q": words[0], "limit": 100}).json()["hits"]
            assert job_id in {h["source"] for h in hits}
        thumb = c.get("/v1/library/thumbnail", params={"source": job_id, "t": 1.0})
        assert thumb.status_code == 200 and thumb.content[:2] == b"\xff\xd8"  # a JPEG


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """A keyed service app on uvicorn over a store holding three results (no workers: the
    search reads the store only)."""
    import uvicorn

    from chord_core.service.app import create_app
    from chord_core.service.runtime import ServiceRuntime
    from chord_core.service.settings import ServiceSettings

    tmp = tmp_path_factory.mktemp("libapi")
    store = Store(tmp / "chord.sqlite3")
    store_result(store, "j-a", result_doc("describe", "/media/site-a/cam1.mp4",
                                          text="A forklift crosses the walkway."))
    store_result(store, "j-b", result_doc("ground", "/media/site-b/cam2.mp4",
                                          query="the forklift", segments=[(1.0, 2.5)]))
    store_result(store, "j-c", result_doc("describe", "/media/site-b/cam3.mp4",
                                          text="Rain on an empty parking lot."))
    port = free_port()
    settings = ServiceSettings(port=port, api_key=KEY)
    app = create_app(ServiceRuntime(manager=None, store=store), settings)
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


def _get(url: str, path: str, key: str | None = KEY, **params) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(url + path, params=params, headers=headers, timeout=20)


@pytest.mark.parametrize("params, sources", [
    ({"q": "forklift"}, {"j-a", "j-b"}),
    ({"q": "forklift", "folder": "/media/site-b"}, {"j-b"}),
    ({"q": "forklift", "task": "describe"}, {"j-a"}),
    ({"q": "forklift", "date_to": "2000-01-01"}, set()),
    ({"q": "parking rain"}, {"j-c"}),
], ids=["word", "folder", "task", "date", "two-words"])
def test_search_with_filters(keyed, params, sources):
    r = _get(keyed, "/v1/search", **params)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["schema"] == "chord.library-search/v1"
    assert {h["source"] for h in doc["hits"]} == sources
    for hit in doc["hits"]:
        assert {"video_path", "start_s", "end_s", "snippet", "thumbnail_s"} <= set(hit)


@pytest.mark.parametrize("path, params, key, status", [
    ("/v1/search", {"q": "forklift"}, None, 401),
    ("/v1/search", {"q": "forklift"}, "wrong", 401),
    ("/v1/search", {"q": "x" * 201}, KEY, 422),
    ("/v1/search", {"q": "forklift", "limit": 1000}, KEY, 422),
    ("/v1/search", {"q": "   "}, KEY, 400),
    ("/v1/search", {"q": "forklift", "date_from": "monday"}, KEY, 400),
    ("/v1/library/thumbnail", {"source": "j-nope"}, KEY, 404),
    ("/v1/library/thumbnail", {"source": "j-a", "t": 1}, KEY, 422),  # /media/… is no file
    ("/v1/library/thumbnail", {"source": "j-a"}, None, 401),
    ("/v1/alerts", {}, None, 401),
    ("/v1/alerts/events", {"timeout": 1}, None, 401),
    ("/v1/alerts/events", {"timeout": 99999}, KEY, 422),
], ids=["no-key", "wrong-key", "long-q", "big-limit", "no-words", "bad-date", "unknown-source",
        "clip-gone", "thumb-no-key", "alerts-no-key", "events-no-key", "events-too-long"])
def test_refusals_are_json_with_a_hint(keyed, path, params, key, status):
    r = _get(keyed, path, key=key, **params)
    assert r.status_code == status, r.text
    body = r.json()
    assert body.get("error") and "Traceback" not in r.text
