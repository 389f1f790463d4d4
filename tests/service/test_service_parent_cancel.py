"""``DELETE /v1/jobs/<parent>`` of a ``/batch_predict`` request stops its children (issue 40:
it answered 409 and the children kept running). Through the real service (uvicorn, two CPU
workers, the tiny model): both workers are held by a long grounding job, a request's tasks
queue behind it, and the parent's DELETE cancels them at once; the request answers with
each task's "cancelled" error and the parent's row ends cancelled, once."""

from __future__ import annotations

import base64
import threading
import time

import httpx

from chord_core.runtime.store import Store
from chord_core.testing.videos import make_video


def _parent(store: Store, tasks: int) -> dict | None:
    rows = [r for r in store.list_jobs(limit=200, top_level=True)
            if (r.get("spec") or {}).get("long_run") == "batch_predict"
            and r["state"] == "running" and (r["spec"] or {}).get("tasks") == tasks]
    return rows[0] if rows else None


def test_delete_of_a_batch_predict_parent_cancels_its_children(server, media) -> None:
    clip = make_video(server.media / "hold.mp4", duration_s=30.0, fps=10.0,
                      size_wh=(160, 120)).path
    image = base64.b64encode(media["img"].read_bytes()).decode()
    tasks = [{"image_data": image, "text": f"parent cancel test {i}"} for i in range(7)]
    answer: dict = {}
    with httpx.Client(base_url=server.url, timeout=60) as c:
        hold = c.post("/v1/jobs", json={"task": "ground", "video_path": str(clip),
                                        "target": "the square", "fps": 2}).json()["job_id"]
        post = threading.Thread(target=lambda: answer.update(
            r=c.post("/batch_predict", json={"tasks": tasks})))
        post.start()
        try:
            with Store(server.data / "chord.sqlite3") as store:
                deadline, parent = time.monotonic() + 30, None
                while parent is None and time.monotonic() < deadline:
                    parent = _parent(store, len(tasks))
                    time.sleep(0.1)
                assert parent is not None, "the request's parent row never appeared"
                pid = parent["job_id"]
                asked = time.time()
                r = c.delete(f"/v1/jobs/{pid}")
                assert r.status_code == 200, r.text
                post.join(30)
                kids = store.list_jobs(limit=200, parent=pid)
                row = store.get_job(pid)
        finally:
            c.delete(f"/v1/jobs/{hold}")
    assert len(kids) == len(tasks) and {k["state"] for k in kids} == {"cancelled"}
    assert max(k["finished_at"] for k in kids) - asked < 1.0  # they stopped at once
    assert row["state"] == "cancelled"
    preds = answer["r"].json()["predictions"]
    assert answer["r"].status_code == 200 and len(preds) == len(tasks)
    assert all("cancelled" in p["error"] for p in preds)
