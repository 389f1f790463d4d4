"""Issue 40, medium: search filters are parsed and checked (a 400 with the accepted form,
never a 500), and a filter's internal token (year, month, day, task, folder hash) is not a
word a query can match. On a keyed uvicorn over a store of stored results, and through the
real ``serve`` the service tests share (a job it ran itself)."""

from __future__ import annotations

import time

import httpx
import pytest
from uvicorn_app import served

from chord_core.library.passages import folder_token
from chord_core.runtime.store import Store
from chord_core.testing.library_docs import result_doc, store_result

KEY = "search-hardening-key"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("search") / "chord.sqlite3")
    store_result(store, "j-a", result_doc("describe", "/media/site-a/cam1.mp4",
                                          text="A forklift crosses the walkway."))
    store_result(store, "j-b", result_doc("ground", "/media/site-b/cam2.mp4",
                                          query="the forklift", segments=[(1.0, 2.5)]))
    with served(store, KEY) as (base, _):
        yield base
    store.close()


def _search(url: str, **params: str) -> httpx.Response:
    return httpx.get(url + "/v1/search", params=params, timeout=20,
                     headers={"Authorization": f"Bearer {KEY}"})


@pytest.mark.parametrize("value", [
    "2026-13-01", "0000-01-01", "9999-12-31", "2026-02-30", "٢٠٢٦-١٢-٠١", "2026-1-1",
    "1969-12-31", "3000-01-01", "2026-12-01T00", "",
], ids=["month-13", "year-0", "year-9999", "30-february", "arabic-digits", "short",
        "before-1970", "after-2999", "with-time", "empty-is-no-filter"])
@pytest.mark.parametrize("field", ["date_from", "date_to"])
def test_a_bad_date_is_a_400_with_the_accepted_form(url, field, value):
    r = _search(url, q="forklift", **{field: value})
    if not value:
        assert r.status_code == 200 and len(r.json()["hits"]) == 2
        return
    assert r.status_code == 400, r.text
    body = r.json()
    assert field in body["error"] and "YYYY-MM-DD" in body["hint"]
    assert "1970-01-01" in body["hint"] and "Traceback" not in r.text


def test_the_widest_range_still_searches(url):
    r = _search(url, q="forklift", date_from="1970-01-01", date_to="2999-12-31")
    assert r.status_code == 200 and len(r.json()["hits"]) == 2


def test_a_filter_token_is_no_word_of_the_query(url):
    today = time.gmtime()
    tokens = [f"y{today.tm_year}", f"m{today.tm_year}{today.tm_mon:02d}",
              f"d{today.tm_year}{today.tm_mon:02d}{today.tm_mday:02d}", "tdescribe", "tground",
              folder_token("/media/site-b"), folder_token("/media")]
    assert len(_search(url, q="forklift", task="ground").json()["hits"]) == 1  # filters work
    for token in tokens:
        r = _search(url, q=token)
        assert r.status_code == 200, r.text
        assert r.json()["hits"] == [], token  # it matched every passage of that filter
        both = _search(url, q=f"forklift {token}").json()
        assert both["matched"] == "any" and len(both["hits"]) == 2  # the word alone counts


def test_the_real_service_checks_filters_and_keeps_their_tokens_out(server):
    """The shared ``python -m chord_core serve``: a describe job it ran is found by its
    clip's name, a bad date is a 400 with the accepted form (it was a 500), and the tokens
    of the job's task and day match nothing."""
    from chord_core.testing.videos import make_video

    clip = make_video(server.media / "filterprobe.mp4", duration_s=1.0, fps=10.0,
                      size_wh=(96, 72)).path
    with httpx.Client(base_url=server.url, timeout=60) as c:
        job_id = c.post("/v1/jobs", json={"task": "describe", "video_path": str(clip),
                                          "max_new_tokens": 4}).json()["job_id"]
        deadline = time.monotonic() + 120
        while c.get(f"/v1/jobs/{job_id}").json()["state"] not in ("done", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        found = c.get("/v1/search", params={"q": "filterprobe", "task": "describe"})
        assert [h["source"] for h in found.json()["hits"]] == [job_id], found.text
        for bad in ("2026-13-01", "2026-02-30", "٢٠٢٦-١٢-٠١", "0000-01-01"):
            r = c.get("/v1/search", params={"q": "filterprobe", "date_from": bad})
            assert r.status_code == 400 and "YYYY-MM-DD" in r.json()["hint"], (bad, r.text)
        day = time.gmtime()
        for token in ("tdescribe", f"y{day.tm_year}",
                      f"d{day.tm_year}{day.tm_mon:02d}{day.tm_mday:02d}"):
            r = c.get("/v1/search", params={"q": token})
            assert r.status_code == 200 and r.json()["hits"] == [], (token, r.text)


def test_a_real_services_first_search_of_a_backlog_answers_at_once(keyed_server):
    """The real keyed ``serve``: 2,000 results of about 500 words stored behind its back (as
    a store grows while no one searches), then its first search answers from the part it
    indexed within its inline budget (0.25 s: about 190 results here, at 750 a second under
    load), says the index is not complete, and the background catches up in steps (2.2 s
    here; /health answers meanwhile)."""
    from service_server import HARDEN_KEY

    import random

    from chord_core.testing.library_docs import sentence

    rng = random.Random(0)
    body = " ".join(sentence(rng) for _ in range(40))  # ≈ 500 words a result
    store = Store(keyed_server.data / "chord.sqlite3")
    for i in range(2000):
        store_result(store, f"j-bl-{i:04d}", result_doc(
            "describe", f"/media/yard/c{i}.mp4", text=f"A crane lifts crate{i} slowly. {body}"))
    store.close()
    auth = {"Authorization": f"Bearer {HARDEN_KEY}"}
    with httpx.Client(base_url=keyed_server.url, headers=auth, timeout=20) as c:
        first = c.get("/v1/search", params={"q": "crate999"})
        assert first.status_code == 200, first.text
        assert first.json()["index"]["complete"] is False, first.json()["index"]
        assert "background" in first.json()["index"]["note"]
        assert c.get("/health").status_code in (200, 503)  # it answers while indexing
        deadline = time.monotonic() + 60
        while not (doc := c.get("/v1/search", params={"q": "crate999"}).json())[
                "index"]["complete"]:
            assert time.monotonic() < deadline, "the background indexing did not finish"
            time.sleep(0.2)
        assert [h["source"] for h in doc["hits"]] == ["j-bl-0999"]
        every = c.get("/v1/search", params={"q": "crane", "limit": "100"}).json()
        assert len(every["hits"]) == 100 and every["index"]["complete"] is True


def test_a_big_backlog_is_indexed_behind_and_the_answer_says_so(tmp_path, monkeypatch):
    """The first search of an unindexed store answers at once from what is indexed, says
    the index is not complete, and a background thread indexes the rest in steps."""
    from chord_core.library import catch_up

    monkeypatch.setattr(catch_up, "STEP_RESULTS", 20)
    monkeypatch.setattr(catch_up, "INLINE_BUDGET_S", 0.0)  # nothing inline: all behind
    store = Store(tmp_path / "chord.sqlite3")
    for i in range(100):
        store_result(store, f"j-{i:03d}", result_doc(
            "describe", f"/media/yard/c{i}.mp4", text=f"A crane lifts crate{i} slowly."))
    with served(store, KEY) as (base, _):
        first = _search(base, q="crate99").json()
        assert first["index"]["complete"] is False and "background" in first["index"]["note"]
        deadline = time.monotonic() + 30
        while not (doc := _search(base, q="crate99").json())["index"]["complete"]:
            assert time.monotonic() < deadline, "the background indexing did not finish"
            time.sleep(0.1)
        assert [h["source"] for h in doc["hits"]] == ["j-099"]
        assert len(_search(base, q="crane", limit="100").json()["hits"]) == 100
    store.close()
