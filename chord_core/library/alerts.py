"""Standing checks: a watch folder's statements, checked on every clip it analyses, with the
entailment curve Chord already has (an ``entail`` job per clip and statement: P(entailment)
per sampled frame, at the frames' presentation times).

A **moment** is a run of consecutive checked frames whose P(entailment) is at least the
folder's threshold; it becomes an **alert**: clip, statement, time range (first to last
frame of the run), the highest probability, and the evidence frames (up to
MAX_EVIDENCE best, time and probability). When a folder's statements change (one added
or edited, at a restart), the clips it finished before are checked against the new ones
too, once each (``StandingChecks.backfill``). The tables are ``watch_table.py``'s: a check
is claimed under the job manager's lease (a dead owner's claim is taken over), and its job
is followed by its handle (the done callback posts to the watcher's inbox; nothing polls).

A check's job carries the media roots: the clip is opened under them where it is read, so a
clip swapped for a symlink to a file elsewhere before its check (a backfill) is refused
and the check ends ``error`` with the reason — the outside file is never analysed.

A new alert is announced (``alert_signal.py``), handed to the ``on_alert`` callbacks
(``add_alert_listener``: e.g. review items), and its hook is queued (``hooks.py``: off the
watcher's thread, a minimal environment, each run recorded). Chord itself makes no network
call; a hook may (that is the user's choice).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from chord_core.errors import ChordError
from chord_core.library import watch_table
from chord_core.library.hooks import HOOK_TIMEOUT_S, HookRun, HookRunner

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

log = logging.getLogger(__name__)

MAX_EVIDENCE = 5
_stored = threading.Condition()  # notified when an alert is stored (here or elsewhere)
_stored_count = 0
_listeners: list[Callable[[dict[str, Any]], None]] = []


def add_alert_listener(fn: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    """Call ``fn(alert)`` for each new alert this process stores (on the watcher's thread:
    keep it quick); returns the function that takes it back. The alert dict is what
    ``GET /v1/alerts`` returns (id, watch, clip_key, statement, path, start_s, end_s,
    probability, evidence, job_id)."""
    _listeners.append(fn)

    def remove() -> None:
        if fn in _listeners:
            _listeners.remove(fn)
    return remove


def alerts_stored() -> int:
    """A cursor for ``wait_for_alert``: how many alert signals this process has seen."""
    return _stored_count


def wait_for_alert(seen: int, timeout: float) -> int:
    """Block until an alert is stored past the cursor ``seen`` — by this process, or by
    another one on the same store once ``listen_for_alerts`` was called (alert_signal.py)
    — or ``timeout`` seconds pass; returns the new cursor."""
    with _stored:
        _stored.wait_for(lambda: _stored_count > seen, timeout)
        return _stored_count


def _note_stored() -> None:
    global _stored_count
    with _stored:
        _stored_count += 1
        _stored.notify_all()


def listen_for_alerts(index: LibraryIndex) -> bool:
    """Wake ``wait_for_alert`` when any process stores an alert in ``index``'s store;
    True when that is live (file events), False when only a re-read finds them."""
    from chord_core.library.alert_signal import listen

    return listen(index.path, _note_stored)


def store_alert(index: LibraryIndex, watch: str, check: dict[str, Any],
                moment: dict[str, Any]) -> int | None:
    """Store one alert (a moment of a check) and wake its streams in every process; its
    id, or None when this clip's moment fired before."""
    from chord_core.library.alert_signal import announce

    alert_id = watch_table.insert_alert(index, watch, check, moment)
    if alert_id is not None:
        _note_stored()
        announce(index.path, alert_id)
    return alert_id


def moments(frames: Sequence[dict[str, Any]], threshold: float) -> list[dict[str, Any]]:
    """Runs of consecutive frames at or over ``threshold`` (see the module docstring)."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    ordered = sorted(frames, key=lambda f: float(f["t_s"]))
    ends: list[dict[str, Any] | None] = [*ordered, None]  # None: the end closes the last run
    for frame in ends:
        if frame is not None and float(frame.get("entailment", 0.0)) >= threshold:
            run.append(frame)
            continue
        if run:
            best = sorted(run, key=lambda f: -float(f["entailment"]))[:MAX_EVIDENCE]
            out.append({"start_s": round(float(run[0]["t_s"]), 4),
                        "end_s": round(float(run[-1]["t_s"]), 4),
                        "probability": round(max(float(f["entailment"]) for f in run), 4),
                        "evidence": [{"t_s": round(float(f["t_s"]), 4),
                                      "frame_index": int(f.get("frame_index", -1)),
                                      "entailment": round(float(f["entailment"]), 4)}
                                     for f in sorted(best, key=lambda f: float(f["t_s"]))]})
            run = []
    return out


def list_alerts(index: LibraryIndex, *, after_id: int = 0, limit: int = 100,
                watch: str | None = None) -> list[dict[str, Any]]:
    """Alerts with ids over ``after_id``, oldest first (what the SSE stream sends next),
    each with its latest ``hook_run``."""
    return watch_table.alert_rows(index, after_id=after_id, limit=limit, watch=watch)


def latest_alerts(index: LibraryIndex, limit: int = 50) -> list[dict[str, Any]]:
    """The newest alerts first (the app's alerts section, ``GET /v1/alerts``)."""
    return watch_table.alert_rows(index, limit=limit, newest=True)


def newest_alert_id(index: LibraryIndex) -> int:
    return watch_table.newest_alert_id(index)


class StandingChecks:
    """The statements of one ``FolderWatcher``: a check per analysed clip, alerts from its
    curve. Installs itself as the watcher's ``on_done``; runs on the watcher's thread."""

    def __init__(self, manager: Any, store: Any, watcher: Any,
                 on_hook: Callable[[HookRun], None] | None = None,
                 hook_timeout_s: float = HOOK_TIMEOUT_S) -> None:
        self.manager, self.store, self.watcher = manager, store, watcher
        self.settings, self.index, self.table = watcher.settings, watcher.index, watcher.table
        self._jobs: dict[tuple[str, str], str] = {}  # (clip key, statement) → job, running
        self.hooks = HookRunner(self.settings.hook, self._record, on_hook,
                                timeout_s=hook_timeout_s,
                                after=lambda: watcher.inbox.post(lambda: None)
                                ) if self.settings.hook else None
        watcher.on_done = self.clip_done
        watcher.checks = self
        watcher.inbox.post(self.resume)

    def _record(self, run: HookRun) -> None:
        watch_table.record_hook_run(self.index, run.to_dict())

    def resume(self) -> None:
        """At start: checks a gone owner left are taken over and submitted again; clips done
        with no check of today's statements are checked (``backfill``)."""
        for row in self.table.take_over_checks():
            self._submit(row["clip_key"], row["path"], row["statement"], row.get("job_id"))
        self.backfill()

    def backfill(self) -> int:
        """Clips this watch finished that have no check for one of today's statements (a
        statement added or edited since): each gets one, once (a claim is a row keyed by
        watch, clip and statement, so a restart claims nothing again). A clip whose file is
        gone is left (checked if it comes back). Returns how many were claimed."""
        import os

        todo = [t for t in self.table.unchecked(self.settings.statements)
                if os.path.lexists(t[2])]
        got = self.table.claim_checks(todo) if todo else []
        if got:
            log.info("watch %s: %d check(s) of clips done before, for new statements",
                     self.settings.watch_id, len(got))
        for statement, key, path in got:
            self._submit(key, path, statement)
        return len(got)

    def clip_done(self, row: dict[str, Any], doc: dict[str, Any]) -> None:
        """A clip the watch analysed: one entail job per statement (once per clip)."""
        todo = [(s, row["key"], row["path"]) for s in self.settings.statements]
        for statement, key, path in self.table.claim_checks(todo):
            self._submit(key, path, statement)

    def _submit(self, clip_key: str, path: str, statement: str,
                job_id: str | None = None) -> None:
        from chord_core.analysis.request import AnalysisRequest
        from chord_core.media.roots import job_roots
        from chord_core.runtime.jobs import JobSpec

        handle = self.watcher._known_handle(job_id)  # noqa: SLF001 — the same lookup
        if handle is None:
            try:
                req = AnalysisRequest(path, "entail", statement, media_roots=job_roots())
            except ChordError as exc:
                self.table.set_check(clip_key, statement, "error", error=exc.message)
                return
            handle = self.manager.submit(JobSpec(req, model=self.settings.model))
        self._jobs[(clip_key, statement)] = str(handle)
        self.table.set_check(clip_key, statement, "submitted", job_id=str(handle))
        handle.add_done_callback(lambda h: self.watcher.inbox.post(
            lambda: self._ended(clip_key, path, statement, h)))

    def _ended(self, clip_key: str, path: str, statement: str, handle: Any) -> None:
        """A check's job finished: its moments become alerts (hooks queued)."""
        from chord_core.library.watch import _error_text

        status = handle.status()
        if status.state.value != "done":
            self.table.set_check(clip_key, statement, "error",
                                 error=_error_text(status.error or {}) or status.state.value)
            self._jobs.pop((clip_key, statement), None)
            return
        doc = status.result.to_dict() if status.result is not None else {}
        frames = (doc.get("entailment") or {}).get("frames") or []
        check = {"clip_key": clip_key, "statement": statement, "path": path,
                 "job_id": handle.job_id}
        self._fire(check, moments(frames, self.settings.threshold))
        self.table.set_check(clip_key, statement, "done")
        self._jobs.pop((clip_key, statement), None)

    def busy(self) -> bool:
        """Checks running, or hook runs queued or running."""
        return bool(self._jobs) or (self.hooks is not None and self.hooks.pending() > 0)

    def stop(self) -> None:
        if self.hooks is not None:
            self.hooks.stop()

    def _fire(self, check: dict[str, Any], found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        fired = []
        for m in found:
            alert_id = store_alert(self.index, self.settings.watch_id, check, m)
            if alert_id is None:
                continue  # fired before (this clip, this moment)
            alert = {"id": alert_id, "watch": self.settings.watch_id, **check, **m}
            log.warning("alert: %s at %.1f–%.1f s in %s (P=%.2f)", check["statement"],
                        m["start_s"], m["end_s"], check["path"], m["probability"])
            for fn in list(_listeners):
                try:
                    fn(dict(alert))
                except Exception:  # noqa: BLE001 — a listener's bug must not stop alerts
                    log.exception("alert listener %r failed", fn)
            if self.hooks is not None:
                self.hooks.put(alert)
            fired.append(alert)
        return fired


__all__ = ["StandingChecks", "moments", "list_alerts", "latest_alerts", "store_alert",
           "listen_for_alerts", "add_alert_listener", "newest_alert_id"]
