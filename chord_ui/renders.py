"""Annotated-MP4 renders in background threads, one per output file, shared by the server.

``start`` is idempotent: while a render of a file runs, asking again returns that render
(a second click, a second tab or a rerun never throws it away and starts over). The page
polls ``get`` for progress. A render writes a ``.part.mp4`` file and moves it in place when
complete, so a finished file is always whole.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chord_core.errors import ChordError

log = logging.getLogger(__name__)


@dataclass
class Render:
    """One render's state (read under the manager's lock through ``snapshot``)."""

    out: Path
    done: int = 0
    total: int = 0
    state: str = "running"  # running | done | failed
    error: dict[str, str] | None = None
    thread: threading.Thread | None = field(default=None, repr=False)

    def snapshot(self) -> dict[str, Any]:
        return {"state": self.state, "done": self.done, "total": self.total,
                "error": self.error, "out": str(self.out)}


class RenderManager:
    """Thread-safe registry of renders by output path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._renders: dict[str, Render] = {}
        self.started = 0  # renders begun by this server (tests read it through the log too)

    def get(self, out: Path) -> dict[str, Any] | None:
        with self._lock:
            r = self._renders.get(str(out))
            return None if r is None else r.snapshot()

    def start(self, video_path: str, result: Any, out: Path) -> bool:
        """Begin rendering ``result``'s boxes on ``video_path`` into ``out`` unless a render
        of ``out`` is already running. True when this call started one."""
        with self._lock:
            current = self._renders.get(str(out))
            if current is not None and current.state == "running":
                log.info("annotated render of %s already running; not restarted", out.name)
                return False
            render = Render(out)
            self._renders[str(out)] = render
            self.started += 1
        render.thread = threading.Thread(target=self._run, args=(render, video_path, result),
                                         name=f"render-{out.stem}", daemon=True)
        log.info("annotated render started: %s", out.name)
        render.thread.start()
        return True

    def _progress(self, render: Render, done: int, total: int) -> None:
        with self._lock:
            render.done, render.total = done, total

    def _run(self, render: Render, video_path: str, result: Any) -> None:
        from chord_core.analysis.render import export_annotated_video
        from chord_ui.uploads import private_dir

        out = render.out
        tmp = out.with_name(out.stem + ".part.mp4")
        try:
            private_dir(out.parent)
            export_annotated_video(video_path, result, str(tmp),
                                   on_progress=lambda d, n: self._progress(render, d, n))
            os.chmod(tmp, 0o600)  # exports show the user's video: this user only
            os.replace(tmp, out)
        except ChordError as exc:
            log.warning("annotated export of %s failed: %s", video_path, exc)
            tmp.unlink(missing_ok=True)
            with self._lock:
                render.state, render.error = "failed", exc.to_dict()
            return
        except OSError as exc:
            log.warning("annotated export of %s failed: %s", video_path, exc)
            tmp.unlink(missing_ok=True)
            with self._lock:
                render.state = "failed"
                render.error = {"message": f"could not write the annotated video: "
                                           f"{exc.strerror or exc}",
                                "hint": "check free disk space and that CHORD_DATA_DIR is "
                                        "writable"}
            return
        with self._lock:
            render.state = "done"
        log.info("annotated render finished: %s", out.name)
