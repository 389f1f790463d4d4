"""A real RTSP server for tests and benchmarks: GStreamer's ``GstRtspServer`` on 127.0.0.1.

Run by the *system* Python (``/usr/bin/python3``: PyGObject and GStreamer come from Debian's
packages ``python3-gi``, ``gir1.2-gst-rtsp-server-1.0``, ``gstreamer1.0-plugins-good``/
``-bad``/``-base``; they are not in the venv). It imports nothing from chord_core, so the
venv side starts it as a script (``chord_core/testing/rtsp.py``).

It serves an H.264 MP4 (already encoded: the server parses and packetises, no encoder runs here) at ``/cam0`` … ``/cam{N-1}``, each client its own pipeline
(``qtdemux ! h264parse ! rtph264pay``), paced in real time by the RTSP server's sinks. The
clip given is already a loop (its packets repeated with shifted times, made by rtsp.py), so
a stream runs for as long as a test wants it to. Corrupt packets are the clip's too:
rtsp.py flips bytes inside some frames' slice data, and the server sends them as they are.

Failure modes (``--mode``), for the ingest's fault tests:

    normal        serve
    stall         the first session of each mount stops sending media after ``--after`` s
                  for ``--hold`` s (the TCP session stays open: only frames stop); later sessions
                  are normal
    never-answer  a TCP listener that accepts and never says a word (no RTSP at all)

A restart mid-stream is the launcher's: it stops this process and starts it again on the
same port. ``--user``/``--password`` switch on basic authentication. On start it prints one
JSON line, ``{"port": P, "mounts": [...]}``, and then serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time


def _never_answer(host: str, port: int) -> None:
    listener = socket.create_server((host, port), reuse_port=False)
    port = listener.getsockname()[1]
    print(json.dumps({"port": port, "mounts": []}), flush=True)
    held = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        conn, _ = listener.accept()
        held.append(conn)  # read nothing back, answer nothing
        del held[:-64]


def _stall_probe(after_s: float, hold_s: float, Gst: object) -> object:
    """A media-configure callback: once ``after_s`` seconds have passed, the first session's
    payloader holds its streaming thread for ``hold_s`` (the session and its TCP
    connection stay open, RTCP goes on; frames stop). (Dropping the buffers instead made
    FFmpeg end the session at once: not a stall.)"""
    sessions = {"n": 0}

    def configure(_factory, media):  # noqa: ANN001 — GStreamer's callback shape
        first = sessions["n"] == 0
        sessions["n"] += 1
        if not first:
            return
        t0 = time.monotonic()

        def probe(_pad, _info):  # noqa: ANN001
            if time.monotonic() - t0 >= after_s and not held:
                held.append(True)
                # the streaming thread holds: no frame leaves. (A teardown meanwhile waits
                # for it: the server answers again once the hold is over.)
                time.sleep(hold_s)
            return Gst.PadProbeReturn.OK

        held: list[bool] = []

        pay = media.get_element().get_by_name("pay0")
        pay.get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER | Gst.PadProbeType.BUFFER_LIST, probe)

    return configure


def serve(args: argparse.Namespace) -> None:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address(args.host)
    server.set_service(str(args.port))
    if args.user:
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string("media.factory.role", args.user)
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(args.user, args.password), token)
        server.set_auth(auth)
    mounts = server.get_mount_points()
    names = []
    launch = (f"( filesrc location={json.dumps(args.clip)} ! qtdemux ! h264parse "
              "config-interval=-1 ! rtph264pay name=pay0 pt=96 config-interval=-1 )")
    for i in range(args.mounts):
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(launch)
        factory.set_shared(False)
        if args.user:
            perms = GstRtspServer.RTSPPermissions()
            perms.add_permission_for_role(args.user, "media.factory.access", True)
            perms.add_permission_for_role(args.user, "media.factory.construct", True)
            factory.set_permissions(perms)
        if args.mode == "stall":
            factory.connect("media-configure", _stall_probe(args.after, args.hold, Gst))
        name = f"/cam{i}"
        mounts.add_factory(name, factory)
        names.append(name)
    if server.attach(None) == 0:
        raise SystemExit(f"could not listen on {args.host}:{args.port}")
    print(json.dumps({"port": server.get_bound_port(), "mounts": names}), flush=True)
    loop = GLib.MainLoop()
    signal.signal(signal.SIGTERM, lambda *_: loop.quit())
    threading.Thread(target=_parent_watch, args=(loop,), daemon=True).start()
    loop.run()


def _parent_watch(loop) -> None:  # noqa: ANN001
    """End with the process that started this one (stdin closes when it goes)."""
    sys.stdin.read()
    loop.quit()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clip", required=False, default="")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--mounts", type=int, default=1)
    p.add_argument("--user", default="")
    p.add_argument("--password", default="")
    p.add_argument("--mode", default="normal",
                   choices=("normal", "stall", "never-answer"))
    p.add_argument("--after", type=float, default=3.0, help="stall: seconds before it stalls")
    p.add_argument("--hold", type=float, default=6.0, help="stall: how long it stalls")
    args = p.parse_args()
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        raise SystemExit("the test server binds loopback only")
    if args.mode == "never-answer":
        _never_answer(args.host, args.port)
    else:
        serve(args)


if __name__ == "__main__":
    main()
