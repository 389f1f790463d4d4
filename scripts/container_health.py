"""The container's HEALTHCHECK: is what this container runs answering?

Docker runs this inside the container every 30 s (Dockerfile ``HEALTHCHECK``). What to check is
read from how the container was started, i.e. PID 1's command line, so one image needs no extra
settings whichever way it is run:

* ``start_service.sh …`` (or the ``streamlit run`` it became): the app's ``/_stcore/health``;
  with ``--api-port N`` also the API's ``/health`` on N;
* ``python -m chord_core serve …``: only the API's ``/health``.

Exit 0 when every checked URL answers 200, else 1 (Docker's "unhealthy"), with one line per URL.
Standard library only: it runs in the image's Python without the app's imports.
"""
from __future__ import annotations

import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence

log = logging.getLogger("chord.health")


def _flag(args: Sequence[str], *names: str) -> str | None:
    """The value of the first of ``names`` in ``args`` (``--x V`` or ``--x=V``), else None."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def urls_to_check(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The health URLs for a container whose PID 1 was started as ``args``."""
    is_serve = "chord_core" in args and "serve" in args
    if is_serve:
        port = _flag(args, "--port") or env.get("CHORD_API_PORT") or "8080"
        return [f"http://127.0.0.1:{port}/health"]
    port = _flag(args, "--port", "--server.port") or env.get("CHORD_PORT") or "8501"
    urls = [f"http://127.0.0.1:{port}/_stcore/health"]
    api_port = _flag(args, "--api-port")
    if api_port:
        urls.append(f"http://127.0.0.1:{api_port}/health")
    return urls


def pid1_args(path: str = "/proc/1/cmdline") -> list[str]:
    """PID 1's arguments (NUL-separated in /proc); empty when they cannot be read."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _state(body: bytes) -> str:
    """The service's ``status`` field (ready / loading / failed) from a /health body, or ""."""
    import json

    try:
        doc = json.loads(body[:65536])
    except ValueError:
        return ""
    return str(doc.get("status", "")) if isinstance(doc, dict) else ""


def check(url: str, timeout: float = 5.0) -> bool:
    """True when ``url`` answers HTTP 200; logs what it got either way, with the API's state
    (``loading`` while the model loads, ``failed`` with its error) so ``docker inspect``'s
    health log says why the app+API container is unhealthy."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (127.0.0.1)
            ok = resp.status == 200
            log.info("%s %s %s %s", "ok" if ok else "FAIL", url, resp.status, _state(resp.read()))
            return ok
    except urllib.error.HTTPError as exc:
        log.info("FAIL %s %s %s", url, exc.code, _state(exc.read()))
    except (urllib.error.URLError, OSError) as exc:
        log.info("FAIL %s %s", url, getattr(exc, "reason", exc))
    return False


def main() -> int:
    """Check every URL (all of them, so the log names each failure) and return the status."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    results = [check(u) for u in urls_to_check(pid1_args(), os.environ)]
    return 0 if results and all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
