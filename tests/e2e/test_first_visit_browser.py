"""The first visit of a freshly started app goes straight to a page's address (a bookmark of
/review or /library): the app's own script still runs first. Before, Streamlit found the
``pages/`` folder beside ``app.py`` and, until some visit ran ``app.py`` and its
``st.navigation``, ran the page file alone (its multipage "v1" mode): the sidebar listed raw
file names, and nothing ``app.py`` starts (the watched folders, the alert toasts, the
language switch) ran for visits that never opened the first page. The page files live in
``views/`` now. This module's server is its own (the conftest starts one a module), and this
is its first visit."""

from __future__ import annotations

import pytest

expect = pytest.importorskip("playwright.sync_api", reason="playwright not installed").expect

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TITLES = ["Analyze", "Batch", "History", "Library", "Review", "Live", "GPUs"]


def test_the_first_visit_to_a_page_address_runs_the_app(app_url, browser) -> None:
    page = browser.new_context(viewport={"width": 1280, "height": 900},
                               locale="en-US").new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{app_url}/review")
    expect(page.get_by_role("heading", name="Review")).to_be_visible(timeout=60_000)
    nav = page.locator("[data-testid=stSidebarNav] a")
    expect(nav).to_have_count(len(TITLES), timeout=30_000)
    # each link: its icon's ligature ("movie"), then its title; before: app, analyze, batch, …
    assert [t.split("\n")[-1].strip() for t in nav.all_inner_texts()] == TITLES
    # app.py's sidebar (the language switch) is there: the app's script ran, not the page alone
    expect(page.get_by_text("中文", exact=False).first).to_be_attached(timeout=30_000)
    page.context.close()
