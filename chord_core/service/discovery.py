"""Where the one-shot CLI finds a Chord service already running on this machine.

``serve`` writes ``service.json`` into the data dir (``CHORD_DATA_DIR``) once its settings are
checked, and removes it when it stops. The file names the URL to call, the process and the
model it serves, and a random per-service token; it holds no key (the CLI takes the key from
``CHORD_API_KEY``, as every client does). A file whose process is gone (``kill -9``) is
stale and ignored, so a crashed service never sends a CLI call to nowhere.

Nothing in the file is believed until it is checked (issue 40: a ``service.json`` planted in
the data dir made ``describe`` send the API key and the clip to the port it named), in this
order, and the first failure is the reason the CLI gives for running the clip itself:

- the file is a regular file (not a link) of this user, readable by no one else (0600), in a
  folder of this user (or root) that no one else may write to;
- its pid is alive, a process of this user whose command is ``… chord_core … serve``;
- the service at its URL proves it holds the file's token: the CLI sends a fresh random
  challenge to ``GET /v1/identity`` (no key sent) and compares the answer, an HMAC-SHA256 of
  the challenge under the token, in constant time (:func:`verify`). Only then is the key
  sent. A process listening on that port that did not write the file cannot answer.

Light on purpose: the CLI imports this before it decides whether to load a model, so
nothing here imports FastAPI, torch or the runtime.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
FILE_NAME = "service.json"
IDENTITY_PATH = "/v1/identity"
_DOMAIN = b"chord-identity/v1:"  # what the proof's HMAC covers besides the challenge
MAX_FILE_BYTES = 8192
MAX_IDENTITY_BYTES = 4096


def new_token() -> str:
    """A service's identity token: 256 random bits, hex."""
    return secrets.token_hex(32)


def proof(token: str, challenge: str) -> str:
    """What the service answers to ``challenge``: HMAC-SHA256 under its token, hex."""
    return hmac.new(token.encode(), _DOMAIN + challenge.encode(), hashlib.sha256).hexdigest()


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


def advertise(url: str, model: str, data_dir: Path | str | None = None,
              token: str = "") -> Path | None:
    """Write the file (private, replaced whole); None if the data dir cannot take it — the
    service runs all the same, the CLI then just loads its own model. ``token`` is the one
    the service proves at ``/v1/identity`` (without it no CLI trusts the file)."""
    path = discovery_path(data_dir)
    doc = {"url": url, "pid": os.getpid(), "model": model, "started_at": time.time(),
           "token": token}
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
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's (refused by _not_serving)
        return True
    except OverflowError:
        return False
    return True


def _untrusted_file(path: Path) -> str:
    """Why the file may have been written by someone else, or "" when it cannot have."""
    st, folder = os.lstat(path), os.stat(path.parent)
    me = os.getuid()
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file (a link or a device)"
    if st.st_uid != me:
        return f"it belongs to another user (uid {st.st_uid})"
    if stat.S_IMODE(st.st_mode) & 0o077:
        return f"other users may read or change it (mode {stat.S_IMODE(st.st_mode):o})"
    if folder.st_uid not in (me, 0):
        return f"its folder belongs to another user (uid {folder.st_uid})"
    if stat.S_IMODE(folder.st_mode) & 0o022:
        return (f"other users may write to its folder (mode "
                f"{stat.S_IMODE(folder.st_mode):o})")
    return ""


def _not_serving(pid: int) -> str:
    """Why process ``pid`` is not a Chord service of this user, or "" when it is one (or
    this system shows no /proc to ask)."""
    proc = Path(f"/proc/{pid}")
    if not Path("/proc/self").is_dir():
        return ""
    try:
        owner = proc.stat().st_uid
        argv = (proc / "cmdline").read_bytes()[:4096].split(b"\0")
    except OSError:
        return f"process {pid} cannot be looked at"
    if owner != os.getuid():
        return f"process {pid} belongs to another user (uid {owner})"
    if not any(b"chord_core" in a for a in argv) or b"serve" not in argv:
        shown = b" ".join(argv).decode("utf-8", "replace").strip()[:120]
        return f"process {pid} is not a Chord service (its command is {shown!r})"
    return ""


def find_service(data_dir: Path | str | None = None) -> tuple[dict[str, Any] | None, str]:
    """(the running service's checked record, "") or (None, why not): no file, a file
    someone else may have written, a gone process or one that is not ``chord_core serve``.
    The service's identity is checked apart (:func:`verify`): it needs a request."""
    path = discovery_path(data_dir)
    try:
        why = _untrusted_file(path)
        if why:
            return None, f"{path} is not trusted: {why}"
        with open(path, "rb") as fh:
            doc = json.loads(fh.read(MAX_FILE_BYTES))
    except FileNotFoundError:
        return None, "no Chord service is running on this machine"
    except (OSError, ValueError):
        return None, f"{path} cannot be read"
    if not isinstance(doc, dict) or not isinstance(doc.get("url"), str) or \
            not isinstance(doc.get("token"), str) or len(doc["token"]) < 32:
        return None, f"{path} does not name a service this Chord can check"
    if not _alive(doc.get("pid")):
        return None, "no Chord service is running on this machine (a stale service.json)"
    why = _not_serving(doc["pid"])
    if why:
        return None, f"{path} is not trusted: {why}"
    return doc, ""


def advertised(data_dir: Path | str | None = None) -> dict[str, Any] | None:
    """The running service's checked record (:func:`find_service`), or None."""
    return find_service(data_dir)[0]


def verify(url: str, token: str, timeout: float = 2.0) -> str:
    """"" when the service at ``url`` proves it holds ``token``, else why not. Sends a fresh
    challenge and no key; reads at most MAX_IDENTITY_BYTES."""
    challenge = secrets.token_hex(16)
    req = urllib.request.Request(f"{url}{IDENTITY_PATH}?challenge={challenge}",
                                 headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            doc = json.loads(resp.read(MAX_IDENTITY_BYTES))
    except urllib.error.HTTPError as exc:
        return f"the service at {url} answered {exc.code} to its identity check"
    except (OSError, ValueError) as exc:
        return f"the service at {url} did not answer its identity check ({exc})"
    given = doc.get("proof") if isinstance(doc, dict) else None
    if not isinstance(given, str) or not hmac.compare_digest(given, proof(token, challenge)):
        return f"the service at {url} could not prove it is the one that wrote service.json"
    return ""
