"""At 1280 px (a laptop's width) the Analyze page's mode control shows its three choices
whole ("Check a statement" ran past its 4/9 column, cut to "Check a statemen"), in English
and Chinese: each choice's button ends inside the control's column."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_mode_control_fits_at_1280_px(browser, app_url: str, lang: str) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        page.goto(f"{app_url}/?lang={lang}")
        group = page.locator("[data-testid=stMain] [data-testid=stButtonGroup]").first
        group.wait_for()
        buttons = group.locator("button")  # role "radio": one choice each
        assert buttons.count() == 3
        column = group.bounding_box()  # the control's own width: its column's
        for i in range(3):
            box = buttons.nth(i).bounding_box()
            text = buttons.nth(i).inner_text()
            assert box["x"] + box["width"] <= column["x"] + column["width"] + 1, (text, box,
                                                                                column)
            # the whole label is shown: the button's text is not clipped by its own box
            clipped = buttons.nth(i).evaluate(
                "b => [...b.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1)")
            assert not clipped, text
    finally:
        ctx.close()
