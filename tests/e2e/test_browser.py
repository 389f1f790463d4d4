"""The real app in a real browser: upload a clip, ground a target, describe it, see the GPUs
page. Screenshots go to test-artifacts/e2e-*.png."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e

RESULT_TIMEOUT_MS = 120_000


def _download(page, label: str) -> Path:
    with page.expect_download() as info:
        page.get_by_role("button", name=re.compile(label)).click()
    return Path(info.value.path())


def _page_said(page, log: Path) -> str:  # noqa: ANN001
    """What the page shows (its text boxes and text) and the end of the server's log: the
    message of a wait that did not end."""
    boxes = [b.input_value() for b in page.get_by_role("textbox").all()]
    shown = page.get_by_test_id("stMain").inner_text()[:3000]
    return (f"text boxes {boxes}; the page: {shown}; the server's log ends: "
            f"{log.read_text()[-6000:]}")


def _run_and_wait(page, heading: re.Pattern[str] | str, log: Path) -> None:  # noqa: ANN001
    """Run once the button is on (the page's rerun after the text's Enter has come back),
    then wait for the result. If it stays off, or no result comes, say what the page showed
    (and the end of the server's log): Run staying off is how the lost upload of a rerun
    asked during the upload's own rerun was found (chord_ui.inputs._on_upload)."""
    run = page.get_by_role("button", name=re.compile("Run"))
    try:
        expect(run).to_be_enabled(timeout=RESULT_TIMEOUT_MS)
    except AssertionError:
        raise AssertionError(f"Run stayed off; {_page_said(page, log)}") from None
    run.click()
    try:
        page.get_by_role("heading", name=heading).wait_for(timeout=RESULT_TIMEOUT_MS)
    except Exception:  # noqa: BLE001 — Playwright's TimeoutError, told with the page
        raise AssertionError(f"no result heading {heading!r}; {_page_said(page, log)}"
                             ) from None


def _mode(page, name: str, shown, log: Path) -> None:  # noqa: ANN001
    """Choose the mode ``name`` and wait for its input ``shown``; if it does not come, say
    what the page showed (the mode buttons' states, then as ``_page_said``)."""
    page.get_by_role("radio", name=name).click()
    try:
        shown.wait_for(timeout=RESULT_TIMEOUT_MS)
    except Exception:  # noqa: BLE001 — Playwright's TimeoutError, told with the page
        modes = {r.inner_text().strip(): r.get_attribute("aria-checked")
                 for r in page.get_by_role("radio").all()}
        page.screenshot(path="test-artifacts/e2e-mode-timeout.png", full_page=True)
        raise AssertionError(f"mode {name!r} not shown; modes {modes}; "
                             f"{_page_said(page, log)}") from None


def test_ground_and_describe_in_browser(browser_page, app_url: str, app_server, e2e_clip: Path,
                                        artifacts: Path) -> None:
    page, log = browser_page, Path(app_server["log"])
    page.goto(app_url)
    page.get_by_role("heading", name="Analyze a clip").wait_for()
    page.locator("input[type=file]").set_input_files(str(e2e_clip))
    page.get_by_test_id("stMainBlockContainer").get_by_text("Plan:").wait_for()
    page.locator("[data-testid=stVideo]").first.wait_for()
    assert page.locator("[data-testid=stVideo]").count() == 1

    _mode(page, "Ground a target", page.get_by_role("textbox", name="Target"), log)
    target = page.get_by_role("textbox", name="Target")
    target.fill("the green square")
    target.press("Enter")
    _run_and_wait(page, re.compile("the green square"), log)
    page.locator("[data-testid=chord-player]").wait_for()  # the player with its timeline
    # elements of one rerun arrive in order: wait for the last before counting any
    page.get_by_role("button", name=re.compile("Make annotated MP4")).wait_for()
    # download buttons can reach a loaded browser after the button beside them (a full-suite
    # run once counted none here): wait for each before counting
    for label in ("Result JSON", "Detections CSV"):
        page.get_by_role("button", name=re.compile(label)).wait_for()
    assert page.locator("[data-testid=chord-player]").count() == 1
    assert page.locator("[data-testid=chord-player] video").count() == 1
    downloads = page.locator("[data-testid=stDownloadButton]")
    assert downloads.count() >= 2
    assert page.get_by_role("button", name=re.compile("Result JSON")).count() == 1
    assert page.get_by_role("button", name=re.compile("Detections CSV")).count() == 1
    assert page.get_by_role("button", name=re.compile("Make annotated MP4")).count() == 1
    assert page.get_by_text("random weights").count() >= 1
    page.screenshot(path=str(artifacts / "e2e-ground.png"), full_page=True)
    doc = json.loads(_download(page, "Result JSON").read_text())
    assert (doc["schema"], doc["task"], doc["query"]) == ("chord.result/v1", "ground",
                                                          "the green square")
    assert doc["sampling"]["timestamps_s"] and doc["model"]["test_model"] is True
    csv_head = _download(page, "Detections CSV").read_text().splitlines()[0]
    assert csv_head.startswith("t_s,frame_index,x1,y1,x2,y2")

    page.get_by_role("radio", name="Describe").click()
    _run_and_wait(page, "Description", log)
    page.get_by_role("button", name=re.compile("Result JSON")).wait_for()
    assert page.get_by_text("random weights").count() >= 1
    assert page.get_by_role("button", name=re.compile("Result JSON")).count() == 1
    page.screenshot(path=str(artifacts / "e2e-describe.png"), full_page=True)


def test_gpus_page_in_browser(browser_page, app_url: str, artifacts: Path) -> None:
    page = browser_page
    page.goto(f"{app_url}/gpus")
    page.get_by_role("heading", name="GPUs").wait_for()
    page.locator("[data-testid=stPlotlyChart]").first.wait_for(timeout=30_000)
    no_gpu = page.get_by_text("No NVIDIA GPU to show").count()
    table = page.locator("[data-testid=stDataFrame]").count()
    assert no_gpu == 1 or table >= 1
    page.wait_for_timeout(3000)  # a couple of refreshes: charts keep rendering
    assert page.locator("[data-testid=stPlotlyChart]").count() >= 2
    page.screenshot(path=str(artifacts / "e2e-gpus.png"), full_page=True)


def test_batch_then_history_in_browser(browser_page, app_url: str, e2e_clip: Path,
                                       artifacts: Path, tmp_path: Path) -> None:
    import shutil
    import zipfile

    from chord_core.testing.videos import make_text_as_mp4, make_video

    folder = tmp_path / "batch"
    folder.mkdir()
    shutil.copyfile(e2e_clip, folder / "square.mp4")
    make_video(folder / "second.mp4", duration_s=2.0, fps=10.0, size_wh=(320, 180), seed=5)
    make_text_as_mp4(folder / "notes.mp4")
    page = browser_page
    page.goto(app_url)  # then through the navigation, as a user would
    page.get_by_text("Upload a clip or give a path").wait_for()  # the first run is complete
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Batch").click()
    page.get_by_role("heading", name="Batch", exact=True).wait_for()
    box = page.get_by_role("textbox", name="…and/or a folder on this machine")
    box.fill(str(folder))
    box.press("Enter")
    page.get_by_text("ready to queue").wait_for()
    page.get_by_role("button", name=re.compile("Queue 3 clips")).click()
    zip_button = page.get_by_role("button", name=re.compile("Download results"))
    zip_button.wait_for(timeout=RESULT_TIMEOUT_MS)
    failures = page.get_by_test_id("stAlert").filter(has_text="text file, not a video")
    expect(failures).to_have_count(1, timeout=60_000)
    expect(failures).to_contain_text("How to fix", timeout=60_000)
    page.screenshot(path=str(artifacts / "e2e-batch.png"), full_page=True)
    with zipfile.ZipFile(_download(page, "Download results")) as zf:
        assert sorted(zf.namelist()) == ["second.describe.json", "square.describe.json",
                                         "summary.json"]
        batch_id = json.loads(zf.read("summary.json"))["batch_id"]

    page.get_by_test_id("stSidebarNav").get_by_role("link", name="History").click()
    page.get_by_role("heading", name="History", exact=True).wait_for()
    page.locator("[data-testid=stDataFrame]").first.wait_for()
    from test_results_actions import _select_row  # waits until the grid stops moving

    # newest first: the batch, one row, its clips inside (ticked once the grid, whose
    # thumbnails load late, has stopped moving: on CI a click before that missed the row)
    _select_row(page, "history_table", 0)
    # square.mp4 is the clip the first test described with the same settings: run alone this
    # test makes 3 children; after it, the batch takes that earlier job (not run again, not
    # its child), so 2
    expect(page.get_by_text(re.compile(r"^[23] job\(s\) in this run$"))).to_be_visible()
    _select_row(page, f"children-{batch_id}", 1)  # as queued: notes, second (, square)
    open_button = page.get_by_role("button", name=re.compile("Open in Analyze"))
    open_button.wait_for()
    delete_button = page.get_by_role("button", name=re.compile("Delete"))
    delete_button.wait_for()  # the same rerun draws it just after Open; don't race it
    assert delete_button.count() == 1
    page.screenshot(path=str(artifacts / "e2e-history.png"), full_page=True)
    open_button.click()
    page.get_by_role("heading", name="Analyze a clip").wait_for()
    page.get_by_role("heading", name="Description").wait_for()
    result_json = page.get_by_role("button", name=re.compile("Result JSON"))
    result_json.wait_for()
    assert result_json.count() == 1
