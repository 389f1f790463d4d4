"""The Live page (AppTest, the app's shared job manager) against a real RTSP server on
127.0.0.1 with a user and password: a stream started from the form shows its state and its
masked address, its chunks are analysed by the app's worker and alert (threshold 0: the tiny
model's answers are meaningless), an alert plays its segment from its moment, Stop keeps
the chunks — and the password appears nowhere on the page."""

from __future__ import annotations

import pytest

from chord_core.testing import rtsp

pytestmark = pytest.mark.slow
LIVE_PAGE = "views/live.py"
PASSWORD = "page-s3cret-pw"


def _texts(at) -> list[str]:  # noqa: ANN001
    out = [m.value for m in at.markdown] + [c.value for c in at.caption]
    out += [e.value for e in at.error] + [s.value for s in at.success] + [i.value for i in at.info]
    return [str(x) for x in out]


def test_a_stream_from_the_live_page_runs_alerts_plays_and_stops(new_app, poll, tmp_path):
    if rtsp.missing():
        pytest.skip(rtsp.missing() or "")
    clip = rtsp.make_clip(tmp_path / "street.mp4", seconds=8, loop_s=120)
    with rtsp.RtspServer(clip, user="cam", password=PASSWORD) as server:
        at = new_app()
        at.run()
        at = at.switch_page(LIVE_PAGE).run()
        assert not at.exception, at.exception
        at.text_input(key="live_url").input(server.url(0))
        at.number_input(key="live_chunk").set_value(2.0)
        at.number_input(key="live_threshold").set_value(0.0)
        at.text_area(key="live_checks").input("a person crosses the street")
        at.checkbox(key="live_describe").uncheck()  # the alerts are what this test reads
        at = at.button[0].click().run()
        assert not at.exception, at.exception
        at = poll(at, lambda a: any("🔔" in t for t in _texts(a)), timeout=120)
        texts = _texts(at)
        assert any("rtsp://***@127.0.0.1" in t for t in texts), texts
        assert not any(PASSWORD in t for t in texts)
        play = [b for b in at.button if b.label == "Play here"]
        assert play
        at = play[0].click().run()
        assert at.get("video"), "the alert's segment is not played"
        stop = [b for b in at.button if b.label == "Stop"]
        at = stop[0].click().run()
        at = poll(at, lambda a: any("**stopped**" in t for t in _texts(a)), timeout=30)
        assert any("🔔" in t for t in _texts(at))  # the results stay after the stop
        assert not any(PASSWORD in t for t in _texts(at))
