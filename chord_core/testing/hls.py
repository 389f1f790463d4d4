"""A live HLS test server on 127.0.0.1, made of PyAV and the standard library alone: each
mount remuxes a clip (``rtsp.make_clip``'s H.264 loop) into a sliding HLS playlist of
one-second MPEG-TS segments in real time, and a threaded HTTP server serves the folder.

It stands beside the RTSP test server (``rtsp.py``, GStreamer through the system Python)
where GStreamer cannot be had: the GPU hosts install nothing from a registry, and PyAV's
wheel is carried there anyway, so the live-stream benchmark's GPU run reads HLS. It is a
real server and a real stream, read by Chord's ingest over HTTP like a camera's playlist.

    with HlsServer(clip, mounts=2) as server:
        url = server.url(0)            # http://127.0.0.1:PORT/cam0/live.m3u8
"""

from __future__ import annotations

import functools
import http.server
import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SEGMENT_S = 1.0
LIST_SIZE = 8  # segments in the playlist (older ones are deleted)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — the base's name
        log.debug("hls server: " + format, *args)


class HlsServer:
    """See the module docstring. ``start`` returns once every mount's playlist exists."""

    def __init__(self, clip: str | Path, *, mounts: int = 1, folder: str | Path | None = None
                 ) -> None:
        self.clip, self.mounts = Path(clip), mounts
        self._own = folder is None
        self.folder = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="chord-hls-"))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._http: http.server.ThreadingHTTPServer | None = None
        self.errors: list[str] = []

    def start(self) -> HlsServer:
        handler = functools.partial(_Quiet, directory=str(self.folder))
        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, name="chord-hls-http",
                         daemon=True).start()
        for i in range(self.mounts):
            (self.folder / f"cam{i}").mkdir(parents=True, exist_ok=True)
            t = threading.Thread(target=self._send, args=(i,), name=f"chord-hls-{i}",
                                 daemon=True)
            t.start()
            self._threads.append(t)
        deadline = time.monotonic() + 30
        for i in range(self.mounts):
            while not (self.folder / f"cam{i}" / "live.m3u8").exists():
                if self.errors or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the HLS test server did not start: {self.errors}")
                time.sleep(0.05)
        return self

    @property
    def port(self) -> int:
        assert self._http is not None, "start() first"
        return int(self._http.server_address[1])

    def url(self, mount: int = 0) -> str:
        return f"http://127.0.0.1:{self.port}/cam{mount}/live.m3u8"

    def _send(self, mount: int) -> None:
        """Remux the clip's packets into the mount's playlist, each at its presentation
        time from the start (real time), until stopped or the clip ends."""
        import av

        out_dir = self.folder / f"cam{mount}"
        try:
            with av.open(str(self.clip)) as src:
                vin = src.streams.video[0]
                base = float(vin.time_base or 0) or 1 / 90000
                out = av.open(str(out_dir / "live.m3u8"), "w", format="hls", options={
                    "hls_time": str(SEGMENT_S), "hls_list_size": str(LIST_SIZE),
                    "hls_flags": "delete_segments",
                    "hls_segment_filename": str(out_dir / "seg%06d.ts")})
                try:
                    vout = out.add_stream_from_template(vin)
                    t0, first = time.monotonic(), None
                    for packet in src.demux(vin):
                        if packet.size == 0 or packet.pts is None:
                            continue
                        first = packet.pts if first is None else first
                        ahead = (packet.pts - first) * base - (time.monotonic() - t0)
                        if ahead > 0 and self._stop.wait(ahead):
                            return
                        packet.stream = vout
                        out.mux(packet)
                finally:
                    out.close()
        except Exception as exc:  # noqa: BLE001 — a test server says why it stopped
            self.errors.append(f"mount {mount}: {type(exc).__name__}: {exc}")
            log.warning("hls test server, mount %d stopped: %s", mount, exc)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._own:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> HlsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
