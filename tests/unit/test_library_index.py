"""The library index over a real SQLite store: passages from stored results, ranked search,
filters, the watermark (indexed once, re-indexed when saved again), rebuild, deleted jobs."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from chord_core.errors import InputError
from chord_core.library.index import LibraryIndex
from chord_core.library.passages import result_passages
from chord_core.library.search import Filters, search
from chord_core.runtime.store import Store
from chord_core.testing.library_docs import result_doc, store_result


@pytest.fixture
def library(tmp_path: Path):
    store = Store(tmp_path / "chord.sqlite3")
    store_result(store, "j-fence", result_doc(
        "describe", "/media/site-a/cam2_north.mp4", duration_s=30.0,
        text="A man in a blue jacket climbs the fence near the loading dock.",
        times=[4.0, 8.0, 12.0]))
    store_result(store, "j-lecture", result_doc(
        "describe", "/media/lectures/week3.mp4", duration_s=600.0,
        text="The lecturer explains gradient descent on the whiteboard."))
    store_result(store, "j-fork", result_doc(
        "ground", "/media/site-a/dock/cam5.mp4", query="the forklift", duration_s=20.0,
        segments=[(2.0, 5.5), (11.0, 14.0)]))
    store_result(store, "j-gate", result_doc(
        "entail", "/media/site-b/gate.mp4", query="a person opens the gate",
        verdict="entailment", supporting_s=[3.0, 3.5, 4.0]))
    index = LibraryIndex(store.path)
    yield store, index
    index.close()
    store.close()


@pytest.mark.parametrize("q, source, kind, span", [
    ("fence", "j-fence", "description", (4.0, 12.0)),
    ("gradient descent", "j-lecture", "description", (0.0, 525.0)),  # the frames seen
    ("forklift", "j-fork", "target", (2.0, 5.5)),
    ("opens gate", "j-gate", "statement", (3.0, 4.0)),
    ("cam2", "j-fence", "description", (4.0, 12.0)),
], ids=["description-word", "two-words", "target-segment", "statement", "file-name"])
def test_search_finds_a_clip_by_a_word_of_its_stored_text(library, q, source, kind, span):
    _, index = library
    out = search(index, q)
    top = out["hits"][0]
    assert (top["source"], top["kind"]) == (source, kind)
    assert (top["start_s"], top["end_s"]) == span
    assert out["matched"] == "all"
    assert "[" in top["snippet"] or q == "cam2"  # a file-name hit marks nothing in the text


def test_grounding_gives_one_hit_per_segment_and_entail_carries_the_verdict(library):
    _, index = library
    spans = sorted((h["start_s"], h["end_s"]) for h in search(index, "forklift")["hits"])
    assert spans == [(2.0, 5.5), (11.0, 14.0)]
    assert search(index, "gate")["hits"][0]["verdict"] == "entailment"


@pytest.mark.parametrize("filters, expected", [
    (Filters(folder="/media/site-a"), {"j-fence", "j-fork"}),
    (Filters(folder="/media/site-a/dock"), {"j-fork"}),
    (Filters(folder="/media/site"), set()),  # a folder, not a string prefix
    (Filters(task="ground"), {"j-fork"}),
    (Filters(date_from="2000-01-01", date_to="2999-01-01"), {"j-fence", "j-fork", "j-gate",
                                                            "j-lecture"}),
    (Filters(date_to="2000-01-01"), set()),
], ids=["folder", "sub-folder", "not-a-prefix", "task", "date-range", "before-any"])
def test_filters(library, filters, expected):
    _, index = library
    out = search(index, "media", filters=filters, limit=50)  # every clip's folder has it
    assert {h["source"] for h in out["hits"]} == expected


def test_all_words_first_then_any(library):
    _, index = library
    out = search(index, "forklift whiteboard")
    assert out["matched"] == "any"
    assert {h["source"] for h in out["hits"]} == {"j-fork", "j-lecture"}


@pytest.mark.parametrize("q", ['"unbalanced', "NEAR(a b)", "fence*", "-fence", "a:b"],
                         ids=["quote", "near", "star", "minus", "colon"])
def test_query_syntax_is_never_an_error(library, q):
    _, index = library
    assert search(index, q)["schema"] == "chord.library-search/v1"


@pytest.mark.parametrize("q, kwargs, words", [
    ("", {}, "no words"), ("x" * 201, {}, "characters"), ("fence", {"limit": 0}, "limit"),
    ("fence", {"limit": 101}, "limit"),
    ("fence", {"filters": Filters(date_from="yesterday")}, "not a date"),
    ("fence", {"filters": Filters(task="dance")}, "unknown task"),
], ids=["empty", "too-long", "limit-0", "limit-big", "bad-date", "bad-task"])
def test_bad_input_is_a_clear_error(library, q, kwargs, words):
    _, index = library
    with pytest.raises(InputError, match=words) as err:
        search(index, q, **kwargs)
    assert err.value.hint


def test_new_results_are_indexed_once_and_a_saved_again_result_replaces(library):
    store, index = library
    assert index.sync() == 5  # the four results: 1 + 1 + 2 segments + 1
    assert index.sync() == 0
    before = index.stats()["passages"]
    store_result(store, "j-new", result_doc("describe", "/media/x/new.mp4",
                                            text="A yellow umbrella."))
    assert search(index, "umbrella")["hits"][0]["source"] == "j-new"
    assert index.sync() == 0 and index.stats()["passages"] == before + 1
    time.sleep(0.01)
    store.save_result("j-new", result_doc("describe", "/media/x/new.mp4", text="A red kite."))
    assert search(index, "umbrella")["hits"] == []
    assert search(index, "kite")["hits"][0]["source"] == "j-new"
    assert index.stats()["passages"] == before + 1


def test_unfinished_and_deleted_jobs_are_not_hits(library):
    store, index = library
    store.add_job("j-run", video_path="/media/x/run.mp4", task="describe")
    store.update_state("j-run", "running")
    store.save_result("j-run", result_doc("describe", "/media/x/run.mp4", text="pelican"),
                      state="cancelled")
    assert search(index, "pelican")["hits"] == []
    assert search(index, "climbs")["hits"]
    store.delete_job("j-fence")
    assert search(index, "climbs")["hits"] == []
    assert search(index, "climbs")["hits"] == []


def test_rebuild_reads_the_whole_store_again(library):
    store, index = library
    search(index, "fence")
    with sqlite3.connect(store.path) as conn:
        conn.execute("DELETE FROM library_fts")  # an index gone wrong
    assert search(index, "fence")["hits"] == []
    assert index.rebuild() == index.stats()["passages"] == 5
    assert search(index, "fence")["hits"][0]["source"] == "j-fence"


def test_a_ground_result_with_nothing_found_is_a_target_passage_marked_not_found():
    doc = result_doc("ground", "/m/a.mp4", query="a zebra", duration_s=7.0)
    [p] = result_passages({"job_id": "j"}, doc, 0.0)
    assert (p.kind, p.text, p.t0, p.t1, p.found) == ("target", "a zebra", 0.0, 7.0, False)


def test_a_chapters_run_is_indexed_with_its_chapter_times(library):
    store, index = library
    doc = {"schema": "chord.chapters/v1", "video": {"path": "/media/lectures/term.mp4",
                                                   "duration_s": 3600.0},
           "model": {"id": "test"}, "summary": "A term of optimisation lectures.",
           "chapters": [{"index": 0, "start_s": 0.0, "end_s": 900.0, "title": "Intro",
                         "summary": "Course overview."},
                        {"index": 1, "start_s": 900.0, "end_s": 1800.0,
                         "title": "Momentum", "summary": "The heavy-ball method."}]}
    store.add_batch("lvc-0123456789ab", "term.mp4")
    store.set_batch_summary("lvc-0123456789ab", {"document": doc, "progress": {}})
    store.add_batch("lvg-0123456789ab", "other.mp4")  # a grounding run: not chapters
    hits = search(index, "heavy ball")["hits"]
    assert [(h["source"], h["kind"], h["task"], h["start_s"], h["end_s"]) for h in hits] == [
        ("lvc-0123456789ab", "chapter", "chapters", 900.0, 1800.0)]
    assert index.sync(runs=True) == 0  # indexed once
    assert search(index, "optimisation", filters=Filters(task="chapters"))["hits"]


def test_a_chapters_run_kept_as_a_parent_job_is_indexed_once_when_done(library):
    from chord_core.runtime import store_parents

    store, index = library
    doc = {"schema": "chord.chapters/v1", "video": {"path": "/media/lectures/w9.mp4",
                                                   "duration_s": 1200.0},
           "model": {"id": "test"}, "summary": "Week nine.",
           "chapters": [{"index": 0, "start_s": 0.0, "end_s": 600.0, "title": "Adam",
                         "summary": "Adaptive moments."}]}
    run = "lvc-00000000abcd"
    store_parents.open_parent(store, run, video_path="/media/lectures/w9.mp4",
                              task="chapters", model="test", spec={"long_run": "chapters"})
    store_parents.set_summary(store, run, {"plan": {}})  # running: not yet searchable
    assert not search(index, "adaptive")["hits"]
    index._runs_checked = -1e9  # noqa: SLF001 — the next search looks for runs again
    store_parents.set_summary(store, run, {"document": doc}, state="done")
    hits = search(index, "adaptive moments")["hits"]
    assert [(h["source"], h["kind"], h["start_s"], h["end_s"]) for h in hits] == [
        (run, "chapter", 0.0, 600.0)]
    assert index.sync(runs=True) == 0  # indexed once


@pytest.mark.parametrize("lo, hi, tokens", [
    ("2026-12-01", "2026-12-01", ["d20261201"]),
    ("2026-11-30", "2026-12-31", ["d20261130", "m202612"]),
    ("2026-01-01", "2027-02-02", ["y2026", "m202701", "d20270201", "d20270202"]),
    ("2026-12-02", "2026-12-01", []),
], ids=["one-day", "day-and-month", "year-month-days", "empty"])
def test_a_date_range_is_the_fewest_tokens(lo, hi, tokens):
    from datetime import date

    from chord_core.library.search import date_tokens

    assert date_tokens(date.fromisoformat(lo), date.fromisoformat(hi)) == tokens


def test_past_the_rank_window_the_newest_matches_are_ranked(library, monkeypatch):
    import chord_core.library.search as library_search

    store, index = library
    for i in range(5):
        store_result(store, f"j-many-{i}", result_doc("describe", f"/m/w/{i}.mp4",
                                                      text=f"walrus number {i}"))
    monkeypatch.setattr(library_search, "RANK_WINDOW", 3)
    out = search(index, "walrus", limit=10)
    assert out["ranked"] == "the newest 3 matches"
    assert {h["source"] for h in out["hits"]} == {"j-many-2", "j-many-3", "j-many-4"}
    assert search(index, "walrus", limit=10, filters=Filters(folder="/m/w"))["ranked"] == \
        "the newest 3 matches"
    assert search(index, "fence")["ranked"] == "all"


def _walrus_store(store, texts):  # noqa: ANN001
    for i, text in enumerate(texts):
        store_result(store, f"j-w{i}", result_doc("describe", f"/m/w/{i}.mp4", text=text))


def test_within_the_window_every_match_is_ranked_by_bm25_whatever_its_age(library):
    store, index = library
    _walrus_store(store, ["walrus walrus on the rocks", *(
        f"a long quiet shot of the bay with one walrus far away number {i}" for i in range(4))])
    out = search(index, "walrus", limit=10)
    assert out["ranked"] == "all"
    assert [h["source"] for h in out["hits"]][0] == "j-w0"  # oldest, but the best match
    scores = [h["score"] for h in out["hits"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 5


def test_past_the_window_a_common_word_ranks_the_newest_few(library, monkeypatch):
    import chord_core.library.search as library_search

    store, index = library
    _walrus_store(store, [*(f"one walrus far away in a long shot of the bay {i}"
                            for i in range(4)), "walrus walrus", "walrus swimming in the bay"])
    monkeypatch.setattr(library_search, "RANK_WINDOW", 4)
    monkeypatch.setattr(library_search, "COMMON_WINDOW", 2)
    out = search(index, "walrus", limit=10)
    assert out["ranked"] == "the newest 2 matches"
    assert [h["source"] for h in out["hits"]] == ["j-w4", "j-w5"]  # best of the newest two


@pytest.mark.parametrize("q", ["walrus fence", "fence walrus"], ids=["common-first",
                                                                     "rare-first"])
def test_word_order_changes_nothing_but_the_query_echoed(library, q):
    store, index = library
    _walrus_store(store, [f"a walrus near the fence {i}" for i in range(3)] +
                  [f"a walrus in the bay {i}" for i in range(6)])
    out = search(index, q, limit=10)
    assert out["terms"] == q.split() and out["matched"] == "all"
    assert sorted(h["source"] for h in out["hits"]) == ["j-w0", "j-w1", "j-w2"]


@pytest.mark.parametrize("q, checked, expected", [
    ("night man", "man", ["j-c0", "j-c3"]),  # whole: not "woman", "manhole"; "man_made" is
    ("night cam2", "cam2", ["j-c0", "j-c1"]),  # a file name split at "_" as FTS5 splits it
    ("night cafe", "cafe", ["j-c2"]),  # accents folded, as remove_diacritics 2 folds them
    # a filter's token is no word (issue 40): "tdescribe" matches nothing, "night" alone does
    ("night tdescribe", "night", ["j-c0", "j-c1", "j-c2", "j-c3", "j-c4"]),
    ("night walrus", "night", ["j-c0", "j-c1", "j-c2", "j-c3", "j-c4"]),  # none: any
], ids=["whole-word", "underscore", "accent", "tags", "any-fallback"])
def test_a_very_common_word_checked_on_the_matches_finds_what_fts5_finds(
        library, monkeypatch, q, checked, expected):
    """Past COMMON_SHARE of the passages a word is checked on the other words' sparse
    matches instead of in FTS5's AND: the same hits, the same scores, in the same order."""
    import chord_core.library.search as library_search

    store, index = library
    texts = ["A man climbs the fence at night.", "A woman and a manhole at night.",
             "Le café près de la porte, at night.", "A fence, man_made, at night.",
             "The yard at night."]
    names = ["cam2_north", "cam2_south", "café", "gate", "yard"]
    for i, (text, name) in enumerate(zip(texts, names)):
        store_result(store, f"j-c{i}", result_doc("describe", f"/m/c/{name}.mp4", text=text))
    for i in range(6):  # the checked words more common than "night", so FTS5 walks that
        store_result(store, f"j-f{i}", result_doc("describe", f"/m/f/cam2_{i}.mp4",
                                                  text="A man waits at the café."))
    monkeypatch.setattr(library_search, "COMMON_SHARE", 2.0)  # never: all in FTS5's AND
    plain = search(index, q, limit=20)
    walked = []
    walk = library_search._checked_window  # noqa: SLF001
    monkeypatch.setattr(library_search, "_checked_window",
                        lambda *a: walked.append(a[2]) or walk(*a))
    monkeypatch.setattr(library_search, "COMMON_SHARE", 0.0)  # every word but the rarest
    monkeypatch.setattr(library_search, "SPARSE_SHARE", 1.0)
    out = search(index, q, limit=20)
    assert walked[0] == (checked,)
    assert sorted(h["source"] for h in out["hits"] if h["source"].startswith("j-c")) == \
        expected
    assert [(h["source"], h["score"]) for h in out["hits"]] == \
        [(h["source"], h["score"]) for h in plain["hits"]]
    assert out["matched"] == plain["matched"] == \
        ("any" if "walrus" in q or "tdescribe" in q else "all")


def test_a_common_word_is_checked_only_where_the_other_words_are_sparse():
    from chord_core.library.search import split_common

    freq = {"woman": 790, "formula": 36, "screen": 36, "child": 450, "worker": 290}
    assert split_common(["formula", "screen", "woman"], freq, 1000) == \
        (["formula", "screen"], ("woman",))  # 1.3 expected of 1000: sparse
    assert split_common(["worker", "woman"], freq, 1000) == \
        (["worker", "woman"], ())  # 290 of 1000: dense, FTS5's AND steps it cheaply
    assert split_common(["worker", "woman"], freq, 1000, lambda: 0.005) == \
        (["worker"], ("woman",))  # a filter leaving 0.5 % makes it sparse
    assert split_common(["formula", "child"], freq, 1000) == \
        (["formula", "child"], ())  # 45 %: not common enough to check
    assert split_common(["woman"], freq, 1000) == (["woman"], ())  # the rarest stays


def test_a_document_frequency_is_counted_again_once_the_index_has_moved(library):
    """doc_freq remembers a word's count while the index's size stays within
    DF_STALE_SHARE, and counts again past it, after a rebuild, or once passages are gone."""
    from chord_core.library.search import doc_freq

    store, index = library
    total = index.totals()[0]
    assert doc_freq(index, "walrus", total) == 0
    _walrus_store(store, ["a walrus", "two walrus"])
    index.sync()
    assert doc_freq(index, "walrus", total) == 0  # the same size asked: remembered
    assert doc_freq(index, "walrus", index.totals()[0]) == 2  # grown past 1 %: counted
    assert store.delete_job("j-w0")
    index.rebuild()  # the ids start again: the size can be what it was
    assert doc_freq(index, "walrus", index.totals()[0]) == 1
    assert store.delete_job("j-w1")
    assert search(index, "walrus")["hits"] == []  # a gone job's passages dropped...
    assert doc_freq(index, "walrus", index.totals()[0]) == 0  # ...and counted again


def test_an_upload_is_listed_and_found_under_the_name_it_was_uploaded_as(tmp_path):
    """Uploads are stored under their content hash; the job row keeps the name uploaded."""
    stored = f"/data/uploads/{'ab' * 32}.mp4"
    with Store(tmp_path / "chord.sqlite3") as store:
        doc = result_doc("describe", stored, text="A cyclist at the crossing.")
        store.add_job("j-up", video_path=stored, task="describe", model="test",
                      video_name="harbour cam 3.mp4")
        store.save_result("j-up", doc)
    with LibraryIndex(tmp_path / "chord.sqlite3") as index:
        [hit] = search(index, "cyclist")["hits"]
        assert hit["name"] == "harbour cam 3.mp4" and hit["video_path"] == stored
        assert [h["source"] for h in search(index, "harbour")["hits"]] == ["j-up"]
