"""Start the real RTSP test server (``rtsp_server.py``, GStreamer through the system Python)
from the venv, and make the clip it serves.

The clip is real footage when Debian's ``opencv-doc`` is installed (OpenCV's ``vtest.avi``:
a fixed camera over a street, 768×576 at 10 fps, 79.5 s); without it, Chord's synthetic
scene clip. Either is encoded once to H.264 (no B-frames, a keyframe every second) and its
packets are repeated with shifted times, so the file is a loop of ``loop_s`` seconds that the
server sends in real time. ``corrupt=True`` flips bytes inside every 7th frame's slice data
(the stream's packets are damaged, the container is not).

    with RtspServer(clip, mounts=2, user="cam", password="s3cret") as server:
        url = server.url(0)            # rtsp://cam:s3cret@127.0.0.1:PORT/cam0
        server.restart()               # the same port, a new process (a restart mid-stream)

``missing()`` says why the server cannot run here (None when it can): the tests skip with it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)

SYSTEM_PYTHON = "/usr/bin/python3"
SCRIPT = Path(__file__).with_name("rtsp_server.py")
VTEST = Path("/usr/share/doc/opencv-doc/examples/data/vtest.avi")
PACKAGES = ("gir1.2-gst-rtsp-server-1.0", "python3-gi", "gstreamer1.0-plugins-good",
            "gstreamer1.0-plugins-bad", "gstreamer1.0-plugins-base")
_CHECK = ("import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', "
          "'1.0'); from gi.repository import Gst, GstRtspServer; Gst.init(None); "
          "assert all(Gst.ElementFactory.find(n) for n in ('qtdemux', 'h264parse', "
          "'rtph264pay'))")
_missing: list[str | None] = []


def missing() -> str | None:
    """Why the RTSP test server cannot run on this machine, or None (checked once)."""
    if not _missing:
        reason = None
        if not os.path.exists(SYSTEM_PYTHON):
            reason = f"no {SYSTEM_PYTHON}"
        else:
            done = subprocess.run([SYSTEM_PYTHON, "-c", _CHECK], capture_output=True,
                                  text=True, timeout=60, check=False)
            if done.returncode != 0:
                reason = ("GStreamer's RTSP server is not installed for the system Python "
                          f"(apt-get install {' '.join(PACKAGES)}; .ci/run does)")
        _missing.append(reason)
    return _missing[0]


def _source_frames(size_wh: tuple[int, int], seconds: float, fps: int) -> Iterator[Any]:
    """RGB frames at ``size_wh``: vtest.avi's (real footage) or the synthetic scene's."""
    import av

    count = int(seconds * fps)
    if VTEST.exists():
        with av.open(str(VTEST)) as box:
            for i, frame in enumerate(box.decode(video=0)):
                if i >= count:
                    return
                yield frame.reformat(width=size_wh[0], height=size_wh[1],
                                     format="rgb24").to_ndarray()
        return
    from chord_core.testing.scenes import scene_frame  # the synthetic scenes

    for i in range(count):
        yield scene_frame(i, count, (i * 4) // max(1, count), size_wh)


def make_clip(out: str | Path, *, size_wh: tuple[int, int] = (384, 288), fps: int = 10,
              seconds: float = 20.0, loop_s: float = 900.0, corrupt: bool = False) -> Path:
    """An H.264 MP4 the server can send for ``loop_s`` seconds (see the module docstring)."""
    import av

    out = Path(out)
    once = out.with_suffix(".once.mp4")
    with av.open(str(once), "w") as box:
        stream = box.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size_wh[0], size_wh[1], "yuv420p"
        stream.options = {"preset": "ultrafast", "tune": "zerolatency", "bf": "0",
                          "g": str(fps), "keyint_min": str(fps), "sc_threshold": "0"}
        for rgb in _source_frames(size_wh, seconds, fps):
            box.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        box.mux(stream.encode(None))
    _repeat(once, out, loop_s, corrupt)
    once.unlink()
    return out


def _repeat(once: Path, out: Path, loop_s: float, corrupt: bool) -> None:
    import av

    with av.open(str(once)) as src:
        vin = src.streams.video[0]
        packets = [(p.pts, p.dts, bytes(p), p.is_keyframe) for p in src.demux(vin)
                   if p.size and p.pts is not None]
        base = vin.time_base
        if base is None or not packets:
            raise RuntimeError(f"{once} has no timed video packets")
        step = packets[1][0] - packets[0][0] if len(packets) > 1 else 1
        span = packets[-1][0] - packets[0][0] + step
        loops = max(1, int(loop_s / float(span * base)) + 1)
        with av.open(str(out), "w") as box:
            vout = box.add_stream_from_template(vin)
            vout.time_base = base
            n = 0
            for k in range(loops):
                for pts, dts, data, key in packets:
                    n += 1
                    if corrupt and not key and n % 7 == 0:
                        data = _damage(data)
                    pkt = av.Packet(data)
                    pkt.pts, pkt.dts = pts + k * span, (dts if dts is not None else pts) + k * span
                    pkt.time_base, pkt.stream, pkt.is_keyframe = base, vout, key
                    box.mux(pkt)


def _damage(data: bytes) -> bytes:
    """Flip bytes in a frame's slice data, past its first NAL's header."""
    buf = bytearray(data)
    for i in range(min(len(buf), 24), len(buf), 9):
        buf[i] ^= 0x5A
    return bytes(buf)


class RtspServer:
    """The test server as a child process (see the module docstring)."""

    def __init__(self, clip: str | Path, *, mounts: int = 1, user: str = "", password: str = "",
                 mode: str = "normal", after_s: float = 3.0, port: int = 0) -> None:
        self.clip, self.mounts, self.user, self.password = str(clip), mounts, user, password
        self.mode, self.after_s, self.port = mode, after_s, port
        self.proc: subprocess.Popen[str] | None = None
        self.restarts = 0

    def start(self) -> RtspServer:
        reason = missing()
        if reason:
            raise RuntimeError(reason)
        cmd = [SYSTEM_PYTHON, str(SCRIPT), "--clip", self.clip, "--port", str(self.port),
               "--mounts", str(self.mounts), "--mode", self.mode, "--after", str(self.after_s)]
        if self.user:
            cmd += ["--user", self.user, "--password", self.password]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        line = _read_line(self.proc, 30.0)
        self.port = int(json.loads(line)["port"])
        threading.Thread(target=_drain, args=(self.proc,), daemon=True).start()
        return self

    def url(self, mount: int = 0, *, user: str | None = None,
            password: str | None = None) -> str:
        user = self.user if user is None else user
        password = self.password if password is None else password
        cred = f"{user}:{password}@" if user else ""
        return f"rtsp://{cred}127.0.0.1:{self.port}/cam{mount}"

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the server and start it again on the same port after ``down_s`` seconds."""
        self.stop()
        time.sleep(down_s)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.start()
                break
            except (RuntimeError, ValueError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.restarts += 1

    def __enter__(self) -> RtspServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline() if proc.stdout
                                                        else ""), daemon=True)
    reader.start()
    reader.join(timeout)
    if not got or not got[0].strip():
        err = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
        proc.kill()
        raise RuntimeError(f"the RTSP test server did not start: {err.strip()[-400:]}")
    return got[0]


def _drain(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stderr,):
        for line in stream or ():
            log.debug("rtsp server: %s", line.rstrip())


__all__ = ["RtspServer", "make_clip", "missing"]


def main(argv: list[str] | None = None) -> int:
    """``python -m chord_core.testing.rtsp URLFILE``: make the clip, start the server (a
    user and a fresh password), write the stream's URL to URLFILE, serve until SIGTERM."""
    import argparse
    import secrets
    import signal
    import sys
    import tempfile

    p = argparse.ArgumentParser(prog="python -m chord_core.testing.rtsp",
                                description="a real RTSP test server on 127.0.0.1")
    p.add_argument("urlfile", help="where the stream's rtsp:// URL is written")
    p.add_argument("--mounts", type=int, default=1)
    p.add_argument("--size", default="384x288", help="WIDTHxHEIGHT of the clip")
    p.add_argument("--fps", type=int, default=10)
    args = p.parse_args(argv)
    reason = missing()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    w, h = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="chord-rtsp-") as tmp:
        clip = make_clip(Path(tmp) / "street.mp4", size_wh=(w, h), fps=args.fps)
        with RtspServer(clip, mounts=args.mounts, user="cam",
                        password=secrets.token_urlsafe(9)) as server:
            Path(args.urlfile).write_text("\n".join(server.url(i) for i in range(args.mounts))
                                          + "\n")
            done = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: done.set())
            signal.signal(signal.SIGINT, lambda *_: done.set())
            while not done.wait(1.0):
                if server.proc is None or server.proc.poll() is not None:
                    print("error: the RTSP server stopped", file=sys.stderr)
                    return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
