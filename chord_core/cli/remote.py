"""``describe`` / ``ground`` / ``entail`` through a Chord service that is already running.

A process that analyses one clip spends most of its life loading the model (measured on an
H200 with a 7B: 14.5–15.8 s of a 19–24 s ``describe``); a running ``serve`` has it loaded
and compiled. So, as ``ollama run`` talks to its daemon, the one-clip commands submit to the
service when one runs on this machine (``service.json`` in the data dir, written by
``serve``) or is named (``--server URL`` / ``CHORD_SERVER``), follow its progress events,
and print the same ``chord.result/v1`` document with the same exit codes (2 for bad input,
1 otherwise). ``--local`` (or ``CHORD_SERVER=local``) loads the model in this process; so do
options only this process can honour (``--method two_pass``, ``--scores``, placement and
``--annotated-video``), and a ``--model`` other than the one the service serves. Which path
ran is said on stderr. Only the standard library is used: no model, torch or HTTP client is
imported on this path.

The advertised service is believed only once checked (``discovery.find_service``: the file's
owner and mode, the pid's command; ``discovery.verify``: the service proves it holds the
file's token): the API key is never sent to a service that did not prove it. Whatever a
service (or a ``--server`` that is not Chord) answers is read bounded and checked
(``remote_http``): an HTML page, JSON without a ``job_id``, a job id with ``../``, a stream
that never ends or a redirect is a clear ChordError, never a traceback or a hang.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

from chord_core.cli.remote_http import (
    MAX_REPLY_BYTES,
    call,
    events,
    health,
    job_id_of,
    not_chord,
    read_json,
)
from chord_core.errors import ConfigError, InputError, RemoteError

__all__ = ["RemoteError", "add_args", "choose_server", "events", "health", "run_remote"]
log = logging.getLogger(__name__)
LOCAL_WORDS = frozenset({"local", "off", "0", "none", "no"})
CHUNK = 1 << 20


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where it runs")
    g.add_argument("--server", default=None, metavar="URL",
                   help="a running Chord service to submit to (default: the one `serve` "
                        "advertises in the data dir, or $CHORD_SERVER; `local`: none)")
    g.add_argument("--local", action="store_true",
                   help="load the model in this process even when a service is running")


def _local_only(args: argparse.Namespace) -> str:
    """The first option a service cannot carry (it runs its own model, placement, method)."""
    checks = (("--method two_pass", getattr(args, "method", "per_frame") != "per_frame"),
              ("--scores", bool(getattr(args, "scores", False))),
              ("--annotated-video", bool(getattr(args, "annotated_video", None))),
              ("--batch-size", args.batch_size is not None),
              ("--device", args.device is not None),
              ("--max-memory", args.max_memory is not None),
              ("--allow-offload", bool(args.allow_offload)),
              ("--strategy", args.strategy is not None))
    return next((name for name, hit in checks if hit), "")


def _named(args: argparse.Namespace) -> str | None:
    from chord_core.config import env_value

    return args.server or env_value("CHORD_SERVER") or None


def choose_server(args: argparse.Namespace) -> tuple[str | None, str]:
    """(the service's URL or None for in-process, why) — the why is said on stderr."""
    from chord_core.config import env_value
    from chord_core.service.discovery import find_service, verify

    named = _named(args)
    if args.local or (named and named.strip().lower() in LOCAL_WORDS):
        return None, "asked for (--local)" if args.local else f"CHORD_SERVER={named}"
    blocker = _local_only(args)
    if named:
        if blocker:
            raise ConfigError(f"{blocker} needs the model in this process, and --server / "
                              "CHORD_SERVER names a service",
                              hint="leave the option out to use the service, or add --local")
        return _checked_url(named), f"the service named at {named}"
    if blocker:
        return None, f"{blocker} needs the model in this process"
    found, why = find_service()
    if found is None:
        if "not trusted" in why:  # someone else's file, or not a Chord process: say so
            log.warning("%s; no key or clip is sent to it, the clip runs here", why)
        return None, why
    wanted = args.model or env_value("CHORD_MODEL")
    if wanted and wanted != found.get("model"):
        return None, f"the model asked for ({wanted}) is not the one the service serves " \
                     f"({found.get('model')})"
    unproven = verify(found["url"], found["token"])
    if unproven:
        log.warning("%s; no key or clip is sent to it, the clip runs here", unproven)
        return None, unproven
    if health(found["url"]) is None:
        return None, f"the service at {found['url']} does not answer"
    return found["url"], "the service running on this machine"


def _checked_url(named: str) -> str:
    """``--server``/CHORD_SERVER as an http(s) URL of a host (urllib would open file:…)."""
    from urllib.parse import urlsplit

    url = named.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 — raises ValueError for a port that is not a number
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and \
            not parts.query and not parts.fragment
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"--server / CHORD_SERVER {named[:200]!r} is not an http(s) URL",
                          hint="give the service's address, e.g. http://127.0.0.1:8080")
    return url


def job_fields(args: argparse.Namespace, query: str) -> dict[str, Any]:
    own = {"describe": "prompt", "ground": "target", "entail": "statement"}[args.command]
    fields: dict[str, Any] = {"task": args.command, own: query}
    for name in ("fps", "max_frames", "max_pixels", "token_budget", "max_new_tokens"):
        value = getattr(args, name, None)
        if value is not None:
            fields[name] = value
    return fields


def _submit_path(url: str, fields: dict[str, Any], video: Path) -> str:
    body = json.dumps({**fields, "video_path": str(video)}).encode()
    with call(url + "/v1/jobs", data=body,
              headers={"Content-Type": "application/json"}) as resp:
        return job_id_of(resp, url)


def _submit_upload(url: str, fields: dict[str, Any], video: Path) -> str:
    """The file itself as a multipart upload, streamed from disk (never whole in memory)."""
    boundary = uuid.uuid4().hex
    head = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items())
    name = video.name.replace('"', "_")
    head += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
             f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n').encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    size = video.stat().st_size

    def body() -> Iterator[bytes]:
        yield head
        with video.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                yield chunk
        yield tail

    with call(url + "/v1/jobs", data=body(), timeout=300.0, headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(len(head) + size + len(tail))}) as resp:
        return job_id_of(resp, url)


def submit(url: str, fields: dict[str, Any], video_arg: str) -> tuple[str, str]:
    """(job id, how the clip went): by path when the service may read it, else uploaded."""
    video = Path(video_arg).expanduser().resolve()
    if not video.is_file():
        raise InputError(f"{video_arg} is not a file", hint="check the path")
    try:
        return _submit_path(url, fields, video), "by path"
    except RemoteError as exc:
        if exc.exit_code != 2 or "media roots" not in exc.message and \
                "paths are switched off" not in exc.message:
            raise
    return _submit_upload(url, fields, video), "uploaded (outside the service's media roots)"


def run_remote(url: str, why: str, args: argparse.Namespace, query: str,
               progress: Any) -> dict[str, Any]:
    """Submit, follow, and return the finished job's result document (raises on failure)."""
    job_id, how = submit(url, job_fields(args, query), args.video)
    print(f"note: running on the Chord service at {url} ({why}; clip {how}), job {job_id}; "
          "--local runs it in this process", file=sys.stderr, flush=True)
    return follow(url, job_id, progress)


def follow(url: str, job_id: str, progress: Any, limit: int = MAX_REPLY_BYTES
           ) -> dict[str, Any]:
    """Follow the job's events (``progress`` hears each ``ProgressEvent``) to its end, and
    return its result document, read at most ``limit`` bytes (raises when it did not end
    done: a bad input's error exits 2 as here)."""
    from chord_core.types import ProgressEvent

    final: dict[str, Any] = {}
    for event, data in events(url, job_id):  # bounded: CHORD_REMOTE_WAIT_S in all
        if event == "progress" and isinstance(data, dict):
            try:
                progress(ProgressEvent(**{k: data[k] for k in
                                          ProgressEvent.__dataclass_fields__ if k in data}))
            except (TypeError, ValueError, KeyError, AttributeError):
                raise not_chord(url, "a progress event is not one Chord sends") from None
        elif event == "end":
            final = data if isinstance(data, dict) else {"state": "not a Chord end event"}
    state = final.get("state")
    if state != "done":
        found = final.get("error")
        err: dict[str, Any] = found if isinstance(found, dict) else {}
        status = err.get("status", 500)
        raise RemoteError(status if isinstance(status, int) and state == "failed" else 500,
                          f"job {job_id} {state or 'did not finish'}: "
                          f"{err.get('error', 'no result')}", str(err.get("hint", "")))
    with call(f"{url}/v1/jobs/{job_id}/result") as resp:
        return read_json(resp, url, "the result", limit)

