"""Ask across the library: a question in words → an answer that cites clip@time.

Three steps, each one already in the library, composed here:

1. **Candidates** — the question searched in the FTS index (search.py: BM25 over every
   description, chapter, target and statement analysed so far), the best ``candidates``
   hits, one per clip and time range (the same moment found by two passages is checked
   once).
2. **Checked on the frames** — the first ``check`` of them re-checked by entailment on the
   clip's actual frames over the hit's time range (recheck.py: an ``entail`` job per hit,
   the question as the statement, frame times from the container).
3. **The answer** — a claim per checked hit: the passage the index had, cited as
   ``name@m:ss`` at the best frame, with its P(entailment). A claim is **supported** when
   that probability reaches ``threshold``; the answer lists the supported claims, best
   first, or says that none of the checked moments shows it (with the best score seen).

The answer is composed from the claims, not generated: every sentence in it has its
citation and its checked score, and nothing is said that the frames were not asked about.
``chord.ask/v1``: {question, answer, supported, claims: [...], unchecked: [...],
candidates, checked, timings_ms: {search, check, total}}.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from chord_core.errors import InputError

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

ASK_SCHEMA = "chord.ask/v1"
MAX_CHECK = 20
MAX_CANDIDATES = 100
DEFAULT_THRESHOLD = 0.5


def clock(t_s: float | None) -> str:
    """``m:ss`` (``h:mm:ss`` past an hour) of a moment, whole seconds: no stray ``.0``."""
    s = max(0, int(round(float(t_s or 0.0))))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def citation(name: str, t_s: float | None) -> str:
    return f"{name}@{clock(t_s)}"


def _distinct(hits: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[tuple[str, float, float]] = set()
    out = []
    for hit in hits:
        key = (hit["video_path"], round(hit["start_s"], 1), round(hit["end_s"], 1))
        if key not in seen:
            seen.add(key)
            out.append(hit)
    return out


def _claim(hit: dict[str, Any], threshold: float) -> dict[str, Any]:
    checked = hit.get("checked") or {}
    at = checked.get("best_s")
    at = float(hit["start_s"]) if at is None else float(at)
    p = checked.get("p_entailment")
    text = "".join(part for part, _ in hit["parts"]).strip()
    return {"clip": hit["name"], "path": hit["video_path"], "source": hit["source"],
            "kind": hit["kind"], "start_s": hit["start_s"], "end_s": hit["end_s"],
            "at_s": round(at, 3), "citation": citation(hit["name"], at), "text": text,
            "p_entailment": p, "verdict": checked.get("verdict"),
            "error": checked.get("error"), "job_id": checked.get("job_id"),
            "supported": p is not None and float(p) >= threshold}


def compose(question: str, claims: Sequence[dict[str, Any]], candidates: int) -> str:
    """The answer's words, from the claims (see the module docstring)."""
    if not candidates:
        return (f"Nothing analysed so far mentions this ({question!r}): no clip to check. "
                "Analyse or watch the footage first, then ask again.")
    good = sorted((c for c in claims if c["supported"]), key=lambda c: -float(c["p_entailment"]))
    if good:
        lines = [f"{len(good)} of {len(claims)} checked moment(s) show it:"]
        lines += [f"- {c['text'][:160]} [{c['citation']}, P={float(c['p_entailment']):.2f}]"
                  for c in good]
        return "\n".join(lines)
    scored = [c for c in claims if c["p_entailment"] is not None]
    if not scored:
        return f"{len(claims)} candidate moment(s) found, but none could be checked."
    best = max(scored, key=lambda c: float(c["p_entailment"]))
    return (f"None of the {len(scored)} checked moment(s) shows it; the closest is "
            f"[{best['citation']}, P={float(best['p_entailment']):.2f}].")


def check_args(question: str, check: int, candidates: int, threshold: float) -> None:
    if not (question or "").strip():
        raise InputError("the question is empty", hint='ask in words, e.g. "is a forklift '
                                                       'in the walkway?"')
    if not 1 <= check <= MAX_CHECK:
        raise InputError(f"check must be 1–{MAX_CHECK} moments, got {check}",
                         hint="e.g. check 5 (each is one entailment job on the frames)")
    if not 1 <= candidates <= MAX_CANDIDATES:
        raise InputError(f"candidates must be 1–{MAX_CANDIDATES}, got {candidates}",
                         hint="e.g. 20 search hits to choose the checked ones from")
    if not 0.0 < threshold <= 1.0:
        raise InputError(f"the threshold is a probability in (0, 1], got {threshold}",
                         hint="e.g. 0.5")


def ask(index: LibraryIndex, question: str, manager: Any, model: str, *, check: int = 5,
        candidates: int = 20, threshold: float = DEFAULT_THRESHOLD, filters: Any = None,
        fps: float = 1.0, max_frames: int = 8, timeout_s: float = 600.0) -> dict[str, Any]:
    """Answer ``question`` from the library (``chord.ask/v1``; see the module docstring)."""
    from chord_core.library.recheck import recheck
    from chord_core.library.search import search

    check_args(question, check, candidates, threshold)
    t0 = time.perf_counter()
    doc = search(index, question, filters=filters, limit=candidates)
    hits = _distinct(doc["hits"])
    t1 = time.perf_counter()
    n = recheck(hits, question, manager, model, top=check, fps=fps, max_frames=max_frames,
                timeout_s=timeout_s) if hits else 0
    t2 = time.perf_counter()
    claims = [_claim(h, threshold) for h in hits[:check]]
    return {"schema": ASK_SCHEMA, "question": question, "model": model,
            "answer": compose(question, claims, len(hits)),
            "supported": sum(c["supported"] for c in claims), "threshold": threshold,
            "claims": claims, "candidates": len(hits), "checked": n,
            "unchecked": [{"clip": h["name"], "citation": citation(h["name"], h["start_s"]),
                           "text": "".join(p for p, _ in h["parts"])[:160]}
                          for h in hits[check:]],
            "timings_ms": {"search": round((t1 - t0) * 1000, 1),
                           "check": round((t2 - t1) * 1000, 1),
                           "total": round((t2 - t0) * 1000, 1)}}


__all__ = ["ask", "compose", "citation", "clock", "ASK_SCHEMA"]
