"""Long-video runs through the jobs API (issue 38), on the real service (uvicorn, two CPU
workers, the tiny model): ``POST /v1/jobs`` with ``task: chapters`` answers 202 with the run's
parent id, its event stream tells each chunk job's start and end and the progress, GET gives
the chord.chapters/v1 document once done, DELETE stops the run's children within a second,
and bad requests get a clear 4xx. What ran is read from the store's rows."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from service_server import read_events

from chord_core.runtime.store import Store
from chord_core.testing.videos import make_video

CHAPTERS = {"task": "chapters", "chunk_s": 4, "cuts": "fixed", "chapter_s": 6,
            "frames_per_chunk": 4, "max_new_tokens": 128}


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] and "hint" in body, body
    assert "Traceback" not in r.text and 'File "' not in r.text
    return body


def _events(client: httpx.Client, url: str) -> list[tuple[str, dict]]:
    return read_events(client, url, timeout=300)


@pytest.fixture(scope="module")
def long_clip(server) -> Path:
    return make_video(server.media / "long12.mp4", duration_s=12.0, fps=8.0,
                      size_wh=(96, 64)).path


def test_chapters_through_the_jobs_api_to_a_document_with_events_per_child(
        server, long_clip) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/v1/jobs", json={**CHAPTERS, "video_path": str(long_clip)})
        assert r.status_code == 202, r.text
        job_id = r.json()["job_id"]
        assert job_id.startswith("lvc-") and r.json()["task"] == "chapters"
        events = _events(c, f"/v1/jobs/{job_id}/events")
        view = c.get(f"/v1/jobs/{job_id}").json()
        result = c.get(f"/v1/jobs/{job_id}/result")
        again = c.post("/v1/jobs", json={**CHAPTERS, "video_path": str(long_clip)})
    names = [e for e, _ in events]
    assert names[0] == "state" and names[-1] == "end" and events[-1][1]["state"] == "done"
    with Store(server.data / "chord.sqlite3") as store:
        kids = store.list_jobs(limit=100, parent=job_id)
        parent = store.get_job(job_id)
    chunks = sorted(k["job_id"] for k in kids if "-c0" in k["job_id"])
    assert chunks == [f"{job_id}-c{i:04d}" for i in range(3)]  # 12 s in 4 s chunks
    told = {(d["job_id"], d["event"]) for e, d in events if e == "child"}
    for kid in kids:  # every child job's start and end were streamed, each once
        assert (kid["job_id"], "start") in told and (kid["job_id"], "end") in told, kid
    assert len([e for e in names if e == "child"]) == 2 * len(kids)
    progress = [d for e, d in events if e == "progress" and d["stage"] == "chunks"]
    assert progress[-1]["done"] == progress[-1]["total"] == 3
    assert view["state"] == "done" and view["task"] == "chapters"
    doc = view["document"]
    assert doc["schema"] == "chord.chapters/v1" and doc["run_id"] == job_id
    assert [c["index"] for c in doc["chunks"]] == [0, 1, 2] and doc["chapters"]
    assert result.status_code == 200 and result.json() == doc
    assert parent["state"] == "done" and parent["summary"]["document"] == doc
    assert {k["state"] for k in kids} == {"done"}
    assert again.status_code == 202 and again.json()["job_id"] == job_id  # the same run


def test_delete_of_a_chapters_run_stops_its_children_within_a_second(server, media) -> None:
    """Both workers are held by a long grounding job, so the run's chunk jobs queue behind
    it; DELETE of the run cancels them and the parent's row ends cancelled."""
    clip = make_video(server.media / "hold-long.mp4", duration_s=30.0, fps=10.0,
                      size_wh=(160, 120)).path
    chapters_clip = make_video(server.media / "cancel-me.mp4", duration_s=20.0, fps=8.0,
                               size_wh=(96, 64)).path
    with httpx.Client(base_url=server.url, timeout=60) as c, \
            Store(server.data / "chord.sqlite3") as store:
        hold = c.post("/v1/jobs", json={"task": "ground", "video_path": str(clip),
                                        "target": "the square", "fps": 2}).json()["job_id"]
        try:
            r = c.post("/v1/jobs", json={**CHAPTERS, "video_path": str(chapters_clip)})
            assert r.status_code == 202, r.text
            job_id = r.json()["job_id"]
            deadline = time.monotonic() + 60
            while not store.list_jobs(limit=10, parent=job_id) and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            asked = time.time()
            d = c.delete(f"/v1/jobs/{job_id}")
            assert d.status_code == 200, d.text
            deadline = time.monotonic() + 10
            while c.get(f"/v1/jobs/{job_id}").json()["state"] != "cancelled" and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            view = c.get(f"/v1/jobs/{job_id}").json()
            kids = store.list_jobs(limit=100, parent=job_id)
            row = store.get_job(job_id)
            twice = c.delete(f"/v1/jobs/{job_id}")
        finally:
            c.delete(f"/v1/jobs/{hold}")
    assert kids and {k["state"] for k in kids} == {"cancelled"}, kids
    took = max(k["finished_at"] for k in kids) - asked
    assert took < 1.0  # they stopped at once
    print(f"\nCANCEL chapters run: {len(kids)} child job(s) cancelled, the last "
          f"{took:.3f} s after the DELETE")
    assert view["state"] == "cancelled" and row["state"] == "cancelled"
    _error(twice, 409)  # a finished run is not cancelled again
    with httpx.Client(base_url=server.url, timeout=60) as c:  # asked again: it goes on
        r = c.post("/v1/jobs", json={**CHAPTERS, "video_path": str(chapters_clip)})
        assert r.status_code == 202 and r.json()["job_id"] == job_id, r.text
        end = _events(c, f"/v1/jobs/{job_id}/events")[-1]
    assert end == ("end", end[1]) and end[1]["state"] == "done", end
    with Store(server.data / "chord.sqlite3") as store:
        kids = store.list_jobs(limit=100, parent=job_id)
    assert len([k for k in kids if "-c0" in k["job_id"]]) == 5  # 20 s in 4 s chunks, once
    assert {k["state"] for k in kids} == {"done"}


def test_a_finished_long_run_is_read_from_its_row_when_the_service_does_not_drive_it(
        server, long_clip) -> None:
    """GET of a long run's parent that only the store knows (the CLI's, an earlier
    service's): its state, progress and document from the row."""
    from chord_core.service.long_routes import row_view

    with httpx.Client(base_url=server.url, timeout=60) as c:
        job_id = c.post("/v1/jobs", json={**CHAPTERS, "video_path": str(long_clip)}
                        ).json()["job_id"]
        _events(c, f"/v1/jobs/{job_id}/events")
        live = c.get(f"/v1/jobs/{job_id}").json()
    with Store(server.data / "chord.sqlite3") as store:
        stored = row_view(store.get_job(job_id))
    assert stored is not None and stored["state"] == live["state"] == "done"
    assert stored["document"] == live["document"] and stored["task"] == "chapters"
    assert stored["progress"]["total"] == live["progress"]["total"]


@pytest.mark.parametrize("body, status, words", [
    ({"task": "chapterz"}, 422, "task"),
    ({"task": "chapters", "chunk_s": 0}, 422, "chunk_s"),
    ({"task": "chapters", "fps": 1000}, 422, "fps"),
    ({"task": "chapters", "frames_per_chunk": 3}, 422, "frames_per_chunk"),
    ({"task": "chapters", "cuts": "every"}, 422, "cuts"),
    ({"task": "chapters", "speed": "max"}, 422, "speed"),
    ({"task": "search-long", "query": "a car", "method": "guess"}, 422, "method"),
    ({"task": "ground-long"}, 400, "target"),
    ({"task": "search-long", "query": "  "}, 400, "query"),
    ({"task": "chapters", "max_new_tokens": 4096}, 422, "max_new_tokens"),
])
def test_bad_long_requests_get_a_clear_4xx(server, long_clip, body, status, words) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        err = _error(c.post("/v1/jobs", json={"video_path": str(long_clip), **body}), status)
    assert words in err["error"], err


def test_long_runs_read_no_file_outside_the_media_roots_nor_an_image(server, media,
                                                                     tmp_path) -> None:
    outside = make_video(tmp_path / "outside.mp4", duration_s=2.0, fps=8.0,
                         size_wh=(96, 64)).path
    with httpx.Client(base_url=server.url, timeout=30) as c:
        err = _error(c.post("/v1/jobs", json={**CHAPTERS, "video_path": str(outside)}), 400)
        assert "media roots" in err["error"]
        _error(c.post("/v1/jobs", json={**CHAPTERS, "video_path": "/etc/passwd"}), 400)
        err = _error(c.post("/v1/jobs", json={**CHAPTERS, "video_path": str(media["img"])}),
                     400)
        assert "image" in err["error"]
        _error(c.post("/v1/jobs", json={"task": "chapters"}), 400)  # no clip at all


def _run_to_end(c: httpx.Client, body: dict) -> tuple[str, list[tuple[str, dict]], dict]:
    r = c.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    events = _events(c, f"/v1/jobs/{job_id}/events")
    return job_id, events, c.get(f"/v1/jobs/{job_id}").json()


def test_ground_long_and_search_long_through_the_jobs_api(server, long_clip) -> None:
    clip = make_video(server.media / "search-me.mp4", duration_s=12.0, fps=8.0,
                      size_wh=(96, 64), seed=1).path  # no chapters run of it yet
    with httpx.Client(base_url=server.url, timeout=60) as c:
        gid, gevents, ground = _run_to_end(c, {
            "task": "ground-long", "video_path": str(long_clip), "target": "the square",
            "fps": 1, "ground_tokens": 24})
        sid, sevents, found = _run_to_end(c, {
            **CHAPTERS, "task": "search-long", "video_path": str(clip),
            "query": "a square moves", "max_chapters": 1, "fps": 1, "max_frames": 4})
    assert ground["state"] == "done", ground
    assert gid.startswith("lvg-") and ground["document"]["schema"] == "chord.result/v1"
    assert ground["document"]["task"] == "ground" and ground["task"] == "ground-long"
    assert len(ground["document"]["sampling"]["frame_indices"]) >= 12  # the whole clip
    assert found["state"] == "done", found
    assert found["document"]["query"] == "a square moves" and "hits" in found["document"]
    assert found["document"]["frames_checked"] >= 4
    with Store(server.data / "chord.sqlite3") as store:
        ground_kids = store.list_jobs(limit=100, parent=gid)
        under = store.list_jobs(limit=100, parent=sid)  # the chapters run it needed
        (chapters,) = under
        searches = [r for r in store.list_jobs(limit=100, parent=chapters["job_id"])
                    if (r.get("spec") or {}).get("long_run") == "search"]
    assert ground_kids and {k["state"] for k in ground_kids} == {"done"}
    told = {d["job_id"] for e, d in gevents if e == "child" and d["event"] == "end"}
    assert told == {k["job_id"] for k in ground_kids}
    assert chapters["task"] == "chapters" and chapters["state"] == "done"
    assert len(searches) == 1 and searches[0]["state"] == "done"
    assert [d["stage"] for e, d in sevents if e == "progress"][-1] == "checking"
