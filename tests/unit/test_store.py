"""The SQLite job store: round trips, states, idempotent results, crash recovery, concurrency."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from chord_core.errors import ChordError, VideoError
from chord_core.runtime.jobs import JobState
from chord_core.runtime.store import Store, content_key, default_store_path, file_hash
from chord_core.types import (
    SCHEMA,
    Detection,
    ModelInfo,
    Result,
    SamplingPlan,
    Segment,
    Timing,
    Track,
    VideoInfo,
)


def make_result(query: str = "the cyclist in a red helmet") -> Result:
    """A grounding result shaped like a real one (unicode, floats, tuples, None scores)."""
    video = VideoInfo(path="/clips/ride.mp4", duration_s=12.5, fps=29.97, frame_count=375,
                      width=1920, height=1080, codec="h264", rotation=90, container="mp4",
                      header_fps=29.97, header_frame_count=375, stored_wh=(1080, 1920),
                      warnings=("variable frame rate suspected",))
    plan = SamplingPlan(task="ground", fps=2.0, frame_indices=(0, 15, 30),
                        timestamps_s=(0.0, 0.5005, 1.001), input_wh=(644, 364),
                        visual_tokens=897, tokens_per_frame=299, notes=("capped",))
    dets = tuple(Detection(t_s=t, frame_index=i, bbox=(0.1, 0.2, 0.35, 0.9),
                           bbox_px=(192, 216, 672, 972), label="cyclist", track_id=1,
                           score=None if i else 0.87)
                 for i, t in zip(plan.frame_indices, plan.timestamps_s))
    return Result(task="ground", query=query, video=video, sampling=plan,
                  model=ModelInfo(id="test", dtype="float32", device_map={"": "cpu"},
                                  test_model=True),
                  timing=Timing(probe_s=0.01, decode_s=0.2, generate_s=1.5, total_s=1.8),
                  text="", detections=dets,
                  tracks=(Track(1, "cyclist", 0.0, 1.001, 3),),
                  segments=(Segment(1, 0.0, 1.001, "cyclist"),),
                  raw_outputs=('```json\n[{"bbox_2d": [64, 72, 225, 327], "label": "cyclist"}]\n```',),
                  warnings=("frame 30: dropped box — zero area ✗",),
                  created_at="2026-11-30T10:00:00+00:00")


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "chord.sqlite3")
    yield s
    s.close()


def add(store: Store, job_id: str, **kw) -> None:
    kw.setdefault("video_path", f"/clips/{job_id}.mp4")
    kw.setdefault("task", "ground")
    store.add_job(job_id, **kw)


def test_schema_and_pragmas(store: Store) -> None:
    assert store.journal_mode == "wal"
    assert store.schema_version == 1
    with sqlite3.connect(store.path) as raw:
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"jobs", "results", "batches", "schema_version"} <= tables


def test_default_path_is_in_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path / "data"))
    assert default_store_path() == tmp_path / "data" / "chord.sqlite3"
    with Store() as s:
        assert s.path.is_file()


def test_result_round_trip(store: Store) -> None:
    result = make_result()
    add(store, "j1", query=result.query, model="test", key="k1",
        spec={"fps": 2.0, "max_frames": 768})
    store.update_state("j1", "running", worker="gpu0")
    store.save_result("j1", result.to_dict())
    back = store.get_result("j1")
    assert back == result.to_dict()
    assert Result.from_dict(back) == result
    job = store.get_job("j1")
    assert job["state"] == "done" and job["worker"] == "gpu0"
    assert job["spec"] == {"fps": 2.0, "max_frames": 768}
    assert job["video_name"] == "j1.mp4"
    assert job["finished_at"] >= job["started_at"] >= job["submitted_at"]


def test_save_result_accepts_result_object(store: Store) -> None:
    add(store, "j1")
    store.save_result("j1", make_result())
    assert store.get_result("j1")["schema"] == SCHEMA


def test_save_result_is_idempotent(store: Store) -> None:
    add(store, "j1", key="k")
    store.update_state("j1", "running")
    store.save_result("j1", make_result("first").to_dict())
    store.save_result("j1", make_result("second").to_dict())
    with sqlite3.connect(store.path) as raw:
        count = raw.execute("SELECT COUNT(*) FROM results WHERE job_id='j1'").fetchone()[0]
    assert count == 1
    assert store.get_result("j1")["query"] == "second"
    assert store.get_job("j1")["state"] == "done"


def test_save_result_is_atomic(store: Store) -> None:
    add(store, "j1")
    with pytest.raises(ValueError, match="not a chord.result/v1"):
        store.save_result("j1", {"schema": "other"})
    store.update_state("j1", "cancelled")
    with pytest.raises(ValueError, match="is cancelled"):
        store.save_result("j1", make_result().to_dict())
    assert store.get_result("j1") is None
    assert store.get_job("j1")["state"] == "cancelled"


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        (["running", "failed"], True),
        (["running", "cancelled"], True),
        (["cancelled"], True),
        (["running", "failed", "queued", "running"], True),
        (["running", "running"], True),
        (["done"], False),
        (["running", "failed", "running"], False),
        (["cancelled", "failed"], False),
    ],
    ids=["fail", "cancel-running", "cancel-queued", "retry", "progress-update",
         "done-needs-result", "failed-to-running", "cancelled-to-failed"],
)
def test_state_transitions(store: Store, path: list[str], allowed: bool) -> None:
    add(store, "j1")
    *head, last = path
    for state in head:
        store.update_state("j1", state)
    if allowed:
        store.update_state("j1", last)
        assert store.get_job("j1")["state"] == last
    else:
        with pytest.raises(ValueError, match="cannot go from"):
            store.update_state("j1", last)


def test_done_is_final(store: Store) -> None:
    add(store, "j1")
    store.save_result("j1", make_result())
    for state in ("running", "queued", "failed", "cancelled"):
        with pytest.raises(ValueError, match="cannot go from done"):
            store.update_state("j1", state)


def test_state_columns(store: Store) -> None:
    add(store, "j1")
    job = store.get_job("j1")
    assert (job["state"], job["attempts"], job["started_at"], job["worker"]) == \
        ("queued", 0, None, None)
    store.update_state("j1", JobState.RUNNING, worker="cpu1",
                       progress={"stage": "decoding", "done": 3, "total": 10})
    job = store.get_job("j1")
    assert (job["state"], job["attempts"], job["worker"]) == ("running", 1, "cpu1")
    assert job["progress"] == {"stage": "decoding", "done": 3, "total": 10}
    error = {"type": "VideoError", "message": "bad", "hint": "upload an mp4"}
    store.update_state("j1", "failed", error=error)
    job = store.get_job("j1")
    assert job["error"] == error and job["finished_at"] is not None
    store.update_state("j1", "queued")
    store.update_state("j1", "running", worker="gpu1")
    job = store.get_job("j1")
    assert (job["attempts"], job["error"], job["finished_at"]) == (2, None, None)


@pytest.mark.parametrize(
    ("call", "exc"),
    [
        (lambda s: s.update_state("nope", "running"), KeyError),
        (lambda s: s.update_state("j1", "exploded"), ValueError),
        (lambda s: s.save_result("nope", make_result()), KeyError),
        (lambda s: add(s, "j1"), ValueError),
        (lambda s: s.set_batch_summary("nope", {}), KeyError),
    ],
    ids=["unknown-job", "unknown-state", "result-unknown-job", "duplicate-id", "unknown-batch"],
)
def test_bad_calls(store: Store, call, exc: type) -> None:
    add(store, "j1")
    with pytest.raises(exc):
        call(store)
    assert store.get_job("j1")["state"] == "queued"


def test_find_done_by_key(store: Store) -> None:
    add(store, "a", key="k1")
    add(store, "b", key="k1")
    add(store, "c", key="k2")
    assert store.find_done("k1") is None
    store.update_state("a", "running")
    store.update_state("a", "failed", error={"message": "x"})
    assert store.find_done("k1") is None
    store.save_result("b", make_result())
    assert store.find_done("k1") == "b"
    assert store.find_done("k2") is None
    assert store.find_done("") is None


def test_list_ordering_and_pagination(store: Store) -> None:
    store.add_batch("B", "/out")
    for i in range(7):
        add(store, f"j{i}", submitted_at=1000.0 + i, batch_id="B" if i % 2 else None)
    add(store, "same-time-later", submitted_at=1006.0)
    ids = [j["job_id"] for j in store.list_jobs(limit=100)]
    assert ids == ["same-time-later", "j6", "j5", "j4", "j3", "j2", "j1", "j0"]
    page2 = [j["job_id"] for j in store.list_jobs(limit=3, offset=3)]
    assert page2 == ["j4", "j3", "j2"]
    assert [j["job_id"] for j in store.list_jobs(batch_id="B")] == ["j5", "j3", "j1"]
    store.update_state("j2", "cancelled")
    assert [j["job_id"] for j in store.list_jobs(state="cancelled")] == ["j2"]
    assert store.count_jobs() == 8 and store.count_jobs(batch_id="B") == 3
    assert "result" not in store.list_jobs(limit=1)[0]


def test_delete_removes_result(store: Store) -> None:
    add(store, "j1", key="k")
    store.save_result("j1", make_result())
    assert store.delete_job("j1") is True
    assert store.get_job("j1") is None and store.get_result("j1") is None
    assert store.find_done("k") is None
    assert store.delete_job("j1") is False
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0


def test_batches(store: Store) -> None:
    store.add_batch("B1", "/exports/b1", created_at=5.0)
    store.add_batch("B1", "/elsewhere")  # resumed batch: no-op
    add(store, "x", batch_id="B1")
    add(store, "y", batch_id="B1")
    store.save_result("y", make_result())
    store.set_batch_summary("B1", {"done": 1, "failed": 0})
    batch = store.get_batch("B1")
    assert batch["out_dir"] == "/exports/b1" and batch["created_at"] == 5.0
    assert batch["summary"] == {"done": 1, "failed": 0}
    assert batch["counts"] == {"queued": 1, "done": 1}
    assert store.get_batch("nope") is None


def test_two_stores_one_file(tmp_path: Path) -> None:
    db = tmp_path / "chord.sqlite3"
    with Store(db) as a, Store(db) as b:
        add(a, "j1", key="k")
        assert b.get_job("j1")["state"] == "queued"
        b.update_state("j1", "running", worker="gpu1")
        a.save_result("j1", make_result())
        assert b.find_done("k") == "j1"
        assert b.get_result("j1")["schema"] == SCHEMA
        b.delete_job("j1")
        assert a.get_job("j1") is None


def test_concurrent_writers(tmp_path: Path) -> None:
    """Threads on two Store objects (two connections, like two processes) write at once."""
    db = tmp_path / "chord.sqlite3"
    stores = [Store(db), Store(db)]
    errors: list[BaseException] = []
    per_thread = 25

    def work(t: int) -> None:
        s = stores[t % 2]
        try:
            for i in range(per_thread):
                job = f"t{t}-{i}"
                s.add_job(job, video_path=f"{job}.mp4", task="describe", key=job)
                s.update_state(job, "running", worker=f"gpu{t}")
                s.update_state(job, "running", progress={"done": i})
                s.save_result(job, make_result())
                s.list_jobs(limit=5)
        except BaseException as exc:  # noqa: BLE001 — collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    try:
        assert errors == []
        assert stores[0].count_jobs(state="done") == 6 * per_thread
    finally:
        for s in stores:
            s.close()


def test_closed_store_says_so(tmp_path: Path) -> None:
    s = Store(tmp_path / "x.sqlite3")
    s.close()
    with pytest.raises(ChordError, match="is closed"):
        s.get_job("j1")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "chord.sqlite3"
    Store(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE schema_version SET version = 2")
    with pytest.raises(ChordError, match="newer Chord"):
        Store(db)


# -- content keys ---------------------------------------------------------------------------

def test_file_hash_streams_and_caches(tmp_path: Path) -> None:
    import hashlib

    data = os.urandom(3 * 1024 * 1024 + 17)  # spans several 1 MiB chunks
    clip = tmp_path / "a.mp4"
    clip.write_bytes(data)
    first = file_hash(clip)
    assert first == hashlib.sha256(data).hexdigest()
    stamp = clip.stat().st_mtime_ns
    changed = data[:-1] + bytes([data[-1] ^ 1])  # same size, new content
    clip.write_bytes(changed)
    os.utime(clip, ns=(stamp, stamp))  # same (path, size, mtime): the cache answers
    assert file_hash(clip) == first
    os.utime(clip, ns=(stamp + 1_000_000, stamp + 1_000_000))  # touched: hashed again
    assert file_hash(clip) == hashlib.sha256(changed).hexdigest()


def test_file_hash_missing(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match="cannot read video"):
        file_hash(tmp_path / "gone.mp4")


@pytest.mark.parametrize(
    ("change", "same"),
    [
        ({}, True),
        ({"path": "copy"}, True),
        ({"query": "  cyclist  "}, True),
        ({"sampling": {"max_frames": 64, "fps": 2.0}}, True),
        ({"task": "describe"}, False),
        ({"query": "dog"}, False),
        ({"model": "Qwen/Qwen2.5-VL-7B-Instruct"}, False),
        ({"sampling": {"fps": 1.0, "max_frames": 64}}, False),
        ({"path": "other"}, False),
    ],
    ids=["same", "copied-file", "query-whitespace", "sampling-key-order", "task", "query",
         "model", "sampling", "other-content"],
)
def test_content_key(tmp_path: Path, change: dict, same: bool) -> None:
    base = tmp_path / "clip.mp4"
    base.write_bytes(b"\x00video-bytes" * 1000)
    (tmp_path / "copy.mp4").write_bytes(base.read_bytes())
    (tmp_path / "other.mp4").write_bytes(b"\x01other" * 1000)
    args = {"path": "clip", "task": "ground", "query": "cyclist", "model": "test",
            "sampling": {"fps": 2.0, "max_frames": 64}}
    key1 = content_key(base, "ground", "cyclist", "test", args["sampling"])
    args.update(change)
    key2 = content_key(tmp_path / f"{args['path']}.mp4", args["task"], args["query"],
                       args["model"], args["sampling"])
    assert (key1 == key2) is same
    assert len(key1) == 64


def test_a_fast_decode_runs_key_is_its_own_and_exact_keys_are_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CHORD_DECODE=fast frames are near the exact ones, not equal: an exact run is never
    answered from a fast run's result, and the default's keys stay what they were."""
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00video-bytes" * 1000)
    sampling = {"fps": 2.0, "max_frames": 64}
    monkeypatch.delenv("CHORD_DECODE", raising=False)
    default = content_key(clip, "ground", "cyclist", "test", sampling)
    monkeypatch.setenv("CHORD_DECODE", "exact")
    assert content_key(clip, "ground", "cyclist", "test", sampling) == default
    monkeypatch.setenv("CHORD_DECODE", "fast")
    fast = content_key(clip, "ground", "cyclist", "test", sampling)
    assert fast != default
    assert fast == content_key(clip, "ground", "cyclist", "test", sampling)
