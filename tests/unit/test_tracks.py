"""Linking sampled-frame detections into tracks, segments, summaries and interpolation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chord_core.analysis.tracking import (
    BoxTimeline,
    default_max_gap,
    interpolate_at,
    iou,
    link_tracks,
    segments_from_tracks,
    summary_line,
)
from chord_core.types import Detection, Segment

STEP = 0.5  # sampling interval (2 fps)
GAP = default_max_gap(STEP)  # 0.75 s


def det(t: float, x: float, y: float = 0.4, size: float = 0.15, label: str = "dog",
        track_id: int = -1) -> Detection:
    """A square box with its left/top corner at (x, y), on a 1000×1000 frame."""
    bbox = (x, y, x + size, y + size)
    return Detection(t_s=t, frame_index=round(t * 30), bbox=bbox,
                     bbox_px=tuple(round(c * 1000) for c in bbox), label=label,
                     track_id=track_id)


def ids_by_label(dets: tuple[Detection, ...]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for d in dets:
        out.setdefault(d.label, set()).add(d.track_id)
    return out


def test_default_max_gap() -> None:
    assert default_max_gap(0.5) == pytest.approx(0.75)
    assert default_max_gap(2.0) == pytest.approx(3.0)


@pytest.mark.parametrize("a, b, expected", [
    ((0, 0, 1, 1), (0, 0, 1, 1), 1.0),
    ((0, 0, 1, 1), (0.5, 0, 1.5, 1), 1 / 3),
    ((0, 0, 1, 1), (2, 2, 3, 3), 0.0),
    ((0, 0, 0, 1), (0, 0, 0, 1), 0.0),
], ids=["same", "half-overlap", "disjoint", "empty"])
def test_iou(a: tuple, b: tuple, expected: float) -> None:
    assert iou(a, b) == pytest.approx(expected)


def test_one_object_continuous() -> None:
    dets = [det(i * STEP, 0.1 + 0.02 * i) for i in range(10)]
    linked, tracks = link_tracks(dets, max_gap_s=GAP)
    assert {d.track_id for d in linked} == {1}
    assert len(tracks) == 1
    t = tracks[0]
    assert (t.track_id, t.label, t.start_s, t.end_s, t.num_detections) == (1, "dog", 0.0, 4.5, 10)
    segs = segments_from_tracks(linked, tracks, max_gap_s=GAP)
    assert segs == (Segment(1, 0.0, 4.5, "dog"),)


def test_fast_motion_is_followed_by_velocity() -> None:
    """0.5 fps sampling: the box speeds up to jumps over the distance gate (0.34 of the frame)
    with no overlap between samples; constant-velocity prediction keeps one track."""
    dets = [det(i * 2.0, x, size=0.1) for i, x in enumerate((0.02, 0.30, 0.64, 0.88))]
    linked, tracks = link_tracks(dets, max_gap_s=default_max_gap(2.0), relink=False)
    assert [d.track_id for d in linked] == [1, 1, 1, 1]


def test_leaving_and_returning_gives_two_segments() -> None:
    first = [det(i * STEP, 0.1) for i in range(5)]            # 0.0 .. 2.0
    second = [det(5.0 + i * STEP, 0.6) for i in range(5)]     # 5.0 .. 7.0
    linked, tracks = link_tracks(first + second, max_gap_s=GAP)
    assert len(tracks) == 1 and tracks[0].num_detections == 10
    segs = segments_from_tracks(linked, tracks, max_gap_s=GAP)
    assert [(s.track_id, s.start_s, s.end_s) for s in segs] == [(1, 0.0, 2.0), (1, 5.0, 7.0)]


def test_returning_without_relink_gets_new_id() -> None:
    dets = [det(i * STEP, 0.1) for i in range(3)] + [det(5.0 + i * STEP, 0.1) for i in range(3)]
    linked, tracks = link_tracks(dets, max_gap_s=GAP, relink=False)
    assert [d.track_id for d in linked] == [1, 1, 1, 2, 2, 2]
    segs = segments_from_tracks(linked, tracks, max_gap_s=GAP)
    assert [(s.track_id, s.start_s, s.end_s) for s in segs] == [(1, 0.0, 1.0), (2, 5.0, 6.0)]


@pytest.mark.parametrize("b_first", [False, True], ids=["a-listed-first", "b-listed-first"])
def test_two_objects_crossing_keep_their_ids(b_first: bool) -> None:
    """A moves right, B moves left on the same line; at the middle sample their boxes are
    identical, so only their motion tells them apart afterwards."""
    dets = []
    for i in range(9):
        a = det(i * STEP, 0.05 + 0.1 * i, y=0.40, label="person")
        b = det(i * STEP, 0.85 - 0.1 * i, y=0.40, label="person")
        a = replace(a, score=0.0)  # marks A's detections (the linker ignores scores)
        pair = [b, a] if b_first else [a, b]
        dets.extend(pair)
    linked, tracks = link_tracks(dets, max_gap_s=GAP)
    a_ids = {d.track_id for d in linked if d.score == 0.0}
    b_ids = {d.track_id for d in linked if d.score is None}
    assert len(a_ids) == 1 and len(b_ids) == 1 and a_ids != b_ids
    assert sorted(t.track_id for t in tracks) == [1, 2]


@pytest.mark.parametrize("gap, n_segments", [(0.5, 1), (0.74, 1), (0.75, 1), (0.76, 2),
                                             (1.0, 2)],
                         ids=["no-gap", "within", "at-limit", "just-over", "missed-frame"])
def test_gap_tolerance(gap: float, n_segments: int) -> None:
    times = [0.0, 0.5, 1.0, 1.0 + gap, 1.5 + gap]
    dets = [det(t, 0.3) for t in times]
    linked, tracks = link_tracks(dets, max_gap_s=GAP)
    assert len(tracks) == 1  # same place, same label: relinked across a longer gap
    segs = segments_from_tracks(linked, tracks, max_gap_s=GAP)
    assert len(segs) == n_segments
    assert segs[0].start_s == 0.0 and segs[-1].end_s == pytest.approx(1.5 + gap)


def test_label_mismatch_makes_separate_tracks() -> None:
    dets = []
    for i in range(4):
        dets.append(det(i * STEP, 0.3, label="dog"))
        dets.append(det(i * STEP, 0.31, label="Cat"))
    linked, tracks = link_tracks(dets, max_gap_s=GAP)
    by = ids_by_label(linked)
    assert by == {"dog": {1}, "Cat": {2}}
    assert [(t.track_id, t.label) for t in tracks] == [(1, "dog"), (2, "Cat")]


def test_labels_compare_case_and_space_insensitively_and_empty_is_compatible() -> None:
    dets = [det(0.0, 0.3, label="red car"), det(0.5, 0.31, label="Red  Car"),
            det(1.0, 0.32, label="")]
    linked, tracks = link_tracks(dets, max_gap_s=GAP)
    assert [d.track_id for d in linked] == [1, 1, 1]
    assert tracks[0].label == "red car"


def test_new_object_next_to_present_one_gets_its_own_id() -> None:
    dets = [det(0.0, 0.1), det(0.5, 0.1), det(0.5, 0.7), det(1.0, 0.1), det(1.0, 0.7)]
    linked, _ = link_tracks(dets, max_gap_s=GAP)
    assert [d.track_id for d in linked] == [1, 1, 2, 1, 2]


def test_far_jump_of_present_object_is_not_relinked() -> None:
    """A box far away while the old track is still within the gap is a new object."""
    dets = [det(0.0, 0.05), det(0.5, 0.8)]
    linked, tracks = link_tracks(dets, max_gap_s=GAP)
    assert [d.track_id for d in linked] == [1, 2]


def test_ids_follow_first_appearance_and_output_is_time_ordered() -> None:
    dets = [det(1.0, 0.6, label="cat"), det(0.0, 0.1, label="dog"), det(0.5, 0.1, label="dog"),
            det(1.0, 0.1, label="dog")]
    linked, tracks = link_tracks(dets, max_gap_s=GAP)
    assert [d.t_s for d in linked] == sorted(d.t_s for d in linked)
    assert [(t.track_id, t.label, t.start_s) for t in tracks] == [(1, "dog", 0.0),
                                                                  (2, "cat", 1.0)]


def test_empty_input() -> None:
    assert link_tracks([], max_gap_s=GAP) == ((), ())
    assert segments_from_tracks([], [], max_gap_s=GAP) == ()


def test_same_frame_detections_never_share_a_track() -> None:
    dets = [det(0.0, 0.3), det(0.0, 0.3), det(0.5, 0.3), det(0.5, 0.3)]
    linked, tracks = link_tracks(dets, max_gap_s=GAP)
    for t in (0.0, 0.5):
        assert len({d.track_id for d in linked if d.t_s == t}) == 2
    assert len(tracks) == 2


# ── segments ─────────────────────────────────────────────────────────────────────────────────

def test_single_detection_segment_has_zero_length() -> None:
    linked, tracks = link_tracks([det(3.0, 0.2)], max_gap_s=GAP)
    assert segments_from_tracks(linked, tracks, max_gap_s=GAP) == (Segment(1, 3.0, 3.0, "dog"),)


def test_segments_sorted_by_start_and_clipped_to_duration() -> None:
    dets = [det(2.0, 0.1, label="a"), det(2.5, 0.1, label="a"),
            det(0.0, 0.7, label="b"), det(0.5, 0.7, label="b"), det(9.5, 0.7, label="b")]
    linked, tracks = link_tracks(dets, max_gap_s=GAP, relink=False)
    segs = segments_from_tracks(linked, tracks, max_gap_s=GAP, duration_s=9.2)
    assert [(s.label, s.start_s, s.end_s) for s in segs] == [("b", 0.0, 0.5), ("a", 2.0, 2.5),
                                                             ("b", 9.2, 9.2)]


def test_segments_ignore_unlinked_detections() -> None:
    linked, tracks = link_tracks([det(0.0, 0.1)], max_gap_s=GAP)
    extra = linked + (det(1.0, 0.5),)  # track_id -1
    assert len(segments_from_tracks(extra, tracks, max_gap_s=GAP)) == 1


# ── summary ──────────────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("segments, frames, expected", [
    ([], 60, "not found in 60 sampled frames"),
    ([], None, "not found"),
    ([Segment(1, 3.5, 7.0), Segment(1, 12.0, 15.5)], 60,
     "appears in 2 segments: 3.5–7.0 s, 12.0–15.5 s"),
    ([Segment(1, 4.0, 4.0)], 60, "appears in 1 segment: 4.0 s"),
    ([Segment(2, 5.0, 9.0), Segment(1, 3.5, 7.0)], 60,
     "appears in 1 segment: 3.5–9.0 s (2 tracks)"),
], ids=["none", "none-no-count", "two", "single-instant", "overlapping-tracks-merged"])
def test_summary_line(segments: list[Segment], frames: int | None, expected: str) -> None:
    assert summary_line(segments, frames) == expected


# ── interpolation ────────────────────────────────────────────────────────────────────────────

def two_point_track(gap: float = 1.0) -> list[Detection]:
    a = Detection(1.0, 30, (0.1, 0.1, 0.3, 0.3), (100, 100, 300, 300), "dog", 1)
    b = Detection(1.0 + gap, 60, (0.3, 0.1, 0.5, 0.5), (300, 100, 500, 500), "dog", 1)
    return [a, b]


def test_interpolate_midpoint_is_exact() -> None:
    (box,) = interpolate_at(two_point_track(), 1.5, max_gap_s=1.5, frame_index=45)
    assert box.bbox == pytest.approx((0.2, 0.1, 0.4, 0.4), abs=1e-12)
    assert box.bbox_px == (200, 100, 400, 400)
    assert (box.interpolated, box.track_id, box.label, box.frame_index, box.t_s) == (
        True, 1, "dog", 45, 1.5)


def test_interpolate_quarter() -> None:
    (box,) = interpolate_at(two_point_track(), 1.25, max_gap_s=1.5)
    assert box.bbox == pytest.approx((0.15, 0.1, 0.35, 0.35))


@pytest.mark.parametrize("t", [1.0, 1.0 + 0.015, 2.0 - 0.015],
                         ids=["exact", "within-half-frame-after", "within-half-frame-before"])
def test_interpolate_snaps_to_detection(t: float) -> None:
    dets = two_point_track()
    (box,) = interpolate_at(dets, t, max_gap_s=1.5, snap_s=1 / 60)
    assert box in dets and not box.interpolated


@pytest.mark.parametrize("t", [0.5, 2.5, 0.999], ids=["before", "after", "just-before"])
def test_nothing_outside_the_track(t: float) -> None:
    assert interpolate_at(two_point_track(), t, max_gap_s=1.5, snap_s=1e-6) == []


def test_no_interpolation_across_a_gap_over_tolerance() -> None:
    assert interpolate_at(two_point_track(gap=2.0), 2.0, max_gap_s=1.5) == []


def test_timeline_several_tracks_and_unlinked() -> None:
    dets = two_point_track() + [
        Detection(1.0, 30, (0.6, 0.6, 0.8, 0.8), (600, 600, 800, 800), "cat", 2),
        Detection(2.0, 60, (0.6, 0.6, 0.8, 0.8), (600, 600, 800, 800), "cat", 2),
        Detection(1.5, 45, (0.0, 0.0, 0.1, 0.1), (0, 0, 100, 100), "ball", -1),
        Detection(1.6, 48, (0.0, 0.0, 0.1, 0.1), (0, 0, 100, 100), "ball", -1),
    ]
    timeline = BoxTimeline(dets, max_gap_s=1.5, snap_s=0.01)
    at = timeline.at(1.5)
    assert sorted(d.label for d in at) == ["ball", "cat", "dog"]
    assert [d.label for d in timeline.at(1.55)] == ["dog", "cat"]  # unlinked: never interpolated
