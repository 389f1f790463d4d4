"""Long-video mode without a model: scene cuts, chunks, chapter grouping, joins, exports, CLI
errors. Clips are synthetic H.264 made here with known cuts and known frame times."""

from __future__ import annotations

import threading
import time

import pytest

from chord_core.errors import ConfigError
from chord_core.longvideo import prompts as P
from chord_core.longvideo.chapters import group_chapters
from chord_core.longvideo.chunks import Chunk, make_chunks, range_plan, slice_plan
from chord_core.longvideo.doc import Chapter, ChaptersDoc
from chord_core.longvideo.exports import clean_line, to_markdown, to_srt, to_vtt
from chord_core.longvideo.ground import join_chunks
from chord_core.longvideo.scenes import Cut, find_cuts
from chord_core.longvideo.settings import LongVideoSettings, settings_from_env
from chord_core.longvideo.stream import index_at, stream_frames
from chord_core.media.probe import probe
from chord_core.testing.scenes import even_times, make_scene_clip, uneven_times
from chord_core.types import (
    Detection,
    ModelInfo,
    Result,
    SamplingPlan,
    Timing,
    VideoInfo,
)

pytest.importorskip("av")

SMALL = LongVideoSettings(chunk_s=4, min_chunk_s=2, max_chunk_s=10, overlap_s=0.5,
                          cuts="scene")


@pytest.fixture(scope="module")
def cut_clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("lv-units")
    return {"even": make_scene_clip(d / "even.mp4", [37, 90], even_times(130, 10.0)),
            "uneven": make_scene_clip(d / "uneven.mp4", [37, 90], uneven_times(130, 10.0)),
            "none": make_scene_clip(d / "none.mp4", [], even_times(100, 10.0))}


@pytest.mark.parametrize("kind", ["even", "uneven"], ids=["constant-rate", "uneven-times"])
def test_scene_cuts_are_found_at_their_frames_and_container_times(cut_clips, kind) -> None:
    clip = cut_clips[kind]
    info = probe(clip.path)
    scan = find_cuts(info, SMALL)
    assert scan.mode == "scene" and scan.frames_examined == 130
    assert [c.frame_index for c in scan.cuts] == [37, 90]
    assert [c.t_s for c in scan.cuts] == pytest.approx([clip.times_s[37], clip.times_s[90]],
                                                       abs=1e-6)
    chunks = make_chunks(info, scan.cuts, SMALL)
    assert [c.first_frame for c in chunks] == [0, 37, 90]
    assert [c.start_s for c in chunks] == pytest.approx([0.0, clip.times_s[37],
                                                         clip.times_s[90]], abs=1e-6)
    if kind == "uneven":  # an average rate would put the cut elsewhere
        assert abs(37 / info.fps - clip.times_s[37]) > 0.03


def test_keyframe_scan_lands_on_the_first_keyframe_after_a_cut(cut_clips) -> None:
    info = probe(cut_clips["even"].path)
    scan = find_cuts(info, LongVideoSettings(cuts="keyframes"))
    assert scan.mode == "keyframes" and scan.frames_examined < 20  # gop 12: 11 keyframes
    found = [c.frame_index for c in scan.cuts]
    assert len(found) == 2 and 37 <= found[0] < 37 + 12 and 90 <= found[1] < 90 + 12


def test_no_cuts_gives_fixed_windows_with_overlap(cut_clips) -> None:
    info = probe(cut_clips["none"].path)
    scan = find_cuts(info, SMALL)
    assert scan.cuts == ()
    chunks = make_chunks(info, scan.cuts, SMALL)
    assert [c.first_frame for c in chunks] == [0, 33, 67]  # 10 s in windows of ~4 s
    assert [c.end_frame for c in chunks] == [33, 67, 100]
    assert chunks[1].read_first == 28 and chunks[0].read_first == 0  # 0.5 s overlap
    assert chunks[-1].end_s == pytest.approx(info.duration_s)


def _cfr_info(frames: int, fps: float = 10.0) -> VideoInfo:
    return VideoInfo(path="x.mp4", duration_s=frames / fps, fps=fps, frame_count=frames,
                     width=640, height=360, timeline=((0, 0.0, 1 / fps),))


def test_short_scenes_merge_and_long_scenes_split() -> None:
    info = _cfr_info(3000)  # 300 s
    cuts = [Cut(100, 10.0, 0.9), Cut(105, 10.5, 0.5), Cut(2000, 200.0, 0.8)]
    s = LongVideoSettings(chunk_s=60, min_chunk_s=10, max_chunk_s=180)
    chunks = make_chunks(info, cuts, s)
    firsts = [c.first_frame for c in chunks]
    assert 105 not in firsts and 100 in firsts and 2000 in firsts  # the 0.5 s flash merged
    assert all(c.duration_s <= 180 + 1e-6 for c in chunks)
    assert [c.cut for c in chunks if c.first_frame in (100, 2000)] == [0.9, 0.8]
    assert all(a.end_frame == b.first_frame for a, b in zip(chunks, chunks[1:]))
    assert chunks[-1].end_frame == 3000


def test_chunk_plans_stay_inside_their_chunk() -> None:
    from chord_core.config import SamplingConfig

    info = _cfr_info(600)
    plan = range_plan(info, 120, 240, "describe", SamplingConfig(fps=1.0, max_frames=8))
    assert plan.frame_indices[0] == 120 and plan.frame_indices[-1] == 239
    assert plan.num_frames == 8 and plan.timestamps_s[0] == pytest.approx(12.0)
    pieces = slice_plan(range_plan(info, 0, 600, "ground", SamplingConfig(fps=1.0,
                                                                          max_frames=100)), 16)
    assert [p.num_frames for p in pieces] == [16, 16, 16, 12]


def test_group_chapters_cuts_at_the_strongest_scene_changes() -> None:
    starts = [0, 60, 120, 180, 240, 300, 360, 420, 480, 540]
    cuts = [0, 0, 0.9, 0, 0, 0.1, 0, 0.95, 0, 0]
    chunks = [Chunk(i, i * 600, (i + 1) * 600, float(s), float(s + 60), c)
              for i, (s, c) in enumerate(zip(starts, cuts))]
    groups = group_chapters(chunks, ["same words here"] * 10,
                            LongVideoSettings(chapter_s=200), 600.0)
    assert [g[0] for g in groups] == [0, 2, 7]
    assert sum(groups, []) == list(range(10))


@pytest.mark.parametrize("text, title, summary, warned", [
    ('{"title": "A dog runs", "summary": "It runs fast."}', "A dog runs", "It runs fast.", 0),
    ('```json\n{"title": "Rain", "summary": "Wet street."}\n```', "Rain", "Wet street.", 0),
    ("A man walks. Then he sits down.", "A man walks", "A man walks. Then he sits down.", 2),
    ('{"summary": "Only a summary here."}', "Only a summary here", "Only a summary here.", 1),
    ("", "Untitled", "(no summary)", 2),
], ids=["json", "fenced", "plain-text", "no-title", "empty"])
def test_reduce_answers_are_read_tolerantly(text, title, summary, warned) -> None:
    got_title, got_summary, warnings = P.parse_title_summary(text, "chapter 1")
    assert (got_title, got_summary, len(warnings)) == (title, summary, warned)


def test_prompts_fit_the_query_limit() -> None:
    from chord_core.config import MAX_QUERY_CHARS

    notes = [(i * 60.0, i * 60.0 + 60, "word " * 400) for i in range(20)]
    assert len(P.chapter_prompt(0, 1200, notes)) <= MAX_QUERY_CHARS
    assert P.chapter_prompt(0, 1200, notes).count("\n- ") == 20  # shortened, none dropped


def _doc(chapters, test_model=True) -> ChaptersDoc:
    return ChaptersDoc(video={"path": "/v/clip.mp4", "duration_s": 3725.5},
                       model={"id": "test", "test_model": test_model}, settings={}, scan={},
                       chunks=(), chunk_texts=(), chapters=tuple(chapters), summary="All.")


NASTY = "a\x00b\x07 --> c\n\n d [x](y) <b>é</b>"


def test_subtitle_exports_parse_with_real_readers() -> None:
    import srt
    import webvtt

    chapters = [Chapter(0, 0.0, 61.2345, 0, "Intro " + NASTY, "First\n\npart " + NASTY, (0,)),
                Chapter(1, 61.2345, 3599.9996, 612, "", "x", (1, 2)),
                Chapter(2, 3599.9996, 3725.5, 9000, "End", "", (3,))]
    doc = _doc(chapters)
    vtt = webvtt.from_string(to_vtt(doc), strict=True)
    subs = list(srt.parse(to_srt(doc)))
    assert len(vtt.captions) == len(subs) == 3

    def ms(ts) -> int:
        return ((ts.hours * 60 + ts.minutes) * 60 + ts.seconds) * 1000 + ts.milliseconds

    for cap, sub, ch in zip(vtt.captions, subs, chapters):
        want = (int(ch.start_s * 1000 + 0.5), int(ch.end_s * 1000 + 0.5))  # half up
        assert (ms(cap.start_time), ms(cap.end_time)) == want
        assert (sub.start.total_seconds() * 1000, sub.end.total_seconds() * 1000) == \
            pytest.approx(want)
        assert cap.lines[0] == sub.content.split("\n")[0]
        assert "-->" not in cap.text and "\x00" not in sub.content
    assert vtt.captions[1].lines[0] == "Chapter 2"  # an empty title gets a name
    assert clean_line(NASTY) == "a b → c d [x](y) <b>é</b>"
    md = to_markdown(doc)
    assert "random weights" in md and "1:02:05" in md and "### 2. Chapter 2" in md and "\\[x\\]\\(y\\)" in md


def _result(indices, boxes, track_ids) -> Result:
    info = _cfr_info(400)
    plan = SamplingPlan(task="ground", fps=1.0, frame_indices=tuple(indices),
                        timestamps_s=tuple(i / 10 for i in indices), input_wh=(448, 252),
                        visual_tokens=len(indices) * 144, tokens_per_frame=144)
    dets = tuple(Detection(i / 10, i, b, (0, 0, 1, 1), "car", t)
                 for i, b, t in zip(indices, boxes, track_ids))
    return Result(task="ground", query="car", video=info, sampling=plan,
                  model=ModelInfo("test", "float32", test_model=True), timing=Timing(decode_s=0.5, total_s=1.0),
                  detections=dets)


def test_tracks_join_across_chunk_boundaries() -> None:
    xs = [0.1 + 0.02 * k for k in range(12)]
    box = [(x, 0.4, x + 0.2, 0.6) for x in xs]
    frames = [k * 10 for k in range(12)]  # 1 fps on a 10 fps clip
    a = _result(frames[:6], box[:6], [1] * 6)
    b = _result(frames[5:], box[5:], [1] * 7)  # frame 50 grounded by both chunks
    joined = join_chunks(a.video, "car", [a, b])
    assert joined.sampling.frame_indices == tuple(frames)
    assert len(joined.detections) == 12  # the shared frame counted once
    assert [t.track_id for t in joined.tracks] == [1]
    assert [(s.start_s, s.end_s) for s in joined.segments] == [(0.0, 11.0)]
    assert joined.timing.total_s == 2 and joined.to_dict()["schema"] == "chord.result/v1"
    far = _result(frames[6:], [(0.9, 0.0, 1.0, 0.1)] * 6, [1] * 6)  # another object
    split = join_chunks(a.video, "car", [a, far])
    assert len(split.tracks) == 2


def test_stream_yields_container_times_and_stops_early(cut_clips) -> None:
    clip = cut_clips["uneven"]
    info = probe(clip.path)
    got = [(i, t) for i, t, rgb in stream_frames(info, (32, 18), maxsize=2)]
    assert [i for i, _ in got] == list(range(130))
    assert [t for _, t in got] == pytest.approx(list(clip.times_s), abs=1e-6)
    assert index_at(info, clip.times_s[50] + 0.001) == 50
    before = threading.active_count()
    gen = stream_frames(info, (32, 18), maxsize=2)
    next(gen)
    time.sleep(0.2)
    gen.close()  # the producer stops though the clip is not finished
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


@pytest.mark.parametrize("kwargs", [
    {"chunk_s": 0.5}, {"cuts": "magic"}, {"threshold_s": -1.0}, {"overlap_s": 50.0},
    {"max_new_tokens": 16}], ids=["chunk", "cuts", "threshold", "overlap", "tokens"])
def test_bad_settings_say_what_to_do(kwargs) -> None:
    with pytest.raises(ConfigError) as err:
        LongVideoSettings().with_overrides(**kwargs)
    assert err.value.hint


def test_threshold_from_env_and_flag() -> None:
    assert settings_from_env({"CHORD_LONG_VIDEO_S": "120"}).threshold_s == 120
    s = settings_from_env({"CHORD_LONG_VIDEO_S": "120"}, threshold_s=30.0, chunk_s=5.0)
    assert (s.threshold_s, s.chunk_s, s.min_chunk_s) == (30.0, 5.0, 5.0)
    assert s.is_long(31) and not s.is_long(30)
    with pytest.raises(ConfigError):
        settings_from_env({"CHORD_LONG_VIDEO_S": "ten minutes"})


@pytest.mark.parametrize("argv, what", [
    (["chapters", "{missing}", "--in-process"], "missing.mp4"),
    (["chapters", "{clip}", "--chunk-s", "0", "--in-process"], "chunk length"),
    (["search", "{clip}", "   ", "--in-process"], "something to look for"),
    (["search", "{clip}", "a car", "--chapters", "{clip}", "--in-process", "--model", "test"],
     "chapters file"),
    (["ground-long", "{clip}", "", "--in-process"], "target"),
], ids=["missing-file", "bad-chunk", "empty-query", "bad-chapters-file", "empty-target"])
def test_cli_bad_input_is_one_error_and_one_hint(cut_clips, tmp_path, capsys, argv, what
                                                 ) -> None:
    from chord_core.__main__ import main

    subs = {"{missing}": str(tmp_path / "missing.mp4"), "{clip}": str(cut_clips["even"].path)}
    code = main([subs.get(a, a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    lines = [ln for ln in err if ln.startswith(("error:", "hint:"))]
    assert [ln.split(":")[0] for ln in lines] == ["error", "hint"]
    assert what in lines[0] and "Traceback" not in "\n".join(err)
