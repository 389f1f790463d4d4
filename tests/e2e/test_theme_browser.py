"""The dark theme chosen on one page is the theme of every page, reloads included (issue 39:
a reload of /history came back light). Real app, headless Chromium: the theme is chosen in
the menu on the Analyze page; History is then loaded afresh in the same browser."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

# the app's background is dark: its RGB channels sum to little (Streamlit 1.67's dark is
# rgb(23, 22, 20), its light rgb(255, 255, 255))
DARK_JS = ("getComputedStyle(document.querySelector('[data-testid=stApp]')).backgroundColor"
           ".match(/\\d+/g).slice(0, 3).reduce((a, b) => a + Number(b), 0) < 200")


def _choose_dark(page: object) -> None:
    """Menu → Dark, as a user does (Streamlit writes it under the loaded page's key)."""
    page.get_by_test_id("stMainMenu").click()
    page.get_by_test_id("stMainMenuItem-theme-Dark").click()


def test_dark_chosen_on_analyze_is_kept_on_a_reloaded_history(browser, app_url: str,
                                                               artifacts: Path) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(app_url)
    page.get_by_role("heading", name="Analyze").first.wait_for()
    _choose_dark(page)
    page.wait_for_function(DARK_JS)
    page.wait_for_timeout(1500)  # the sync runs within a second
    later = context.new_page()  # History opened afresh, as a reload or a bookmark does
    later.set_default_timeout(60_000)
    later.goto(f"{app_url}/history")
    later.get_by_role("heading", name="History").first.wait_for()
    later.wait_for_timeout(500)
    later.screenshot(path=str(artifacts / "e2e-theme-history-dark.png"))
    assert later.evaluate(DARK_JS)
    later.reload()
    later.get_by_role("heading", name="History").first.wait_for()
    assert later.evaluate(DARK_JS)
    context.close()
