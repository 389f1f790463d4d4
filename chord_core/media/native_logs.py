"""Keep FFmpeg's and OpenCV's own log lines off the terminal unless asked for.

Both libraries print straight to stderr from C (``[mov,mp4,…] moov atom not found``,
``[ WARN:0@…] global cap.cpp …``), ahead of the CLI's one ``error:`` line and one ``hint:``
line. :func:`quiet_native_logs` silences them by default; with ``verbose`` PyAV's FFmpeg
messages go to Python logging (logger ``libav``, shown by ``-v``) and OpenCV keeps its own
defaults. OpenCV reads ``OPENCV_FFMPEG_LOGLEVEL`` when it first opens a file, so this must run
before the first capture; values already in the environment are respected.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["quiet_native_logs"]

log = logging.getLogger(__name__)

AV_LOG_QUIET = -8  # FFmpeg's "print nothing" level


def quiet_native_logs(verbose: bool = False) -> None:
    """Silence (or, with ``verbose``, route to logging) the native libraries' messages."""
    if not verbose:
        os.environ.setdefault("OPENCV_LOG_LEVEL", "SILENT")
        os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", str(AV_LOG_QUIET))
        cv2 = sys.modules.get("cv2")
        if cv2 is not None and hasattr(cv2, "setLogLevel"):
            cv2.setLogLevel(0)  # already imported: the environment is read too late
    try:
        import av.logging
    except ImportError:
        return
    av.logging.set_level(av.logging.WARNING if verbose else None)
