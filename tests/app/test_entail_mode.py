"""AppTest: the Analyze page's third mode, "Check a statement" (the test model's numbers are
meaningless; the test checks what is shown and how)."""

from __future__ import annotations

from pathlib import Path


def _has_result(at) -> bool:
    return any(s.value for s in at.subheader) or bool(at.error)


def test_check_a_statement_shows_verdict_curve_and_moments(new_app, poll,
                                                           app_clip: Path) -> None:
    at = new_app().run()
    at.text_input(key="local_path").input(str(app_clip)).run()
    at.segmented_control(key="task").set_value("entail").run()
    assert at.segmented_control(key="task").options[-1] == "Check a statement"
    statement = "a ![x](http://rebind.example/p.png) *green* square moves"
    at.text_input(key="entail_statement").input(statement).run()
    at.button(key="run").click().run()
    assert not at.exception
    poll(at, _has_result)
    assert not at.error, [e.value for e in at.error]
    head = at.subheader[0].value
    assert head.startswith("“a ") and "(p = " in head
    assert "![x]" not in head and "\\!\\[x\\]" in head  # markdown shown as text
    assert any(w in head for w in ("holds", "is contradicted", "cannot be told"))
    assert [m.label for m in at.metric] == ["entailment", "neutral", "contradiction"]
    assert abs(sum(float(m.value) for m in at.metric) - 1.0) < 0.02
    assert len(at.get("plotly_chart")) == 1  # the probability curve
    assert "Supports it at" in " ".join(m.value for m in at.markdown)
    assert any(b.label == "Result (.json)" for b in at.get("download_button"))


def test_check_without_statement_says_so(new_app, app_clip: Path) -> None:
    at = new_app().run()
    at.text_input(key="local_path").input(str(app_clip)).run()
    at.segmented_control(key="task").set_value("entail").run()
    assert not at.exception
    assert at.button(key="run").disabled  # nothing to check: Run is off, and says why
    assert any("Type the statement to check to run." in c.value for c in at.caption)
