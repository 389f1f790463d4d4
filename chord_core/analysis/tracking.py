"""Detections → tracks → segments, and boxes at any time for rendering.

    link_tracks (ids over time) ─▶ segments_from_tracks (visible intervals) ─▶ summary_line
    BoxTimeline / interpolate_at (a box for any video frame, for rendering)

Works on :class:`Detection` (normalised [x1, y1, x2, y2] boxes with times); the model-text
parser that makes them is :mod:`chord_core.analysis.grounding`.

Linking — why not ByteTrack. ``sv.ByteTrack`` was removed in supervision 0.31 (the version
installed) in favour of ``ByteTrackTracker`` in Roboflow's separate ``trackers`` package (not a
dependency). Either way ByteTrack splits detections by confidence and drives a Kalman filter
tuned to dense frame rates (its lost-track buffer counts frames). Here the model gives no
scores and frames are sampled at 0.5–2 fps, so objects move far between samples. Instead:
per sampled frame, Hungarian assignment (scipy ``linear_sum_assignment``) of detections to
tracks seen within ``max_gap_s``, cost = (1 − IoU) + centre distance against a constant-velocity
prediction, gated by IoU or centre distance, labels compatible (equal or one empty). Then a
detection still unmatched may resume a track lost for longer than ``max_gap_s`` that has the
same label (nearest first): without appearance features a returning object is re-identified
by its label, so one target that leaves and comes back keeps its id and gets two segments.
Tracks seen within the gap are never taken this way (a new object next to a present one gets
its own id). With several same-label objects leaving and entering, ids can be swapped; pass
``relink=False`` to give every return a new id instead.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

from chord_core.types import Detection, Segment, Track

Box = tuple[float, float, float, float]  # normalised [x1, y1, x2, y2]
MAX_CENTER_DISTANCE = 0.3


def _round(value: float) -> int:
    """Half-up rounding to pixels, the same rule as :func:`chord_core.analysis.grounding.denormalise`."""
    return math.floor(value + 0.5)


# ── linking ──────────────────────────────────────────────────────────────────────────────────

def default_max_gap(sample_interval_s: float) -> float:
    """Largest gap still counted as continuous: 1.5 sampling intervals — absorbs timestamp
    jitter of uneven sampling; one missed sample (a gap of 2 intervals) splits a segment."""
    return 1.5 * sample_interval_s


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two [x1, y1, x2, y2] boxes (0 when disjoint or empty)."""
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _centre_distance(a: Sequence[float], b: Sequence[float]) -> float:
    return math.hypot((a[0] + a[2] - b[0] - b[2]) / 2, (a[1] + a[3] - b[1] - b[3]) / 2)


def _label_key(label: str) -> str:
    return " ".join(label.lower().split())


@dataclass
class _TrackState:
    track_id: int
    history: list[Detection]

    @property
    def last(self) -> Detection:
        return self.history[-1]

    def predict(self, t_s: float) -> Box:
        """Last box moved at the velocity of the last two detections (constant velocity)."""
        last = self.last
        if len(self.history) < 2 or last.t_s <= self.history[-2].t_s:
            return last.bbox
        prev = self.history[-2]
        k = (t_s - last.t_s) / (last.t_s - prev.t_s)
        dx = ((last.bbox[0] + last.bbox[2]) - (prev.bbox[0] + prev.bbox[2])) / 2 * k
        dy = ((last.bbox[1] + last.bbox[3]) - (prev.bbox[1] + prev.bbox[3])) / 2 * k
        b = last.bbox
        return (b[0] + dx, b[1] + dy, b[2] + dx, b[3] + dy)


def _assign(cost: list[list[float]]) -> list[tuple[int, int]]:
    """Hungarian assignment on a (rows × cols) cost with ``inf`` = forbidden."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    if not cost or not cost[0]:
        return []
    matrix = np.array(cost, dtype=float)
    allowed = np.isfinite(matrix)
    if not allowed.any():
        return []
    matrix[~allowed] = matrix[allowed].max() * 10 + 1e6
    rows, cols = linear_sum_assignment(matrix)
    return [(int(r), int(c)) for r, c in zip(rows, cols) if allowed[r, c]]


def _motion_cost(track: _TrackState, det: Detection, iou_threshold: float,
                 max_center_distance: float) -> float:
    a, b = _label_key(track.last.label), _label_key(det.label)
    if a and b and a != b:
        return math.inf
    pred = track.predict(det.t_s)
    overlap = iou(pred, det.bbox)
    dist = _centre_distance(pred, det.bbox)
    if overlap < iou_threshold and dist > max_center_distance:
        return math.inf
    return (1.0 - overlap) + dist


def _relink_cost(track: _TrackState, det: Detection) -> float:
    if _label_key(track.last.label) != _label_key(det.label):
        return math.inf
    return _centre_distance(track.last.bbox, det.bbox)


def _frames(detections: Sequence[Detection]) -> list[list[Detection]]:
    """Detections grouped by sampled frame, in time order (stable within a frame)."""
    ordered = sorted(detections, key=lambda d: d.t_s)
    groups: list[list[Detection]] = []
    for det in ordered:
        if groups and (groups[-1][0].t_s, groups[-1][0].frame_index) == (det.t_s,
                                                                         det.frame_index):
            groups[-1].append(det)
        else:
            groups.append([det])
    return groups


def link_tracks(detections: Sequence[Detection], *, max_gap_s: float, iou_threshold: float = 0.1,
                max_center_distance: float = MAX_CENTER_DISTANCE, relink: bool = True,
                ) -> tuple[tuple[Detection, ...], tuple[Track, ...]]:
    """Give every detection a ``track_id`` (1, 2, … by first appearance); see module docstring.

    Returns the detections in time order with ids set, and one ``Track`` per id.
    """
    tracks: list[_TrackState] = []
    out: list[Detection] = []
    for frame in _frames(detections):
        t = frame[0].t_s
        active = [tr for tr in tracks if 0 < t - tr.last.t_s <= max_gap_s + 1e-9]
        cost = [[_motion_cost(tr, d, iou_threshold, max_center_distance) for tr in active]
                for d in frame]
        chosen = {r: active[c] for r, c in _assign(cost)}
        chosen.update(_unambiguous(frame, chosen, active))
        if relink:
            left = [i for i in range(len(frame)) if i not in chosen]
            free = [tr for tr in tracks if t - tr.last.t_s > max_gap_s + 1e-9]
            cost = [[_relink_cost(tr, frame[i]) for tr in free] for i in left]
            chosen.update({left[r]: free[c] for r, c in _assign(cost)})
        for i, det in enumerate(frame):
            state = chosen.get(i)
            if state is None:
                state = _TrackState(len(tracks) + 1, [])
                tracks.append(state)
            det = replace(det, track_id=state.track_id)
            state.history.append(det)
            out.append(det)
    return tuple(out), tuple(_track_summary(tr) for tr in tracks)


UNAMBIGUOUS_MAX_DISTANCE = 0.5


def _unambiguous(frame: Sequence[Detection], chosen: dict[int, _TrackState],
                 active: Sequence[_TrackState]) -> dict[int, _TrackState]:
    """Fast motion between sparse samples can exceed the motion gate. When a label has
    exactly one unmatched detection and exactly one unmatched active track, they are the
    same object: link them (no competitor to confuse it with) — unless the jump is so large
    (over ``UNAMBIGUOUS_MAX_DISTANCE`` of the frame) that a new object is likelier."""
    taken = {id(tr) for tr in chosen.values()}
    free_tracks = [tr for tr in active if id(tr) not in taken]
    free_dets = [i for i in range(len(frame)) if i not in chosen]
    links: dict[int, _TrackState] = {}
    for key in {_label_key(frame[i].label) for i in free_dets}:
        dets = [i for i in free_dets if _label_key(frame[i].label) == key]
        trs = [tr for tr in free_tracks if _label_key(tr.last.label) == key]
        if len(dets) == 1 and len(trs) == 1 and _centre_distance(
                trs[0].last.bbox, frame[dets[0]].bbox) <= UNAMBIGUOUS_MAX_DISTANCE:
            links[dets[0]] = trs[0]
    return links


def _track_summary(state: _TrackState) -> Track:
    counts = Counter(_label_key(d.label) for d in state.history)
    top = counts.most_common(1)[0][0]
    label = next(d.label for d in state.history if _label_key(d.label) == top)
    return Track(track_id=state.track_id, label=label, start_s=state.history[0].t_s,
                 end_s=state.history[-1].t_s, num_detections=len(state.history))


# ── segments ─────────────────────────────────────────────────────────────────────────────────

def segments_from_tracks(detections: Sequence[Detection], tracks: Sequence[Track], *,
                         max_gap_s: float, duration_s: float | None = None) -> tuple[Segment, ...]:
    """Per track, maximal runs of detections ≤ ``max_gap_s`` apart → [first, last] time.

    A run of one detection gives ``start_s == end_s`` (seen on one sampled frame; its true
    extent is unknown within ± one sampling interval). Times are clipped to [0, duration_s]
    when given. Detections of unknown tracks (id -1) are ignored. Sorted by start, then id.
    """
    times: dict[int, list[float]] = {tr.track_id: [] for tr in tracks}
    for det in detections:
        if det.track_id in times:
            times[det.track_id].append(det.t_s)
    segments = []
    for tr in tracks:
        ts = sorted(times[tr.track_id])
        run_start = 0
        for i in range(1, len(ts) + 1):
            if i == len(ts) or ts[i] - ts[i - 1] > max_gap_s + 1e-9:
                start, end = ts[run_start], ts[i - 1]
                if duration_s is not None:
                    start, end = (min(max(0.0, v), duration_s) for v in (start, end))
                segments.append(Segment(tr.track_id, start, end, tr.label))
                run_start = i
    return tuple(sorted(segments, key=lambda s: (s.start_s, s.track_id)))


def summary_line(segments: Sequence[Segment], num_frames: int | None = None) -> str:
    """One line for people: "appears in 2 segments: 3.5–7.0 s, 12.0–15.5 s" or
    "not found in 60 sampled frames". Overlapping segments of several tracks are merged."""
    if not segments:
        return f"not found in {num_frames} sampled frames" if num_frames is not None \
            else "not found"
    merged: list[list[float]] = []
    for seg in sorted(segments, key=lambda s: s.start_s):
        if merged and seg.start_s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], seg.end_s)
        else:
            merged.append([seg.start_s, seg.end_s])
    spans = ", ".join(f"{a:.1f} s" if a == b else f"{a:.1f}–{b:.1f} s" for a, b in merged)
    noun = "segment" if len(merged) == 1 else "segments"
    n_tracks = len({s.track_id for s in segments})
    extra = f" ({n_tracks} tracks)" if n_tracks > 1 else ""
    return f"appears in {len(merged)} {noun}: {spans}{extra}"


# ── boxes at any time (rendering) ────────────────────────────────────────────────────────────

class BoxTimeline:
    """Detections indexed by track, to ask for boxes at any time (every video frame).

    Within a track: the detection itself when ``t`` is within ``snap_s`` of it (half a video
    frame), else linear interpolation between the two surrounding detections when they are
    ≤ ``max_gap_s`` apart (``interpolated=True``), else nothing.
    """

    def __init__(self, detections: Sequence[Detection], *, max_gap_s: float,
                 snap_s: float = 1e-6) -> None:
        self.max_gap_s = max_gap_s
        self.snap_s = snap_s
        groups: dict[int, list[Detection]] = {}
        for n, det in enumerate(detections):
            key = det.track_id if det.track_id >= 1 else -1 - n  # unlinked: alone
            groups.setdefault(key, []).append(det)
        self._tracks = [sorted(g, key=lambda d: d.t_s) for _, g in sorted(groups.items())]
        self._times = [[d.t_s for d in g] for g in self._tracks]

    def at(self, t_s: float, *, frame_index: int = -1) -> list[Detection]:
        """Boxes visible at ``t_s``; interpolated ones get ``frame_index``."""
        found = []
        for dets, times in zip(self._tracks, self._times):
            i = bisect_left(times, t_s)
            near = [j for j in (i - 1, i) if 0 <= j < len(times)]
            best = min(near, key=lambda j: abs(times[j] - t_s), default=None)
            if best is not None and abs(times[best] - t_s) <= self.snap_s:
                found.append(dets[best])
            elif 0 < i < len(times) and times[i] - times[i - 1] <= self.max_gap_s + 1e-9:
                found.append(_lerp(dets[i - 1], dets[i], t_s, frame_index))
        return found


def _lerp(a: Detection, b: Detection, t_s: float, frame_index: int) -> Detection:
    k = (t_s - a.t_s) / (b.t_s - a.t_s)
    x1, y1, x2, y2 = (p + (q - p) * k for p, q in zip(a.bbox, b.bbox))
    p1, q1, p2, q2 = (_round(p + (q - p) * k) for p, q in zip(a.bbox_px, b.bbox_px))
    return Detection(t_s=t_s, frame_index=frame_index, bbox=(x1, y1, x2, y2),
                     bbox_px=(p1, q1, p2, q2), label=a.label, track_id=a.track_id,
                     interpolated=True)


def interpolate_at(detections: Sequence[Detection], t_s: float, *, max_gap_s: float,
                   snap_s: float = 1e-6, frame_index: int = -1) -> list[Detection]:
    """Boxes at time ``t_s`` (see ``BoxTimeline``); for many times build a BoxTimeline once."""
    return BoxTimeline(detections, max_gap_s=max_gap_s, snap_s=snap_s).at(
        t_s, frame_index=frame_index)
