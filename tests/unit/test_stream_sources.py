"""Live sources: what is a stream, the checks on an address, and the masking of the
credentials in every form they can take (the URL, FFmpeg's messages, a decoded password);
the segment retention by age and by size."""

from __future__ import annotations

import os
import time

import pytest

from chord_core.errors import InputError
from chord_core.streams.segments import prune
from chord_core.streams.sources import is_stream, mask_text, mask_url, parse_source

URL = "rtsp://admin:p%40ss-w0rd@cam.local:554/Streaming/101"


def test_which_texts_are_streams():
    assert is_stream(URL) and is_stream("rtsps://cam/x") and is_stream("/dev/video0")
    assert is_stream("https://cdn.example/live/index.m3u8?token=1")
    assert not is_stream("https://example.com/clip.mp4")
    assert not is_stream("/media/cams") and not is_stream("rtmp://x/y")


def test_the_credentials_are_masked_in_the_url_and_in_messages():
    source = parse_source(URL)
    assert source.shown == "rtsp://***@cam.local:554/Streaming/101"
    assert "p%40ss" not in repr(source) and "admin" not in str(source)
    message = f"Server returned 401 Unauthorized: '{URL}' (password p@ss-w0rd)"
    masked = mask_text(message, URL)
    assert "p%40ss-w0rd" not in masked and "p@ss-w0rd" not in masked and "admin" not in masked
    assert "rtsp://***@cam.local:554" in masked
    assert mask_url("rtsp://cam.local/x") == "rtsp://cam.local/x"
    # the same camera opened with another password is the same stream
    assert parse_source(URL.replace("w0rd", "other")).stream_id == source.stream_id


@pytest.mark.parametrize("text, says", [
    ("ftp://cam/x", "not a stream"), ("https://example.com/clip.mp4", "not an HLS"),
    ("rtsp://cam.local:port/x", "port"), ("/dev/video97", "no capture device"),
    ("rtsp://" + "a" * 3000, "2,048")])
def test_a_bad_address_says_what_is_wrong(text, says):
    with pytest.raises(InputError) as err:
        parse_source(text)
    assert says in err.value.message and err.value.hint


def test_a_bad_address_error_never_shows_its_password():
    with pytest.raises(InputError) as err:
        parse_source("ftp://user:hunter22@cam/x")
    assert "hunter22" not in str(err.value)


def test_retention_by_age_then_by_size_keeps_the_newest(tmp_path):
    now = time.time()
    for i in range(6):
        p = tmp_path / f"live-x-20260101-00000{i}-00000{i}.mp4"
        p.write_bytes(b"x" * 1000)
        os.utime(p, (now - 1000 + i * 100, now - 1000 + i * 100))
    gone = prune(tmp_path, max_age_s=650, max_bytes=None, now=now)
    assert [p[-5] for p in gone] == ["0", "1", "2", "3"][:len(gone)] and len(gone) == 4
    gone = prune(tmp_path, max_age_s=None, max_bytes=1000, now=now)
    assert len(gone) == 1 and len(list(tmp_path.iterdir())) == 1  # the newest stays


def test_a_clock_that_restarts_cuts_the_segment_and_is_counted(tmp_path):
    """The ingest's packet loop on a real file whose clock restarts (two MPEG-TS recordings
    joined: 0–1.9 s, then 0.5–2.4 s again): the segment open at the restart is cut, the jump
    is counted, and both segments play with times that only go forward."""
    import av

    from chord_core.streams.ingest import Ingest, IngestSettings
    from chord_core.streams.segments import SegmentWriter
    from chord_core.testing.odd_files import make_restarting_ts

    clip = make_restarting_ts(tmp_path / "restart.ts", [i / 10 for i in range(20)],
                              [0.5 + i / 10 for i in range(20)])
    segments = []
    source = parse_source("rtsp://cam:pw-secret@127.0.0.1:9/cam0")  # never connected
    writer = SegmentWriter(tmp_path / "segs", source.stream_id, 60.0, segments.append)
    ingest = Ingest(source, writer, IngestSettings(stall_s=60, read_timeout_s=60))
    with av.open(str(clip)) as box:
        assert ingest._pump(box)  # noqa: SLF001 — the loop itself, on a local file
    writer.close("stop")
    assert ingest.snapshot().clock_jumps == 1
    assert [s.cut for s in segments] == ["clock", "stop"]
    for seg in segments:
        with av.open(seg.path) as box:
            times = [f.time for f in box.decode(video=0)]
        # starts at 0 but for the B-frames' reorder delay (this clip's encoder uses them: the
        # first picture shows after its decode time; pts keep their offset from dts)
        assert len(times) == seg.frames and times == sorted(times) and 0.0 <= times[0] <= 0.25
        assert seg.duration_s == pytest.approx(2.0, abs=0.15)
