"""Every progress stage the engine and the long runs emit is a known stage with a label on
screen, in English and Chinese (a new stage used to show as its raw name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chord_core.types import STAGES
from chord_ui.formatting import STAGE_LABELS
from chord_ui.i18n import ZH

CORE = Path(__file__).resolve().parents[2] / "chord_core"
# the literal stage of each way a stage is named in the code
EMITS = re.compile(r'(?:\bemit\(|ProgressEvent\(|\bstage=|self\._run\(\w+, )"([a-z_]+)"')


def _emitted() -> set[str]:
    found: set[str] = set()
    for path in CORE.rglob("*.py"):
        found.update(EMITS.findall(path.read_text(encoding="utf-8")))
    return found


def test_the_code_emits_only_known_stages() -> None:
    emitted = _emitted()
    assert {"probe", "generating", "chunks", "checking"} <= emitted  # the scan sees them
    assert emitted <= set(STAGES), sorted(emitted - set(STAGES))


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_has_a_label_in_both_languages(stage: str) -> None:
    label = STAGE_LABELS.get(stage)
    assert label, f"no label for stage {stage!r}"
    assert label in ZH, f"no Chinese for {label!r}"
