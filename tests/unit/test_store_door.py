"""One door to the store (issue 38): only the job runtime opens a writable ``Store`` and
writes jobs, results, batches and parents; everything above it (the app, the service, the
library, the CLI) reads through ``runtime.store_read`` (a ``StoreView`` has no write at all)
and asks the manager to write or delete (``JobManager.parents``).

The scan reads every module's syntax tree (not its text): a call ``Store(…)``, an import of
``chord_core.runtime.store`` itself, a call of a store write method by name, or a reach under
a view (``writable``, ``._store``) outside ``chord_core/runtime/`` fails here, naming the file
and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from app_sources import app_sources

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "chord_core" / "runtime"
# every write of Store and of the runtime's store modules (store_parents), by method name
WRITES = {"add_job", "update_state", "save_result", "delete_job", "add_batch",
          "set_batch_summary", "transaction", "open_parent", "set_summary", "delete_tree"}
# kept on purpose; each says why
EXCEPTIONS = {
    "chord_core/testing/library_docs.py": "test and benchmark fixtures: seeds a store file "
                                          "with finished jobs (no manager, no model)",
}


def _sources() -> list[Path]:
    return app_sources(leave_out=set(EXCEPTIONS), below=RUNTIME)


def _breaches(path: Path) -> list[str]:
    where = path.relative_to(ROOT)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "chord_core.runtime.store":
            found.append(f"{where}:{node.lineno} imports chord_core.runtime.store "
                         "(read through chord_core.runtime.store_read)")
        elif isinstance(node, ast.ImportFrom) and node.module == "chord_core.runtime" and \
                any(a.name == "store" for a in node.names):
            found.append(f"{where}:{node.lineno} imports chord_core.runtime.store")
        elif isinstance(node, ast.Import) and any(
                a.name == "chord_core.runtime.store" for a in node.names):
            found.append(f"{where}:{node.lineno} imports chord_core.runtime.store")
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else (
                fn.attr if isinstance(fn, ast.Attribute) else "")
            if name == "Store":
                found.append(f"{where}:{node.lineno} constructs Store(…) "
                             "(StoreView.open() reads; the manager writes)")
            elif name in WRITES or name == "writable":
                found.append(f"{where}:{node.lineno} calls {name}(…): a store write outside "
                             "the runtime (ask the manager: JobManager.parents)")
        elif isinstance(node, ast.Attribute) and node.attr == "_store":
            found.append(f"{where}:{node.lineno} reaches under a StoreView (._store)")
    return found


def test_nothing_above_the_runtime_opens_or_writes_the_store():
    sources = _sources()
    assert len(sources) > 100  # the scan sees the packages (not an empty glob)
    breaches = [b for p in sources for b in _breaches(p)]
    assert not breaches, "\n".join(breaches)


def test_the_scan_catches_each_kind_of_breach(tmp_path):
    """The scan itself fails on the breaches it is for (else the test above proves nothing)."""
    bad = tmp_path / "bad.py"
    bad.write_text("from chord_core.runtime.store import Store\n"
                   "from chord_core.runtime import store\n"
                   "s = Store()\n"
                   "s.add_job('j', video_path='v', task='t')\n"
                   "view._store.save_result('j', {})\n"
                   "writable(view)\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        kinds = _breaches(bad)
    finally:
        ROOT = old
    assert len(kinds) == 7, kinds  # two imports, Store(), add_job, _store, save_result, writable


def test_a_view_reads_and_has_no_write(tmp_path):
    from chord_core.errors import ChordError
    from chord_core.runtime.store import Store
    from chord_core.runtime.store_history import HistoryQuery
    from chord_core.runtime.store_read import StoreView, writable
    from chord_core.testing.library_docs import result_doc, store_result

    path, job_id = tmp_path / "chord.sqlite3", "job-a"
    with Store(path) as store:
        store_result(store, job_id, result_doc("describe", "/clips/a.mp4", text="a red car"))
        view = StoreView(store)
        row = view.get_job(job_id)
        assert row is not None and row["state"] == "done" and row["video_name"] == "a.mp4"
        assert view.get_result(job_id)["schema"] == "chord.result/v1"
        assert [r["job_id"] for r in view.history(HistoryQuery())] == [job_id]
        assert view.history_count(HistoryQuery(task="ground")) == 0
        assert view.history_tasks() == ["describe"]
        assert writable(view) is store  # the runtime's manager writes the store under it
        view.close()  # a view of another's store leaves it open
        assert store.get_job(job_id) is not None
    for name in WRITES | {"delete", "execute"}:
        assert not hasattr(view, name), name
    with StoreView.open(path) as own:
        assert own.count_jobs() == 1
        with pytest.raises(ValueError, match="SELECT"):
            own.read("DELETE FROM jobs")
    with pytest.raises(ChordError, match="is closed"):  # open() owns its connection
        own.read("SELECT 1")


def test_a_view_of_a_view_cannot_be_written(tmp_path):
    from chord_core.runtime.store_read import StoreView, writable

    with StoreView.open(tmp_path / "chord.sqlite3") as inner:
        with pytest.raises(TypeError, match="cannot be written"):
            writable(StoreView(inner))
