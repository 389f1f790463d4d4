"""What of a stored result is searchable: the passages of one job's result or one
long-video run's chapters document. Pure functions over plain dicts (no database here).

A passage is one piece of text with the clip it belongs to and the time range it speaks of:

    description  a describe result's text (the sampled frames' span)
    chapter      a chapter's title and summary (its start..end), plus the run's summary
    target       a grounding target with one of its segments (found), or the whole clip
                 with ``found`` false (searched for, not seen)
    statement    an entailment statement with its verdict (the supporting moments' span)

Every passage also carries the clip's file name and folder (searchable as words), the task,
the model and when the result was made (``made_at``, seconds since the epoch; ``day`` as
YYYY-MM-DD in UTC for the date filter).
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any, Iterator, Mapping, NotRequired, TypedDict

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_TEXT_CHARS = 4000  # a passage longer than this is cut: bm25 favours short fields anyway


@dataclass(frozen=True)
class Passage:
    """One searchable piece of text (see the module docstring for the kinds)."""

    source: str  # the job id, or the long-video run id
    kind: str
    text: str
    video_path: str
    task: str
    t0: float
    t1: float
    made_at: float
    model: str = ""
    verdict: str = ""
    found: bool = True
    shown_name: str = ""  # the name the clip was uploaded under (its stored name is a hash)

    @property
    def name(self) -> str:
        return self.shown_name or PurePath(self.video_path).name

    @property
    def folder(self) -> str:
        return str(PurePath(self.video_path).parent)

    @property
    def day(self) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(self.made_at))

    @property
    def place(self) -> str:
        """The file name and folder as words: "fence_cam2.mp4 /media/site-a" matches
        ``fence``, ``cam2`` and ``site``."""
        return f"{self.name} {self.folder}"

    @property
    def tags(self) -> str:
        """The filters as index tokens (see ``filter_tokens``): every folder above the clip,
        the day, month and year, the task."""
        day = self.day
        return " ".join([*(folder_token(f) for f in folder_chain(self.folder)),
                         f"d{day.replace('-', '')}", f"m{day[:7].replace('-', '')}",
                         f"y{day[:4]}", f"t{self.task}"])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "name": self.name, "folder": self.folder, "day": self.day}


def folder_chain(folder: str) -> list[str]:
    """``/a/b/c`` → ``/a``, ``/a/b``, ``/a/b/c``: a folder filter matches clips below it."""
    path = PurePath(folder)
    return [str(p) for p in reversed(path.parents) if str(p) not in (".", path.anchor)] + \
        [str(path)]


def folder_token(folder: str) -> str:
    """One index token per folder (its path hashed: paths are not words)."""
    norm = str(PurePath(folder.rstrip("/") or "/"))
    return "f" + hashlib.sha1(norm.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _span(times: Any, duration: float) -> tuple[float, float]:
    values = [float(t) for t in (times or ()) if t is not None]
    return (min(values), max(values)) if values else (0.0, duration)


def _cut(text: str) -> str:
    text = " ".join(_CONTROL.sub(" ", str(text or "")).split())  # \x02/\x03 mark snippets
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS - 1] + "…"


def result_passages(job: Mapping[str, Any], doc: Mapping[str, Any],
                    made_at: float) -> list[Passage]:
    """The passages of one ``chord.result/v1`` document of the job row ``job``."""
    video = doc.get("video") or {}
    duration = float(video.get("duration_s") or 0.0)
    path = str(job.get("video_path") or video.get("path") or "")
    task = str(doc.get("task") or job.get("task") or "")
    stored = PurePath(path).name
    shown = str(job.get("video_name") or "")
    base = _Base(source=str(job["job_id"]), video_path=path, task=task,
                 shown_name=shown if shown and shown != stored else "",
                 made_at=float(made_at), model=str((doc.get("model") or {}).get("id", "")))
    return [Passage(**base, **fields) for fields in _fields(task, doc, duration)
            if fields["text"]]


class _Base(TypedDict):
    """What every passage of one document shares (``Passage``'s fields of the same names)."""

    source: str
    video_path: str
    task: str
    made_at: float
    model: str
    shown_name: NotRequired[str]


def _fields(task: str, doc: Mapping[str, Any], duration: float) -> Iterator[dict[str, Any]]:
    times = (doc.get("sampling") or {}).get("timestamps_s")
    if task == "describe":
        t0, t1 = _span(times, duration)
        yield {"kind": "description", "text": _cut(doc.get("text", "")), "t0": t0, "t1": t1}
    elif task == "ground":
        yield from _target_fields(doc, duration)
    elif task == "entail":
        ent = doc.get("entailment") or {}
        t0, t1 = _span(ent.get("supporting_s"), duration)
        yield {"kind": "statement", "text": _cut(ent.get("statement") or doc.get("query", "")),
               "t0": t0, "t1": t1, "verdict": str(ent.get("verdict", ""))}


def _target_fields(doc: Mapping[str, Any], duration: float) -> Iterator[dict[str, Any]]:
    target = _cut(doc.get("query", ""))
    segments = doc.get("segments") or []
    for seg in segments:
        label = str(seg.get("label") or "")
        text = target if not label or label.lower() in target.lower() else f"{target} {label}"
        yield {"kind": "target", "text": text, "t0": float(seg.get("start_s", 0.0)),
               "t1": float(seg.get("end_s", 0.0))}
    if not segments:
        yield {"kind": "target", "text": target, "t0": 0.0, "t1": duration, "found": False}


def chapters_passages(run_id: str, doc: Mapping[str, Any], made_at: float) -> list[Passage]:
    """The passages of a ``chord.chapters/v1`` document (a long-video chapters run)."""
    video = doc.get("video") or {}
    duration = float(video.get("duration_s") or 0.0)
    base = _Base(source=run_id, video_path=str(video.get("path", "")), task="chapters",
                 made_at=float(made_at), model=str((doc.get("model") or {}).get("id", "")))
    out = [Passage(**base, kind="chapter", text=_cut(f"{c.get('title', '')}. "
                                                      f"{c.get('summary', '')}"),
                   t0=float(c.get("start_s", 0.0)), t1=float(c.get("end_s", 0.0)))
           for c in doc.get("chapters") or ()]
    if doc.get("summary"):
        out.append(Passage(**base, kind="chapter", text=_cut(doc["summary"]), t0=0.0,
                           t1=duration))
    return out
