"""Where the one-shot CLI finds a Chord service already running on this machine.

``serve`` writes ``service.json`` into the data dir (``CHORD_DATA_DIR``) once its settings are
checked, and removes it when it stops. The file names the URL to call, the process and the
model it serves; it holds no key (the CLI takes the key from ``CHORD_API_KEY``, as every
client does). A file whose process is gone (``kill -9``) is stale and ignored, so a crashed
service never sends a CLI call to nowhere. Light on purpose: the CLI imports this before it
decides whether to load a model, so nothing here imports FastAPI, torch or the runtime.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
FILE_NAME = "service.json"


def discovery_path(data_dir: Path | str | None = None) -> Path:
    from chord_core.config import default_data_dir

    return Path(data_dir if data_dir is not None else default_data_dir()) / FILE_NAME


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a service bound to ``host``."""
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def advertise(url: str, model: str, data_dir: Path | str | None = None) -> Path | None:
    """Write the file (private, replaced whole); None if the data dir cannot take it — the
    service runs all the same, the CLI then just loads its own model."""
    path = discovery_path(data_dir)
    doc = {"url": url, "pid": os.getpid(), "model": model, "started_at": time.time()}
    tmp = path.with_name(f".{FILE_NAME}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not write %s (%s): the CLI will not find this service by itself",
                    path, exc)
        return None
    return path


def withdraw(path: Path | None) -> None:
    """Remove the file if it is still this process's (another service may have replaced it)."""
    if path is None:
        return
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def advertised(data_dir: Path | str | None = None) -> dict[str, Any] | None:
    """The running service's record, or None (no file, unreadable, or its process gone)."""
    try:
        doc = json.loads(discovery_path(data_dir).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("url"), str):
        return None
    return doc if _alive(doc.get("pid")) else None
