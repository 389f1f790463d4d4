"""The human-readable half of an exported case: ``report.md`` and ``report.html``, one row
per moment (its number, clip, time span, label, score, where it came from, its still and
its clip), from the case's ``chord.case/v1`` document (case_export.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


def _span(m: dict[str, Any]) -> str:
    from chord_core.library.ask import clock

    return f"{clock(m['start_s'])}–{clock(m['end_s'])}"


def _score(m: dict[str, Any]) -> str:
    return "—" if m["score"] is None else f"{float(m['score']):.2f}"


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Case: {doc['case']}", "", f"{len(doc['moments'])} moment(s).", ""]
    for m in doc["moments"]:
        lines += [f"## {m['n']}. {m['clip']} at {_span(m)}", "",
                  f"- what: {m['label']}", f"- score: {_score(m)}",
                  f"- from: {m['origin']} {m['ref']}".rstrip()]
        if m["clip_file"]:
            lines.append(f"- clip: [{m['clip_file']}]({m['clip_file']}) ({m['cut']}, "
                         f"{m['clip_start_s']:.2f}–{m['clip_end_s']:.2f} s of the source)")
        if m["error"]:
            lines.append(f"- not exported: {m['error']}")
        if m["still"]:
            lines += ["", f"![{m['clip']} at {_span(m)}]({m['still']})"]
        lines.append("")
    return "\n".join(lines)


def page(doc: dict[str, Any], esc: Callable[[str], str]) -> str:
    rows = []
    for m in doc["moments"]:
        still = f'<img src="{esc(m["still"])}" width="320" alt="">' if m["still"] else ""
        clip = (f'<a href="{esc(m["clip_file"])}">{esc(m["cut"])} clip</a>'
                if m["clip_file"] else esc(m["error"] or ""))
        rows.append(f"<tr><td>{m['n']}</td><td>{esc(m['clip'])}</td><td>{esc(_span(m))}</td>"
                    f"<td>{esc(m['label'])}</td><td>{esc(_score(m))}</td>"
                    f"<td>{esc(m['origin'])}</td><td>{still}</td><td>{clip}</td></tr>")
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>Case {esc(doc['case'])}</title></head><body>"
            f"<h1>Case: {esc(doc['case'])}</h1><table border='1' cellpadding='4'>"
            "<tr><th>#</th><th>clip</th><th>time</th><th>what</th><th>score</th>"
            "<th>from</th><th>still</th><th>clip</th></tr>" + "".join(rows) +
            "</table></body></html>")


def write_reports(folder: Path, doc: dict[str, Any], esc: Callable[[str], str]) -> None:
    (folder / "report.md").write_text(markdown(doc))
    (folder / "report.html").write_text(page(doc, esc))
