"""Plain, picklable data that crosses module and process boundaries.

Nothing here holds a tensor, a model or an open file. Every type has ``to_dict()``; the
``Result`` is the ``chord.result/v1`` document that the CLI prints, the UI renders, export
writes and the store keeps (see README, "Result schema").

Conventions: boxes are ``bbox`` = normalised [x1, y1, x2, y2] in 0..1 of the ORIGINAL frame
(as displayed, i.e. after rotation metadata is applied) plus ``bbox_px`` in original pixels.
Sizes are ``(width, height)`` tuples named ``*_wh``. Times are seconds from the clip start.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from chord_core.families import DEFAULT_FAMILY, FAMILIES

SCHEMA = "chord.result/v1"
# every ProgressEvent.stage (the UI has a label for each: chord_ui/formatting.STAGE_LABELS)
STAGES = ("probe", "sampling", "loading_model", "placed", "decoding", "preprocess",
          "generating", "grounding_frames", "scoring", "checking", "tracking", "rendering",
          "done", "chunks", "chapters", "summary", "grounding")


def _plain(obj: Any) -> Any:
    """Dataclass → dict with tuples turned into lists (JSON-ready)."""
    data = asdict(obj)
    return _lists(data)


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def _from(cls: type, data: dict[str, Any]) -> Any:
    """Build ``cls`` from a dict, ignoring unknown keys (forward compatible readers)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class VideoInfo:
    """What ``video.probe`` learned about a file. ``width``/``height`` are as displayed
    (rotation applied); ``stored_wh`` is the coded frame size before rotation.

    ``timeline``: every frame's presentation time from the container, as runs
    ``(first_index, first_time_s, step_s)`` (see :mod:`chord_core.media.frame_times`); empty when
    the file carries no usable timestamps, and :meth:`time_of` then falls back to index / fps.
    """

    path: str
    duration_s: float
    fps: float
    frame_count: int
    width: int
    height: int
    codec: str = ""
    rotation: int = 0
    container: str = ""
    header_fps: float = 0.0
    header_frame_count: int = 0
    variable_fps: bool = False
    stored_wh: tuple[int, int] = (0, 0)
    warnings: tuple[str, ...] = ()
    timeline: tuple[tuple[int, float, float], ...] = ()

    @property
    def size_wh(self) -> tuple[int, int]:
        return (self.width, self.height)

    def time_of(self, index: int) -> float:
        """Seconds from the first frame to frame ``index`` (its own presentation time)."""
        if not self.timeline:
            return index / self.fps if self.fps > 0 else 0.0
        lo, hi = 0, len(self.timeline)
        while hi - lo > 1:  # the last run starting at or before index
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.timeline[mid][0] <= index else (lo, mid)
        run = self.timeline[lo]
        return round(run[1] + (index - run[0]) * run[2], 6)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VideoInfo:
        data = dict(data)
        data["stored_wh"] = tuple(data.get("stored_wh", (0, 0)))
        data["warnings"] = tuple(data.get("warnings", ()))
        data["timeline"] = tuple(tuple(r) for r in data.get("timeline", ()))
        return _from(cls, data)


@dataclass(frozen=True)
class SamplingPlan:
    """Which frames to read and at what size, decided before anything runs.

    ``timestamps_s[i]`` is the presentation time of ``frame_indices[i]`` from the container
    (``VideoInfo.time_of``), in seconds from the first frame.
    ``input_wh`` is the size each frame is resized to for the model (multiples of 28).
    ``visual_tokens`` is what the whole request costs the model.
    """

    task: str
    fps: float
    frame_indices: tuple[int, ...]
    timestamps_s: tuple[float, ...]
    input_wh: tuple[int, int]
    visual_tokens: int
    tokens_per_frame: int = 0
    max_frames: int = 0
    max_pixels: int = 0
    min_pixels: int = 0
    token_budget: int = 0
    notes: tuple[str, ...] = ()
    # which frame reader decoded the frames (nvdec | cpu-pool | default | image) and a
    # one-line note of why (e.g. "read by cpu-pool; nvdec not used: no CUDA GPU here")
    reader: str = ""
    reader_note: str = ""
    # samples moved to the nearest keyframe (chapters, search): seconds each moved (+ later)
    keyframe_moves_s: tuple[float, ...] = ()

    @property
    def num_frames(self) -> int:
        return len(self.frame_indices)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingPlan:
        data = dict(data)
        for key in ("frame_indices", "timestamps_s", "notes", "keyframe_moves_s"):
            data[key] = tuple(data.get(key, ()))
        data["input_wh"] = tuple(data["input_wh"])
        return _from(cls, data)


@dataclass(frozen=True)
class Detection:
    """One box on one sampled frame. ``track_id`` is -1 until tracks are linked."""

    t_s: float
    frame_index: int
    bbox: tuple[float, float, float, float]
    bbox_px: tuple[int, int, int, int]
    label: str = ""
    track_id: int = -1
    score: float | None = None
    interpolated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Detection:
        data = dict(data)
        data["bbox"] = tuple(data["bbox"])
        data["bbox_px"] = tuple(data["bbox_px"])
        return _from(cls, data)


@dataclass(frozen=True)
class Track:
    """A target followed over time: ids of its detections' frames and its time span."""

    track_id: int
    label: str
    start_s: float
    end_s: float
    num_detections: int

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Track:
        return _from(cls, data)


@dataclass(frozen=True)
class Segment:
    """A continuous time interval in which a track is visible."""

    track_id: int
    start_s: float
    end_s: float
    label: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Segment:
        return _from(cls, data)


@dataclass(frozen=True)
class ModelInfo:
    """What model produced a result and where it ran."""

    id: str
    dtype: str
    device_map: dict[str, str] = field(default_factory=dict)
    test_model: bool = False
    family: str = DEFAULT_FAMILY
    # how its boxes are written: "absolute" pixels of the input (Qwen2.5-VL) or
    # "relative1000" (Qwen3-VL: 0–1000 of the image); results store boxes normalised either way
    coords: str = "absolute"
    # a Thinking checkpoint (Qwen3-VL-*-Thinking): its answers follow its reasoning
    thinking: bool = False
    # its language model's prefill products ran in FP8 (CHORD_FP8=1; model/fp8.py)
    fp8: bool = False

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        data = dict(data)  # results stored before ``coords`` existed: the family's convention
        fam = FAMILIES.get(data.get("family") or DEFAULT_FAMILY)
        data.setdefault("coords", fam.coords if fam else "absolute")
        return _from(cls, data)


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds spent in each stage of one analysis."""

    probe_s: float = 0.0
    decode_s: float = 0.0
    preprocess_s: float = 0.0
    generate_s: float = 0.0
    total_s: float = 0.0
    load_s: float = 0.0
    postprocess_s: float = 0.0
    score_s: float = 0.0  # of generate_s: scoring grounding boxes by entailment

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timing:
        return _from(cls, data)


@dataclass(frozen=True)
class EntailFrame:
    """One sampled frame's answer to a statement: a probability per label."""

    t_s: float
    frame_index: int
    entailment: float
    neutral: float
    contradiction: float

    def probabilities(self) -> dict[str, float]:
        return {"entailment": self.entailment, "neutral": self.neutral,
                "contradiction": self.contradiction}

    @property
    def label(self) -> str:
        probs = self.probabilities()
        return max(probs, key=lambda k: probs[k])

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass(frozen=True)
class Entailment:
    """A statement checked against a clip (or one image): the verdict
    (entailment | neutral | contradiction), its probabilities, the curve over the frames, and
    the moments that support or contradict it (see ``entailment.summarise``)."""

    statement: str
    verdict: str
    probabilities: dict[str, float]
    frames: tuple[EntailFrame, ...] = ()
    supporting_s: tuple[float, ...] = ()
    contradicting_s: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entailment:
        return cls(statement=data.get("statement", ""), verdict=data["verdict"],
                   probabilities=dict(data.get("probabilities", {})),
                   frames=tuple(_from(EntailFrame, f) for f in data.get("frames", [])),
                   supporting_s=tuple(data.get("supporting_s", [])),
                   contradicting_s=tuple(data.get("contradicting_s", [])))


@dataclass(frozen=True)
class Result:
    """The ``chord.result/v1`` document."""

    task: str
    query: str
    video: VideoInfo
    sampling: SamplingPlan
    model: ModelInfo
    timing: Timing
    text: str = ""
    detections: tuple[Detection, ...] = ()
    tracks: tuple[Track, ...] = ()
    segments: tuple[Segment, ...] = ()
    raw_outputs: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    created_at: str = ""
    schema: str = SCHEMA
    entailment: Entailment | None = None  # task "entail"
    # task "ground": "per_frame" (every sampled frame grounded) or "two_pass" (the clip asked
    # for time spans first, then only frames inside them grounded); None for other tasks
    method: str | None = None
    spans: tuple[tuple[float, float], ...] = ()  # two_pass: the spans (s) the first pass found
    grounded_frames: tuple[int, ...] | None = None  # two_pass: frames grounded; None = all
    # the job was cancelled: only the frames finished before Cancel are in it (ground)
    partial: bool = False
    # describe: the tokens the model read (template, question and visual) and wrote
    tokens: dict[str, int] | None = None
    # a Thinking model: the reasoning before each raw output's answer ("" where none)
    reasoning: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        video = self.video.to_dict()
        return {
            "schema": self.schema,
            "task": self.task,
            "query": self.query,
            "created_at": self.created_at,
            "video": video,
            "sampling": self.sampling.to_dict(),
            "model": self.model.to_dict(),
            "detections": [d.to_dict() for d in self.detections],
            "tracks": [t.to_dict() for t in self.tracks],
            "segments": [s.to_dict() for s in self.segments],
            "text": self.text,
            "raw_outputs": list(self.raw_outputs),
            "warnings": list(self.warnings),
            "timing": self.timing.to_dict(),
            "entailment": None if self.entailment is None else self.entailment.to_dict(),
            "method": self.method,
            "spans": [list(s) for s in self.spans],
            "grounded_frames": None if self.grounded_frames is None
            else list(self.grounded_frames),
            "partial": self.partial,
            "tokens": dict(self.tokens) if self.tokens is not None else None,
            "reasoning": list(self.reasoning),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        if data.get("schema") != SCHEMA:
            from chord_core.errors import InputError

            raise InputError(
                f"not a {SCHEMA} document (schema={data.get('schema')!r})",
                hint="pass a JSON file written by Chord (CLI --json or the app's export)",
            )
        return cls(
            task=data["task"],
            query=data.get("query", ""),
            created_at=data.get("created_at", ""),
            video=VideoInfo.from_dict(data["video"]),
            sampling=SamplingPlan.from_dict(data["sampling"]),
            model=ModelInfo.from_dict(data["model"]),
            timing=Timing.from_dict(data.get("timing", {})),
            text=data.get("text", ""),
            detections=tuple(Detection.from_dict(d) for d in data.get("detections", [])),
            tracks=tuple(Track.from_dict(t) for t in data.get("tracks", [])),
            segments=tuple(Segment.from_dict(s) for s in data.get("segments", [])),
            raw_outputs=tuple(data.get("raw_outputs", [])),
            warnings=tuple(data.get("warnings", [])),
            entailment=Entailment.from_dict(data["entailment"]) if data.get("entailment")
            else None,
            method=data.get("method"),
            spans=tuple((float(a), float(b)) for a, b in data.get("spans") or ()),
            grounded_frames=None if data.get("grounded_frames") is None
            else tuple(int(i) for i in data["grounded_frames"]),
            partial=bool(data.get("partial", False)),
            tokens={k: int(v) for k, v in data["tokens"].items()} if data.get("tokens")
            else None,
            reasoning=tuple(str(r) for r in data.get("reasoning") or ()),
        )


@dataclass(frozen=True)
class ProgressEvent:
    """A step of a running analysis, for progress bars and logs.

    ``stage`` is one of ``STAGES``: probe, sampling, loading_model, placed (where the model
    went), decoding, preprocess, generating, grounding_frames, scoring (box scores), checking
    (a statement's frames, or a long-video search's hits), tracking, rendering, done; a long
    run's stages are chunks, chapters, summary and grounding (its chunks). ``done``/``total``
    count units of the stage (frames, batches, chunks); ``total`` 0 means indeterminate.
    """

    stage: str
    message: str
    done: int = 0
    total: int = 0
    elapsed_s: float = 0.0

    @property
    def fraction(self) -> float | None:
        return None if self.total <= 0 else min(1.0, self.done / self.total)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)
