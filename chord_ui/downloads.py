"""Model downloads in a background thread, with progress the pages can poll.

One ``DownloadManager`` per server (see ``chord_ui.resources``): every session sees the same
download, and a download survives the browser tab that started it. No Streamlit here.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from chord_core.errors import ChordError, ModelNotFoundError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DownloadStatus:
    """Snapshot of one model download. ``state``: running, done, failed."""

    repo_id: str
    state: str = "running"
    done_bytes: int = 0
    total_bytes: int = 0
    message: str = ""
    error: dict[str, str] | None = None
    local_path: str = ""
    started_at: float = 0.0

    @property
    def fraction(self) -> float | None:
        if self.state == "done":
            return 1.0
        return None if self.total_bytes <= 0 else min(1.0, self.done_bytes / self.total_bytes)


class DownloadManager:
    """Starts at most one download per repo id and keeps its latest status. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._status: dict[str, DownloadStatus] = {}

    def status(self, repo_id: str) -> DownloadStatus | None:
        with self._lock:
            return self._status.get(repo_id)

    def start(self, repo_id: str) -> DownloadStatus:
        """Start downloading ``repo_id`` unless it is already running or done."""
        with self._lock:
            current = self._status.get(repo_id)
            if current is not None and current.state in ("running", "done"):
                return current
            status = DownloadStatus(repo_id, message="starting download",
                                    started_at=time.time())
            self._status[repo_id] = status
        threading.Thread(target=self._run, args=(repo_id,), name=f"download-{repo_id}",
                         daemon=True).start()
        return status

    def _update(self, repo_id: str, **changes: Any) -> None:
        with self._lock:
            self._status[repo_id] = replace(self._status[repo_id], **changes)

    def _progress(self, repo_id: str, *args: Any) -> None:
        """Accepts ``(done, total)``, ``(done, total, message)`` or one event object."""
        if len(args) == 1 and not isinstance(args[0], (int, float)):
            ev = args[0]
            done = int(getattr(ev, "done", getattr(ev, "done_bytes", 0)) or 0)
            total = int(getattr(ev, "total", getattr(ev, "total_bytes", 0)) or 0)
            message = str(getattr(ev, "message", ""))
        else:
            done = int(args[0]) if args else 0
            total = int(args[1]) if len(args) > 1 else 0
            message = str(args[2]) if len(args) > 2 else ""
        self._update(repo_id, done_bytes=done, total_bytes=total, message=message)

    def _run(self, repo_id: str) -> None:
        from chord_core.model.hub import download_model

        try:
            path = download_model(repo_id, on_progress=lambda *a: self._progress(repo_id, *a))
        except ChordError as exc:
            log.warning("download of %s failed: %s", repo_id, exc)
            self._update(repo_id, state="failed", error=exc.to_dict())
            return
        except Exception as exc:  # noqa: BLE001 — network/hub errors must reach the page
            log.exception("download of %s crashed", repo_id)
            self._update(repo_id, state="failed", error=ModelNotFoundError(
                f"download failed: {exc}",
                hint="check the network, or download on another machine and point Chord at "
                     "the folder").to_dict())
            return
        self._update(repo_id, state="done", local_path=str(path), message="downloaded")
