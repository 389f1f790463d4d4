"""Long-video mode end to end on the tiny random-weight model (its words mean nothing: the
tests check times, frames, schemas and the store, never text), with a real SQLite store
written by the real in-process job manager (a run is a parent job, its chunks children), and
a real subprocess killed with SIGKILL to test resume."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chord_core.config import ModelConfig
from chord_core.longvideo.chapters import ChaptersRun
from chord_core.longvideo.doc import ChaptersDoc
from chord_core.longvideo.exports import to_srt, to_vtt
from chord_core.longvideo.ground import ground_long
from chord_core.longvideo.search import search
from chord_core.longvideo.settings import LongVideoSettings
from chord_core.media.content_keys import file_hash
from chord_core.media.probe import probe
from chord_core.runtime.cluster import in_process_manager
from chord_core.runtime.store import Store
from chord_core.testing.scenes import even_times, make_scene_clip, uneven_times

pytest.importorskip("av")
ROOT = Path(__file__).resolve().parents[2]
FAST = dict(max_new_tokens=128, describe_max_frames=4, overlap_s=0.5)


CFG = ModelConfig(model="test", device="cpu", compile=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = Store(tmp_path_factory.mktemp("lv-store") / "chord.sqlite3")
    yield s
    s.close()


@pytest.fixture(scope="module")
def runner(tiny_model_dir, store):
    """The manager that writes the store (as the app's and the CLI's do)."""
    r = in_process_manager(CFG, store=store)
    yield r
    r.shutdown()


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    # three scenes, cut at frames 83 and 171, frame times uneven (no time is index / fps)
    return make_scene_clip(tmp_path_factory.mktemp("lv") / "scenes.mp4", [83, 171],
                           uneven_times(260, 10.0))


@pytest.fixture(scope="module")
def chapters(runner, store, clip):
    info = probe(clip.path)
    settings = LongVideoSettings(cuts="scene", chunk_s=4, min_chunk_s=2, max_chunk_s=10,
                                 chapter_s=13, **FAST)
    doc = ChaptersRun(runner, info, file_hash(clip.path), settings, "test")()
    return {"doc": doc, "store": store, "info": info, "settings": settings}


def test_chapters_start_at_the_cut_frames_container_times(chapters, clip) -> None:
    doc: ChaptersDoc = chapters["doc"]
    assert [c["first_frame"] for c in doc.chunks] == [0, 83, 171]
    assert [t.start_s for t in doc.chunk_texts] == [0.0, clip.times_s[83], clip.times_s[171]]
    assert len(doc.chapters) == 2
    starts = [c.start_s for c in doc.chapters]
    cut = doc.chapters[1].first_frame
    assert cut in (83, 171) and starts[1] == clip.times_s[cut]  # exact, the container's
    assert abs(starts[1] - cut / chapters["info"].fps) > 0.01  # not index / average fps
    assert doc.chapters[0].end_s == doc.chapters[1].start_s
    assert doc.chapters[-1].end_s == pytest.approx(chapters["info"].duration_s)
    assert sorted(sum((list(c.chunks) for c in doc.chapters), [])) == [0, 1, 2]
    assert all(c.title and c.summary for c in doc.chapters) and doc.summary
    assert doc.test_model and doc.model["id"] == "test"
    assert any("no title" in w or "JSON" in w for w in doc.warnings)  # random text: said
    vtt, srt_text = to_vtt(doc), to_srt(doc)
    import srt
    import webvtt

    assert len(webvtt.from_string(vtt, strict=True).captions) == 2
    assert [s.start.total_seconds() for s in srt.parse(srt_text)] == \
        pytest.approx([round(x, 3) for x in starts])


def test_a_finished_run_is_read_back_not_run_again(chapters, runner, clip) -> None:
    before = len(runner.jobs())
    again = ChaptersRun(runner, chapters["info"], file_hash(clip.path),
                        chapters["settings"], "test")()
    assert len(runner.jobs()) == before  # no model call
    assert again.to_dict()["chapters"] == chapters["doc"].to_dict()["chapters"]
    store = chapters["store"]
    parent = store.get_job(again.run_id)
    assert parent["state"] == "done" and parent["task"] == "chapters"
    assert parent["summary"]["document"]["chapters"] == again.to_dict()["chapters"]
    assert parent["summary"]["progress"]["stage"] == "summary"
    rows = store.list_jobs(parent=again.run_id)  # 3 chunks, 2 chapters, 1 summary
    assert len(rows) == 3 + 2 + 1 and {r["state"] for r in rows} == {"done"}
    assert {r["attempts"] for r in rows} == {1}
    # the manager wrote each child once, under its fixed id: no second copy of any chunk
    assert all(r["job_id"].startswith(again.run_id + "-") for r in rows)
    assert [r["job_id"] for r in store.list_jobs(top_level=True)] == [again.run_id]


def test_a_finished_run_stops_the_scan_it_was_given(chapters, runner, clip, monkeypatch
                                                    ) -> None:
    """The CLI starts the cut scan while its workers load; a run read back from the store
    needs no scan, and stops it instead of leaving it decoding beside the next jobs."""
    import threading

    from chord_core.errors import JobCancelled
    from chord_core.longvideo import chapters as chapters_mod
    from chord_core.longvideo.chapters import ScanAhead

    started = threading.Event()

    def endless_scan(info, settings, *, cancel):
        started.set()
        while not cancel.wait(0.01):
            pass
        raise JobCancelled("reading the video was cancelled", hint="")

    monkeypatch.setattr(chapters_mod, "find_cuts", endless_scan)
    ahead = ScanAhead(chapters["info"], chapters["settings"])
    assert started.wait(5) and ahead.running()
    doc = ChaptersRun(runner, chapters["info"], file_hash(clip.path), chapters["settings"],
                      "test", scan=ahead)()
    assert doc.chapters == chapters["doc"].chapters and not ahead.running()


def test_a_copy_under_another_name_reads_the_run_back_naming_itself(chapters, runner, clip,
                                                                   tmp_path) -> None:
    """Runs are keyed on the clip's bytes: a copy (or the clip moved) is the same run, read
    back, but its document names the path asked about, not the first one's."""
    import shutil
    from dataclasses import replace

    copy = shutil.copy(clip.path, tmp_path / "renamed copy.mp4")
    before = len(runner.jobs())
    info = replace(chapters["info"], path=str(copy))
    doc = ChaptersRun(runner, info, file_hash(copy), chapters["settings"], "test")()
    assert len(runner.jobs()) == before  # read back, no model call
    assert doc.run_id == chapters["doc"].run_id and doc.chapters == chapters["doc"].chapters
    assert doc.video["path"] == str(copy)
    assert {k: v for k, v in doc.video.items() if k != "path"} == \
        {k: v for k, v in chapters["doc"].video.items() if k != "path"}
    stored = chapters["store"].get_job(doc.run_id)["summary"]["document"]
    assert stored["video"]["path"] == str(clip.path)  # the stored run is left as it was


def test_search_checks_candidate_chapters_and_returns_ranges(chapters, runner, clip) -> None:
    doc = chapters["doc"]
    found = search(runner, chapters["info"], file_hash(clip.path), doc,
                   "a yellow square moves", "test", method="entail", max_chapters=1, fps=1.0,
                   max_frames=4)
    checked = {c["chapter"] for c in found.candidates}
    # the random text rarely shares a word with the query: then every chapter is checked
    assert len(checked) == 1 or (len(checked) == 2 and found.warnings)
    assert found.frames_checked == 4 * len(checked)
    times = set(clip.times_s)
    for hit in found.hits:
        ch = doc.chapters[hit.chapter]
        assert hit.chapter in checked and ch.start_s <= hit.start_s <= hit.end_s < ch.end_s
        assert hit.evidence and all(e.t_s in times and 0 <= e.score <= 1 for e in hit.evidence)
        assert hit.score == max(e.score for e in hit.evidence)
    assert json.loads(json.dumps(found.to_dict()))["schema"] == "chord.search/v1"
    # the search is a parent job inside the chapters run; its frame checks are its children
    store = chapters["store"]
    row = next(r for r in store.list_jobs(parent=doc.run_id) if r["task"] == "search")
    assert row["state"] == "done" and row["query"] == "a yellow square moves"
    assert row["summary"]["document"] == found.to_dict()
    assert len(store.list_jobs(parent=row["job_id"])) == len(checked)


def test_long_grounding_joins_chunks_into_one_result(runner, store, tmp_path) -> None:
    clip = make_scene_clip(tmp_path / "g.mp4", [], even_times(100, 10.0))
    info = probe(clip.path)
    from chord_core.config import SamplingConfig
    from chord_core.longvideo.ground import ground_run_id

    s = LongVideoSettings(ground_fps=1.0, ground_chunk_frames=4)
    res = ground_long(runner, info, file_hash(clip.path), "the yellow square", s,
                      "test", sampling=SamplingConfig(), max_new_tokens=24)
    assert res.sampling.num_frames == 10 and len(res.raw_outputs) == 10
    assert res.sampling.timestamps_s == tuple(clip.times_s[i]
                                              for i in res.sampling.frame_indices)
    assert {d.frame_index for d in res.detections} <= set(res.sampling.frame_indices)
    assert {d.track_id for d in res.detections} == {t.track_id for t in res.tracks}
    assert res.to_dict()["schema"] == "chord.result/v1" and res.model.test_model
    run = ground_run_id(file_hash(clip.path), "the yellow square", s, "test",
                        SamplingConfig(), 24)
    children = store.list_jobs(parent=run)
    assert len(children) == 3 and {r["state"] for r in children} == {"done"}  # 4 + 4 + 2
    assert [len(r["spec"]["plan"]["frame_indices"]) for r in reversed(children)] == [4, 4, 2]
    assert store.get_job(run)["summary"]["document"] == res.to_dict()


def test_a_cancelled_run_is_one_row_and_goes_on_where_it_stopped(runner, store, tmp_path
                                                                  ) -> None:
    import threading

    from chord_core.errors import JobCancelled

    clip = make_scene_clip(tmp_path / "c.mp4", [], even_times(80, 10.0))  # 4 chunks of 2 s
    info, key = probe(clip.path), file_hash(clip.path)
    s = LongVideoSettings(cuts="fixed", chunk_s=2, min_chunk_s=1, chapter_s=100, **FAST)
    cancel = threading.Event()

    def first_chunk_then_cancel(event) -> None:
        if event.stage == "chunks" and event.done >= 1:
            cancel.set()

    run = ChaptersRun(runner, info, key, s, "test", in_flight=1, cancel=cancel,
                      on_progress=first_chunk_then_cancel)
    with pytest.raises(JobCancelled):
        run()
    parent = store.get_job(run.run)
    assert parent["state"] == "cancelled" and parent["summary"]["plan"]["chunks"]
    done = {r["job_id"]: r["finished_at"] for r in store.list_jobs(parent=run.run)
            if r["state"] == "done"}
    assert 1 <= len(done) < 4
    doc = ChaptersRun(runner, info, key, s, "test", in_flight=1)()
    rows = {r["job_id"]: r for r in store.list_jobs(parent=run.run)}
    assert {k: rows[k]["finished_at"] for k in done} == done  # not run again
    assert len([k for k in rows if "-c" in k]) == 4 and len(doc.chunk_texts) == 4
    assert store.get_job(run.run)["state"] == "done"
    assert sum(r["job_id"] == run.run for r in store.list_jobs(top_level=True, limit=100)) == 1


@pytest.mark.slow
def test_chunks_a_restarted_app_resumes_keep_their_frames(tiny_model_dir, tmp_path) -> None:
    """The app's manager resumes the store's unfinished jobs on start: a chunk job left by
    a run cut short comes back as that chunk (its frames), not as a whole-clip describe,
    and the run started again waits for it instead of queuing it twice."""
    import threading

    from chord_core.errors import JobCancelled

    clip = make_scene_clip(tmp_path / "r.mp4", [], even_times(80, 10.0))  # 4 chunks of 2 s
    info, key = probe(clip.path), file_hash(clip.path)
    s = LongVideoSettings(cuts="fixed", chunk_s=2, min_chunk_s=1, chapter_s=100, **FAST)
    db = Store(tmp_path / "chord.sqlite3")
    # one chunk per model call, all four in flight: three are unfinished at the cancel
    first = in_process_manager(CFG.with_overrides(batch_size=1), store=db)
    cancel = threading.Event()
    run = ChaptersRun(first, info, key, s, "test", in_flight=4, cancel=cancel,
                      on_progress=lambda e: cancel.set() if e.done >= 1 else None)
    with pytest.raises(JobCancelled):
        run()
    first.shutdown()
    left = [r for r in db.list_jobs(parent=run.run) if r["state"] != "done"]
    assert left, "every chunk finished before the cancel"
    for r in left:  # as a crash leaves them: queued, for the next start to resume
        if r["state"] != "queued":
            db.update_state(r["job_id"], "queued")
    second = in_process_manager(CFG, store=db)  # resumes them, with their chunk's frames
    try:
        for r in left:
            st = second.wait(r["job_id"], timeout=300)
            plan = r["spec"]["plan"]
            assert st.state.value == "done"
            assert list(st.result.sampling.frame_indices) == plan["frame_indices"]
        doc = ChaptersRun(second, info, key, s, "test")()
    finally:
        second.shutdown()
    assert len(doc.chunk_texts) == 4
    rows = db.list_jobs(parent=run.run)
    assert len(rows) == len({r["job_id"] for r in rows}) and all(r["state"] == "done"
                                                                   for r in rows)
    assert {r["job_id"]: r["attempts"] for r in rows if r["job_id"] in
            {x["job_id"] for x in left}} == {x["job_id"]: x["attempts"] + 1
                                             for x in left}  # ran once more, not twice
    db.close()


def _done_chunks(db: Path) -> dict[str, float]:
    """Chunk jobs with a stored result → when it was stored (read while the run writes)."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute("SELECT job_id, created_at FROM results WHERE job_id LIKE '%-c%'")
        return {r[0]: r[1] for r in rows}
    except sqlite3.OperationalError:  # tables not made yet
        return {}
    finally:
        conn.close()


def _rows(db: Path) -> list[dict]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(
            "SELECT job_id, parent, state, attempts, spec_json FROM jobs ORDER BY rowid")]
    finally:
        conn.close()


@pytest.mark.slow
def test_a_killed_run_resumes_at_the_chunk_where_it_stopped(tiny_model_dir, tmp_path) -> None:
    clip = make_scene_clip(tmp_path / "k.mp4", [], even_times(80, 10.0))  # 8 s: 4 chunks
    data = tmp_path / "data"
    env = {**os.environ, "CHORD_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "chord_core", "chapters", str(clip.path), "--model", "test",
           "--in-process", "--cuts", "fixed", "--chunk-s", "2", "--chapter-s", "100",
           "--frames-per-chunk", "4", "--max-new-tokens", "128", "--batch-size", "1",
           "--json", str(tmp_path / "ch.json"), "--vtt", str(tmp_path / "ch.vtt")]
    db = data / "chord.sqlite3"
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not _done_chunks(db) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    before = _done_chunks(db)
    assert 1 <= len(before) < 4, first.stderr.read().decode()[-2000:]
    assert not (tmp_path / "ch.json").exists()

    second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    after = _done_chunks(db)
    assert len(after) == 4
    assert {k: after[k] for k in before} == before  # chunks done before the kill: untouched
    assert f"chunks {len(before)}/4 (resumed)" in second.stderr
    doc = json.loads((tmp_path / "ch.json").read_text())
    assert [c["start_s"] for c in doc["chunks"]] == [0.0, 2.0, 4.0, 6.0]
    assert doc["chapters"][0]["start_s"] == 0.0 and len(doc["chunk_texts"]) == 4
    assert (tmp_path / "ch.vtt").read_text().startswith("WEBVTT")
    # one parent row (what History lists) and each chunk once, under it
    rows = _rows(db)
    parents = [r for r in rows if r["parent"] is None]
    assert [p["job_id"] for p in parents] == [doc["run_id"]] and parents[0]["state"] == "done"
    children = [r for r in rows if r["parent"] == doc["run_id"]]
    assert len(children) == len(rows) - 1 == len({r["job_id"] for r in children})
    chunks = [r for r in children if r["job_id"] in after]
    assert {r["job_id"]: r["attempts"] for r in chunks if r["job_id"] in before} == \
        {k: 1 for k in before}  # not run again
    frames = [json.loads(r["spec_json"])["plan"]["frame_indices"] for r in chunks]
    for f, c in zip(frames, doc["chunks"]):  # each chunk's own frames kept with its job
        assert max(c["read_from"], 0) <= f[0] and f[-1] < c["end_frame"], (f, c)
