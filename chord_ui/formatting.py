"""Pure text helpers for the pages: sizes, durations, plans, progress stages.

No Streamlit here, so everything is unit-testable and the pages stay thin.
"""

from __future__ import annotations

import html
import re
from typing import Any, Iterable

from chord_core.types import ProgressEvent, SamplingPlan, VideoInfo
from chord_ui.i18n import t

TEST_MODEL_LABEL_FALLBACK = "test model — random weights"

# What each engine stage is called on screen (ProgressEvent.stage → label).
STAGE_LABELS = {
    "queued": "Waiting for the worker",
    "probe": "Probing",
    "sampling": "Sampling",
    "loading_model": "Loading model",
    "decoding": "Reading frames",
    "preprocess": "Preparing frames",
    "generating": "Generating",
    "grounding_frames": "Looking for the target",
    "placed": "Placing the model",
    "scoring": "Scoring the boxes",
    "checking": "Checking the statement",
    "tracking": "Tracking",
    "rendering": "Rendering",
    "done": "Done",
    "chunks": "Describing the chunks",
    "chapters": "Writing the chapters",
    "summary": "Summarising",
    "grounding": "Grounding the chunks",
}


# Marks that mean something anywhere in a line for Markdown, GFM or Streamlit's directives
# (``:red[…]``, ``$…$``); CommonMark shows ``\X`` as a literal X. (``:name:`` shortcodes
# are left alone: at worst an emoji or icon, never a link, image or HTML.)
_MD_INLINE = re.compile(r"([\\`*_{}\[\]()<>~$|!&])")
# Marks that mean something only at a line's start, followed by a space, the line's end or
# themselves: headings, lists, rules, setext underlines (``3.0 s`` and ``#tag`` stay as is).
_MD_LINE_START = re.compile(r"^([#+\-=])(?=\s|$|\1)", re.MULTILINE)
_MD_ORDERED = re.compile(r"^(\d+)([.)])(?=\s|$)", re.MULTILINE)


def md_escape(text: Any) -> str:
    """User or model text (prompts, targets, file names, paths, model output, messages) as
    literal text inside Streamlit markdown: ``![x](http://…)`` shows as typed, never as an
    image, link, heading, list or HTML. Line breaks are kept as hard breaks; leading spaces
    are dropped (four of them would start a code block)."""
    lines = [line.lstrip() for line in str(text).replace("\r\n", "\n").split("\n")]
    escaped = _MD_INLINE.sub(r"\\\1", "\n".join(lines))
    escaped = _MD_ORDERED.sub(r"\1\\\2", _MD_LINE_START.sub(r"\\\1", escaped))
    return escaped.replace("\n", "  \n")


def plot_escape(text: Any) -> str:
    """Text for Plotly labels and hover boxes, which render a subset of HTML (links)."""
    return html.escape(str(text), quote=True)


def test_model_label() -> str:
    """The label every output of the random-weight test model carries."""
    try:
        from chord_core.testing.tiny_model import TEST_MODEL_LABEL
    except ImportError:
        return TEST_MODEL_LABEL_FALLBACK
    return str(TEST_MODEL_LABEL)


def human_bytes(n: float | int | None) -> str:
    """``1536`` → ``1.5 KB`` (decimal units, as download sizes are usually quoted)."""
    if n is None:
        return "unknown size"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def human_duration(seconds: float) -> str:
    """``75.2`` → ``1:15``; under a minute → ``12.3 s`` (``12.3 秒`` in Chinese), ``12 s``
    for a whole number."""
    if seconds < 59.95:  # tenths under a minute, never a bare ".0"
        return t("{n} s", n=f"{seconds:.1f}".removesuffix(".0"))
    whole = int(round(seconds))  # past a minute whole seconds: "10:36", not "10:36.0"
    minutes, sec = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}:{sec:02d}"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{sec:02d}"


def video_facts(info: VideoInfo) -> list[tuple[str, str]]:
    """(label, value) pairs for the probe-facts row under the preview."""
    facts = [
        ("Duration", human_duration(info.duration_s)),
        ("Frame rate", f"{info.fps:.2f} fps" + (" (variable)" if info.variable_fps else "")),
        ("Size", f"{info.width}×{info.height}"),
        ("Codec", (info.codec or "?") + (f" / {info.container}" if info.container else "")),
    ]
    if info.rotation:
        facts.append(("Rotation", f"{info.rotation}°"))
    return facts


def plan_summary(plan: SamplingPlan) -> str:
    """One line: ``60 frames × 448×252 · 8,640 visual tokens · 2.0 fps``."""
    w, h = plan.input_wh
    return (f"{plan.num_frames} frames × {w}×{h} · {plan.visual_tokens:,} visual tokens"
            f" · {plan.fps:.2f} fps")


def stage_text(event: ProgressEvent | None, state: str) -> str:
    """Headline for the progress area: the stage name and its own message."""
    if event is None:
        return STAGE_LABELS["queued"] if state == "queued" else "Starting"
    label = STAGE_LABELS.get(event.stage, event.stage.replace("_", " ").capitalize())
    if event.stage in ("decoding", "grounding_frames", "rendering") and event.total > 0:
        return f"{label}: frame {event.done}/{event.total}"
    message = event.message.strip()
    if not message or message.lower() == label.lower():
        return label
    if message.lower().startswith(label.split()[0].lower()):
        return message[:1].upper() + message[1:]  # "sampling 8 frames…" says it already
    return f"{label}: {message}"


def progress_fraction(events: Iterable[ProgressEvent], state: str) -> float:
    """Overall 0..1 progress: stages before the frame loop count little, frames most."""
    if state == "done":
        return 1.0
    weights = {"probe": 0.02, "sampling": 0.04, "loading_model": 0.08, "decoding": 0.10,
               "preprocess": 0.25, "generating": 0.30, "grounding_frames": 0.25,
               "tracking": 0.95, "rendering": 0.96, "done": 1.0}
    last = None
    for ev in events:
        last = ev
    if last is None:
        return 0.0
    base = weights.get(last.stage, 0.0)
    frac = last.fraction
    if frac is None:
        return base
    span = {"decoding": 0.15, "grounding_frames": 0.70, "generating": 0.60,
            "rendering": 0.04}.get(last.stage, 0.0)
    return min(1.0, base + span * frac)


def root_example(name: str = "") -> str:
    """A path under the first media root (``…/media/clip.mp4``) for a box's placeholder: an
    example a user may really type (``/data/videos`` was not a root)."""
    from chord_core.media.roots import configured_roots

    roots = configured_roots()
    if not roots:
        return ""
    return str(roots[0] / name) if name else str(roots[0])


def sentence_start(text: str) -> str:
    """``text`` with a capital first letter, unless it starts with a name that must stay as
    written: a file name or path (``notavideo.mp4 is not…`` must not become ``Notavideo.mp4``),
    an id, a quoted text."""
    first = text.split(" ", 1)[0].rstrip(":,;.!?")
    if not first.isalpha():
        return text
    return text[:1].upper() + text[1:]


def summary_line(result: Any) -> str:
    """The one-line grounding outcome, said plainly, e.g.
    ``“the red car” appears in 2 segments: 3.5–7.0 s, 12.0–15.5 s`` or
    ``“the red car” not found in 60 sampled frames``."""
    from chord_core.analysis.tracking import summary_line as core_summary

    if getattr(result, "task", "") == "entail":
        return verdict_line(result)
    target = result.query or "the target"
    return f"“{target}” {core_summary(list(result.segments), result.sampling.num_frames)}"


VERDICT_WORDS = {"entailment": "holds", "contradiction": "is contradicted",
                 "neutral": "cannot be told from the clip"}


def verdict_line(result: Any) -> str:
    """A statement check said plainly: ``“a door opens” holds (p = 0.91, first at 3.5 s)``."""
    ent = result.entailment
    if ent is None:
        return "No statement was checked."
    p = ent.probabilities.get(ent.verdict, 0.0)
    where = ""
    if ent.verdict == "entailment" and ent.supporting_s and len(ent.frames) > 1:
        where = f", first at {ent.supporting_s[0]:.1f} s"
    return f"“{ent.statement}” {VERDICT_WORDS.get(ent.verdict, ent.verdict)} (p = {p:.2f}{where})"


def detections_rows(result: Any) -> list[dict[str, Any]]:
    """Table rows for the detections table (t, normalised box, label, track)."""
    scored = any(d.score is not None for d in result.detections)
    rows = []
    for d in result.detections:
        x1, y1, x2, y2 = d.bbox
        row = {"t (s)": round(d.t_s, 3), "frame": d.frame_index,
               "x1": round(x1, 4), "y1": round(y1, 4), "x2": round(x2, 4),
               "y2": round(y2, 4), "label": d.label,
               "track": d.track_id if d.track_id >= 0 else None}
        if scored:
            row["score"] = d.score
        rows.append(row)
    return rows
