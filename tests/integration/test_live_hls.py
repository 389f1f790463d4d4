"""A live HLS playlist (``http://…/live.m3u8``), the other stream kind a user points ``watch``
at: Chord's test HLS server (``chord_core/testing/hls.py``: PyAV remuxing real footage into
one-second segments in real time, served over HTTP on 127.0.0.1) is ingested through the
runtime like an RTSP camera, recorded into playable segments, and its chunks are analysed
into alerts that point at a segment and a second in it. No GStreamer is needed, so this is
also the path the GPU run of ``benchmarks/live_streams.py --source hls`` takes."""

from __future__ import annotations

import time

import pytest

from chord_core.testing import rtsp
from chord_core.testing.hls import HlsServer

pytestmark = pytest.mark.slow


def test_an_hls_stream_is_recorded_and_alerts_on_its_segments(tmp_path) -> None:
    import av

    from chord_core.config import ModelConfig
    from chord_core.library.alerts import latest_alerts
    from chord_core.runtime.cluster import in_process_manager
    from chord_core.runtime.store import Store
    from chord_core.streams.hub import StreamHub, StreamSettings
    from chord_core.streams.ingest import IngestSettings

    clip = rtsp.make_clip(tmp_path / "street.mp4", seconds=6, loop_s=60)
    store = Store(tmp_path / "data" / "chord.sqlite3")
    manager = in_process_manager(ModelConfig(model="test", device="cpu"), store=store)
    manager.wait_ready(180)
    hub = StreamHub(manager, store, tmp_path / "data")
    try:
        with HlsServer(clip) as server:
            settings = StreamSettings(chunk_s=3.0, describe=False,
                                      statements=("a person crosses",), threshold=0.0,
                                      model="test", max_new_tokens=4, fps=1.0,
                                      ingest=IngestSettings(open_timeout_s=5.0,
                                                            read_timeout_s=5.0, stall_s=6.0))
            sid = hub.start(server.url(0), settings)["id"]
            deadline = time.monotonic() + 60
            while len(hub.table.chunks(sid)) < 2:
                assert time.monotonic() < deadline, hub.health()
                time.sleep(0.2)
            health = hub.health()
            assert health[0]["state"] == "live", health
            assert health[0]["url"].startswith("http://127.0.0.1:")
            hub.stop(sid)
        assert hub.wait_idle(120)
        chunks = {c["path"]: c for c in hub.table.chunks(sid, limit=100)}
        assert len(chunks) >= 2 and all(c["state"] == "done" for c in chunks.values())
        run = hub.describe(sid)  # each chunk's jobs are children of the stream run's row
        job_ids = [j for c in chunks.values() for j in c["jobs"]["entail"].values()]
        parents = {store.get_job(j)["parent"] for j in job_ids}
        assert len(parents) == 1 and parents.pop().startswith(f"{sid}-r"), run
        alerts = [a for a in latest_alerts(hub.index) if a["path"] in chunks]
        assert {a["path"] for a in alerts} == set(chunks), alerts
        for alert in alerts:  # each points at a playable segment and a second inside it
            with av.open(alert["path"]) as box:
                times = [f.time for f in box.decode(video=0)]
            assert times and times == sorted(times)
            assert 0.0 <= alert["start_s"] <= times[-1] + 1e-6
            assert alert["created_at"] >= chunks[alert["path"]]["start_wall"]
    finally:
        hub.shutdown()
        manager.shutdown()
        store.close()


def test_the_hls_server_serves_a_sliding_live_playlist(tmp_path) -> None:
    """The playlist is live (no end mark) and slides: old segments leave it as new ones come,
    in real time (about one a second)."""
    import httpx

    clip = rtsp.make_clip(tmp_path / "street.mp4", seconds=4, loop_s=40)
    with HlsServer(clip, mounts=2) as server:
        first = httpx.get(server.url(1), timeout=5).text
        time.sleep(3.5)
        later = httpx.get(server.url(1), timeout=5).text
    assert first.startswith("#EXTM3U") and "#EXT-X-ENDLIST" not in later
    def segments(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.endswith(".ts")]
    assert segments(later) and segments(later)[-1] != segments(first)[-1]
    assert len(segments(later)) - len(segments(first)) <= 5  # paced, not dumped at once
