"""The Library page in a real browser: stored results are found by a word, each hit is a
card with its thumbnail and the matched word in bold, "Play here" plays the clip from the
hit's moment, the folder filter narrows the hits, the query lives in the URL, and the page
reads in Chinese. Real ``streamlit run app.py``, real Chromium; screenshots in
test-artifacts/ (copied to docs/screenshots/library.png and library-zh.png)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

expect = pytest.importorskip("playwright.sync_api", reason="playwright not installed").expect
pytestmark = pytest.mark.e2e

VIEW = {"width": 1440, "height": 1100}


@pytest.fixture(scope="module")
def stored(app_server, tmp_path_factory, e2e_clip) -> dict[str, Path]:
    """Three results in the app's store, on real clips under the media roots."""
    from chord_core.runtime.store import Store
    from chord_core.testing.library_docs import result_doc, store_result
    from chord_core.testing.videos import make_video

    other = tmp_path_factory.mktemp("site-b") / "gate-cam.mp4"
    make_video(other, duration_s=3.0, fps=10.0, size_wh=(320, 180), seed=3)
    with Store(Path(app_server["data"]) / "chord.sqlite3") as store:
        store_result(store, "job-lib-dock", result_doc(
            "describe", str(e2e_clip), duration_s=4.0, times=[1.0, 2.0, 3.0],
            text="A forklift crosses the walkway near the loading dock."))
        store_result(store, "job-lib-square", result_doc(
            "ground", str(e2e_clip), query="the green square", duration_s=4.0,
            segments=[(1.5, 3.0)]))
        store_result(store, "job-lib-gate", result_doc(
            "describe", str(other), duration_s=3.0,
            text="A second forklift waits at the gate in the rain."))
    return {"dock": e2e_clip, "gate": other}


def _page(browser, app_url: str, locale: str = "en-US"):  # noqa: ANN001, ANN202
    """A fresh tab that has been to the app's root first: a server whose first visitor
    opens a sub-page draws Streamlit's file-name page list (app, analyze, …) instead of the
    app's own navigation until then."""
    page = browser.new_context(viewport=VIEW, locale=locale).new_page()
    page.set_default_timeout(60_000)
    page.goto(app_url)
    _nav_link(page, re.compile(r"^GPUs?$")).wait_for()  # "GPUs", in 中文 "GPU"
    return page


def _nav_link(page, name):  # noqa: ANN001, ANN202
    """A sidebar link by its whole name: ``has_text`` matched words inside other links'
    icon names too ("video_library" of Batch for "Library"), a strict-mode error."""
    return page.get_by_test_id("stSidebarNav").get_by_role("link", name=name, exact=True)


def _settled(page, nav: str) -> None:  # noqa: ANN001
    """The app's own navigation is drawn and the script run is over (no skeletons)."""
    _nav_link(page, nav).wait_for()
    page.locator("[data-testid=stStatusWidget]").wait_for(state="detached")
    page.wait_for_timeout(500)


def _cards(page):  # noqa: ANN001, ANN202
    return page.locator("[class*=st-key-library-hit-]")


def test_search_finds_cards_plays_the_moment_and_filters(browser, app_url, stored,
                                                        artifacts: Path) -> None:
    page = _page(browser, app_url)
    page.goto(f"{app_url}/library")
    page.get_by_role("heading", name="Library", exact=True).wait_for()
    box = page.get_by_label("Search the library")
    box.fill("forklift")
    page.get_by_role("button", name="Search").click()
    page.get_by_text("2 hits for forklift").wait_for()
    assert "q=forklift" in page.url  # a reload or a shared link shows the same hits
    cards = _cards(page)
    cards.nth(1).wait_for()
    assert cards.count() == 2
    first = cards.nth(0)
    assert first.locator("strong", has_text="forklift").count() >= 1
    first.locator("img").wait_for()  # the thumbnail: the clip's frame at the moment
    cards.nth(1).locator("img").wait_for()
    names = cards.all_inner_texts()
    assert any(stored["dock"].name in n for n in names)
    assert any(stored["gate"].name in n for n in names)
    _settled(page, "Library")
    page.screenshot(path=str(artifacts / "e2e-library.png"))
    first.get_by_role("button", name="Play here").click()
    video = page.locator("[class*=st-key-library-hit-0] video")
    video.wait_for()
    assert page.evaluate("() => document.querySelector('video').src").startswith("http")
    # the folder filter: only the gate camera's folder
    page.goto(f"{app_url}/library?q=forklift&folder={stored['gate'].parent}")
    page.get_by_text("1 hits for forklift").wait_for()
    expect(_cards(page).nth(0)).to_contain_text(stored["gate"].name, timeout=60_000)
    page.context.close()


def test_grounding_target_hit_and_chinese_page(browser, app_url, stored,
                                               artifacts: Path) -> None:
    page = _page(browser, app_url, locale="zh-CN")
    page.goto(f"{app_url}/library?q=green+square")
    page.get_by_role("heading", name="资料库", exact=True).wait_for()
    # the target's text ranks above the clip whose file name (green-square.mp4) matches
    page.get_by_text("“green square”共 2 条结果").wait_for()
    card = _cards(page).nth(0)
    expect(card).to_contain_text("1.5–3.0 s")  # waits: the count can show before the cards
    expect(card).to_contain_text("目标")
    card.locator("img").wait_for()
    _settled(page, "资料库")
    page.screenshot(path=str(artifacts / "e2e-library-zh.png"))
    page.goto(f"{app_url}/library?q=zebra&lang=zh")
    page.get_by_text("没有结果").wait_for()
    page.context.close()


def _store_alert(app_server, clip: Path, start_s: float) -> None:
    """An alert as a watcher's standing check stores it (another process, same store)."""
    import json
    import time

    from chord_core.library.index import LibraryIndex

    with LibraryIndex(Path(app_server["data"]) / "chord.sqlite3") as index:
        with index.write() as conn:
            conn.execute("INSERT INTO library_alerts (watch, clip_key, statement, path, "
                         "start_s, end_s, probability, evidence_json, job_id, created_at) "
                         "VALUES ('w-test', 'k', 'a forklift enters the walkway', ?, ?, ?, "
                         "0.93, ?, 'job-x', ?)",
                         (str(clip), start_s, start_s + 1.0,
                          json.dumps([{"t_s": start_s, "frame_index": 0,
                                       "entailment": 0.93}]), time.time()))


def test_alerts_are_listed_and_a_new_one_is_a_toast(browser, app_url, app_server, stored,
                                                    artifacts: Path) -> None:
    _store_alert(app_server, stored["dock"], 1.0)
    page = _page(browser, app_url)
    page.goto(f"{app_url}/library")
    page.get_by_role("heading", name="Alerts").wait_for()
    page.get_by_text("a forklift enters the walkway").first.wait_for()
    page.wait_for_timeout(1500)  # the toast check has noted what this session has seen
    _store_alert(app_server, stored["gate"], 2.0)  # stored while the page is open
    toast = page.locator("[data-testid=stToast]", has_text="gate-cam.mp4")
    toast.wait_for(timeout=20_000)
    assert "2.0 s" in toast.inner_text()
    page.screenshot(path=str(artifacts / "e2e-library-alert.png"))
    page.context.close()


def test_copy_screenshots_to_docs(artifacts: Path) -> None:
    """The README's screenshots come from the tests above (when both ran)."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
    for name in ("library", "library-zh", "library-alert"):
        src = artifacts / f"e2e-{name}.png"
        if not src.exists():
            pytest.skip("run the whole module to refresh the screenshots")
        shutil.copyfile(src, docs / f"{name}.png")
