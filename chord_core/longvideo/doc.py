"""The long-video documents: chapters (``chord.chapters/v1``) and search hits
(``chord.search/v1``). Plain data with ``to_dict``/``from_dict``, like ``chord_core.types``.

Times are seconds from the clip's first frame, taken from the container (a chapter starts at
its first chunk's first frame's presentation time); ``*_frame`` fields name those frames.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from chord_core.errors import InputError

CHAPTERS_SCHEMA = "chord.chapters/v1"
SEARCH_SCHEMA = "chord.search/v1"


@dataclass(frozen=True)
class ChunkText:
    """One chunk's description (the map step) and the job that made it."""

    index: int
    start_s: float
    end_s: float
    first_frame: int
    text: str
    job_id: str = ""
    frames: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Chapter:
    """Consecutive chunks under one title (the reduce step)."""

    index: int
    start_s: float
    end_s: float
    first_frame: int
    title: str
    summary: str
    chunks: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["chunks"] = list(self.chunks)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Chapter:
        return cls(int(d["index"]), float(d["start_s"]), float(d["end_s"]),
                   int(d.get("first_frame", 0)), str(d.get("title", "")),
                   str(d.get("summary", "")), tuple(int(c) for c in d.get("chunks", ())))


@dataclass(frozen=True)
class ChaptersDoc:
    """A long clip described as chapters plus an overall summary."""

    video: dict[str, Any]
    model: dict[str, Any]
    settings: dict[str, Any]
    scan: dict[str, Any]
    chunks: tuple[dict[str, Any], ...]
    chunk_texts: tuple[ChunkText, ...]
    chapters: tuple[Chapter, ...]
    summary: str
    warnings: tuple[str, ...] = ()
    timing: dict[str, float] = field(default_factory=dict)
    run_id: str = ""
    created_at: str = ""
    schema: str = CHAPTERS_SCHEMA

    @property
    def duration_s(self) -> float:
        return float(self.video.get("duration_s", 0.0))

    @property
    def test_model(self) -> bool:
        return bool(self.model.get("test_model"))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "run_id": self.run_id, "created_at": self.created_at,
                "video": self.video, "model": self.model, "settings": self.settings,
                "scan": self.scan, "chunks": list(self.chunks),
                "chunk_texts": [c.to_dict() for c in self.chunk_texts],
                "chapters": [c.to_dict() for c in self.chapters], "summary": self.summary,
                "warnings": list(self.warnings), "timing": self.timing}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChaptersDoc:
        if d.get("schema") != CHAPTERS_SCHEMA:
            raise InputError(f"not a {CHAPTERS_SCHEMA} document (schema={d.get('schema')!r})",
                             hint="pass a JSON file written by `python -m chord_core chapters`")
        return cls(video=dict(d["video"]), model=dict(d.get("model", {})),
                   settings=dict(d.get("settings", {})), scan=dict(d.get("scan", {})),
                   chunks=tuple(d.get("chunks", ())),
                   chunk_texts=tuple(ChunkText(**c) for c in d.get("chunk_texts", ())),
                   chapters=tuple(Chapter.from_dict(c) for c in d.get("chapters", ())),
                   summary=str(d.get("summary", "")), warnings=tuple(d.get("warnings", ())),
                   timing=dict(d.get("timing", {})), run_id=str(d.get("run_id", "")),
                   created_at=str(d.get("created_at", "")))


@dataclass(frozen=True)
class Evidence:
    """A checked frame that supports a hit: its time, index and P(entailment) (entail) or
    its boxes (ground)."""

    t_s: float
    frame_index: int
    score: float
    boxes: tuple[tuple[float, float, float, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"t_s": self.t_s, "frame_index": self.frame_index, "score": round(self.score, 6),
                "boxes": [list(b) for b in self.boxes]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evidence:
        return cls(float(d["t_s"]), int(d["frame_index"]), float(d["score"]),
                   tuple(tuple(b) for b in d.get("boxes", ())))  # type: ignore[misc]


@dataclass(frozen=True)
class Hit:
    """A time range where the query seems to happen, with the frames that say so."""

    start_s: float
    end_s: float
    score: float
    chapter: int
    evidence: tuple[Evidence, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"start_s": self.start_s, "end_s": self.end_s, "score": round(self.score, 6),
                "chapter": self.chapter, "evidence": [e.to_dict() for e in self.evidence]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Hit:
        return cls(float(d["start_s"]), float(d["end_s"]), float(d["score"]),
                   int(d["chapter"]), tuple(Evidence.from_dict(e) for e in d["evidence"]))


@dataclass(frozen=True)
class SearchDoc:
    """The answer to "when does X happen?"."""

    query: str
    method: str
    video: dict[str, Any]
    candidates: tuple[dict[str, Any], ...]
    hits: tuple[Hit, ...]
    frames_checked: int
    warnings: tuple[str, ...] = ()
    timing: dict[str, float] = field(default_factory=dict)
    test_model: bool = False
    schema: str = SEARCH_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "query": self.query, "method": self.method,
                "video": self.video, "candidates": list(self.candidates),
                "hits": [h.to_dict() for h in self.hits], "frames_checked": self.frames_checked,
                "warnings": list(self.warnings), "timing": self.timing,
                "test_model": self.test_model}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SearchDoc:
        """A stored search (a finished search run's document) read back."""
        return cls(query=str(d["query"]), method=str(d["method"]), video=dict(d["video"]),
                   candidates=tuple(d.get("candidates", ())),
                   hits=tuple(Hit.from_dict(h) for h in d.get("hits", ())),
                   frames_checked=int(d.get("frames_checked", 0)),
                   warnings=tuple(d.get("warnings", ())), timing=dict(d.get("timing", {})),
                   test_model=bool(d.get("test_model", False)))
