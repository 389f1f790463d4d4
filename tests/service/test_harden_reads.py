"""Issue 40, high: every read of a clip the store names goes through the confined open. A
job's clip, replaced after the job by a symlink to a file outside the media roots, gets no
thumbnail from the real service (it pictured the outside file), and the cache stays bounded
(it had no bound: 300 files in 5 s)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from chord_core.testing.videos import make_video


def _done(c: httpx.Client, job_id: str) -> None:
    deadline = time.monotonic() + 120
    while c.get(f"/v1/jobs/{job_id}").json()["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_a_clip_swapped_for_a_link_outside_the_roots_gets_no_thumbnail(server, tmp_path):
    clip = make_video(server.media / "swap-thumb.mp4", duration_s=1.0, fps=10.0,
                      size_wh=(160, 120)).path
    (tmp_path / "outside").mkdir()
    secret = make_video(tmp_path / "outside" / "secret.mp4", duration_s=1.0, fps=10.0,
                        size_wh=(320, 240)).path
    with httpx.Client(base_url=server.url, timeout=60) as c:
        job_id = c.post("/v1/jobs", json={"task": "describe", "video_path": str(clip),
                                          "max_new_tokens": 4}).json()["job_id"]
        _done(c, job_id)
        assert c.get("/v1/search", params={"q": "swap"}).status_code == 200  # indexed
        params = {"source": job_id, "t": 0.5}
        before = c.get("/v1/library/thumbnail", params=params)
        assert before.status_code == 200 and before.content[:2] == b"\xff\xd8"
        Path(clip).unlink()
        Path(clip).symlink_to(secret)
        for t in (0.5, 0.7):  # the cached picture and a new moment: both refused
            after = c.get("/v1/library/thumbnail", params={"source": job_id, "t": t})
            assert after.status_code == 422, after.text
            body = after.json()
            assert "media roots" in body["error"] and body.get("hint")
            assert b"\xff\xd8" not in after.content and "Traceback" not in after.text


def _describe(c: httpx.Client, clip: Path) -> str:
    job_id = c.post("/v1/jobs", json={"task": "describe", "video_path": str(clip),
                                      "max_new_tokens": 4}).json()["job_id"]
    _done(c, job_id)
    return job_id


def test_the_services_thumbnail_cache_stays_within_its_bound(server):
    """The real service's cache, filled to its bound (MAX_CACHED files, the planted ones the
    oldest): each new thumbnail it makes pushes out the oldest file, never past the bound."""
    from chord_core.library.thumbs import MAX_CACHED

    clip = make_video(server.media / "bound-thumb.mp4", duration_s=2.0, fps=10.0,
                      size_wh=(96, 72)).path
    cache = server.data / "thumbs"
    cache.mkdir(mode=0o700, exist_ok=True)
    had = {f.name for f in cache.iterdir()}
    planted = [cache / f"planted-{k:05d}.jpg" for k in range(MAX_CACHED - len(had))]
    for k, f in enumerate(planted):
        f.write_bytes(b"\xff\xd8")
        os.utime(f, (1_000_000_000 + k, 1_000_000_000 + k))  # older than any real one
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            job_id = _describe(c, clip)
            assert c.get("/v1/search", params={"q": "bound"}).status_code == 200  # indexed
            for k in range(6):  # six new moments: six new files
                r = c.get("/v1/library/thumbnail", params={"source": job_id, "t": 0.1 + 0.3 * k})
                assert r.status_code == 200 and r.content[:2] == b"\xff\xd8", r.text
        now = {f.name for f in cache.iterdir()}
        assert len(now) == MAX_CACHED
        assert len(now - had - {f.name for f in planted}) == 6  # the new ones are kept
        assert not any(f.exists() for f in planted[:6]) and all(f.exists() for f in planted[6:])
    finally:
        for f in planted:
            f.unlink(missing_ok=True)


def test_the_thumbnail_cache_keeps_at_most_its_bound(tmp_path):
    from chord_core.library.thumbs import thumbnail

    root = tmp_path / "media"
    root.mkdir()
    clip = make_video(root / "c.mp4", duration_s=2.0, fps=10.0, size_wh=(64, 48)).path
    cache = tmp_path / "thumbs"
    import chord_core.library.thumbs as thumbs

    old, thumbs.MAX_CACHED = thumbs.MAX_CACHED, 5
    try:
        for k in range(12):
            assert thumbnail(clip, k * 0.1, cache, 64, roots=[str(root.resolve())])[:2] == \
                b"\xff\xd8"
    finally:
        thumbs.MAX_CACHED = old
    assert len(list(cache.iterdir())) == 5
    assert (cache.stat().st_mode & 0o777) == 0o700
