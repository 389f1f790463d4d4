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
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

from chord_core.errors import ChordError, ConfigError, InputError, RemoteError

LOCAL_WORDS = frozenset({"local", "off", "0", "none", "no"})
CHUNK = 1 << 20
_STALL_S = 3600.0  # the longest a silent event stream is waited for (the service's own cap)


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
    from chord_core.service.discovery import advertised

    named = _named(args)
    if args.local or (named and named.strip().lower() in LOCAL_WORDS):
        return None, "asked for (--local)" if args.local else f"CHORD_SERVER={named}"
    blocker = _local_only(args)
    if named:
        if blocker:
            raise ConfigError(f"{blocker} needs the model in this process, and --server / "
                              "CHORD_SERVER names a service",
                              hint="leave the option out to use the service, or add --local")
        return named.rstrip("/"), f"the service named at {named}"
    if blocker:
        return None, f"{blocker} needs the model in this process"
    found = advertised()
    if found is None:
        return None, "no Chord service is running on this machine"
    wanted = args.model or env_value("CHORD_MODEL")
    if wanted and wanted != found.get("model"):
        return None, f"the model asked for ({wanted}) is not the one the service serves " \
                     f"({found.get('model')})"
    if health(found["url"]) is None:
        return None, f"the service at {found['url']} does not answer"
    return found["url"], "the service running on this machine"


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    from chord_core.config import env_value

    key = env_value("CHORD_API_KEY")
    head = {"Accept": "application/json", **(extra or {})}
    if key:
        head["Authorization"] = f"Bearer {key}"
    return head


def _call(url: str, *, data: Any = None, headers: dict[str, str] | None = None,
          method: str | None = None, timeout: float = 30.0) -> Any:
    req = urllib.request.Request(url, data=data, headers=_headers(headers), method=method)
    try:
        return urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise _remote_error(exc) from None
    except OSError as exc:
        raise ChordError(f"the Chord service at {url.split('/v1')[0]} cannot be reached: {exc}",
                         hint="start it (python -m chord_core serve), name another with "
                              "--server, or run here with --local") from None


def _remote_error(exc: urllib.error.HTTPError) -> RemoteError:
    try:
        body = json.loads(exc.read() or b"{}")
    except ValueError:
        body = {}
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):  # OpenAI-style paths
        err = err.get("message")
    return RemoteError(exc.code, str(err or f"the service answered {exc.code}"),
                       str(body.get("hint", "")) if isinstance(body, dict) else "")


def health(url: str) -> dict[str, Any] | None:
    """The service's /health document (ready or loading), or None if it does not answer."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 503: loading or failed — it is there
        try:
            return json.loads(exc.read())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


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
    with _call(url + "/v1/jobs", data=body,
               headers={"Content-Type": "application/json"}) as resp:
        return json.loads(resp.read())["job_id"]


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

    with _call(url + "/v1/jobs", data=body(), timeout=300.0, headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(len(head) + size + len(tail))}) as resp:
        return json.loads(resp.read())["job_id"]


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


def events(url: str, job_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The job's server-sent events as (event, data) until the stream ends."""
    with _call(f"{url}/v1/jobs/{job_id}/events", timeout=_STALL_S,
               headers={"Accept": "text/event-stream"}) as resp:
        event = "message"
        for raw in resp:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                yield event, json.loads(line[5:])
                event = "message"


def run_remote(url: str, why: str, args: argparse.Namespace, query: str,
               progress: Any) -> dict[str, Any]:
    """Submit, follow, and return the finished job's result document (raises on failure)."""
    from chord_core.types import ProgressEvent

    job_id, how = submit(url, job_fields(args, query), args.video)
    print(f"note: running on the Chord service at {url} ({why}; clip {how}), job {job_id}; "
          "--local runs it in this process", file=sys.stderr, flush=True)
    final: dict[str, Any] = {}
    for event, data in events(url, job_id):
        if event == "progress" and isinstance(data, dict):
            progress(ProgressEvent(**{k: data[k] for k in ProgressEvent.__dataclass_fields__
                                      if k in data}))
        elif event == "end":
            final = data
    state = final.get("state")
    if state != "done":
        err = final.get("error") or {}
        raise RemoteError(int(err.get("status", 500)) if state == "failed" else 500,
                          f"job {job_id} {state or 'did not finish'}: "
                          f"{err.get('error', 'no result')}", str(err.get("hint", "")))
    with _call(f"{url}/v1/jobs/{job_id}/result") as resp:
        return json.loads(resp.read())

