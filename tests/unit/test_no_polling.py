"""No polling loops (issue 38): the dispatcher blocks on its inbox, and nothing in the
runtime, the service, long video, the library or the CLI sleeps in a loop to see whether
something changed. Found by reading the code (``ast``), in every module of the five folders
and ``threads.py``:

* ``time.sleep`` / ``asyncio.sleep`` / ``sleep`` called inside a ``for`` or ``while`` loop;
* ``Event().wait(t)`` anywhere — a fresh Event nobody can set: a sleep in disguise;
* a call given a constant ``timeout=`` under a second inside a loop (the dispatcher's old
  ``executor.events(timeout=0.05)``: a 50 ms tick);
* ``while not <x>.wait(t):`` — a loop woken by a timeout to look again.

Allowed only for true timers (work due every N seconds, or a pause between bounded steps —
never a state looked at again) and a bounded wait for what no call can block on (an OS
thread's end), each listed in ``TIMERS`` with the reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ["runtime", "service", "longvideo", "library", "cli", "threads.py"]
# (module, function): why a timed wait in a loop is a timer there, not a poll
TIMERS = {
    ("chord_core/service/retention.py", "_run"):
        "uploads older than the retention are swept every interval_s: work due by the clock",
    ("chord_core/library/catch_up.py", "_behind"):
        "a pause between bounded indexing steps so others' requests run in between (a "
        "yield for fairness, issue 40's first-search case); it looks at no state",
    ("chord_core/threads.py", "native_end"):
        "an OS thread's end, after its Python join, has nothing to block on (CPython's "
        "threads are detached): a bounded wait of at most 2 s at a worker thread's or a "
        "pool's stop, so the process does not finalize under torch's thread-local teardown",
    ("chord_core/runtime/ray_executor.py", "_flusher"):
        "a Ray worker's buffered messages go out every FLUSH_S in one batch (a Ray queue "
        "call per message is too slow); the dispatcher is woken by the batch, not polling",
}
SLEEPS = {"sleep"}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_name(node.func)}()"
    return "?"


def _timed_wait(call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
        and call.func.attr == "wait" and bool(call.args or call.keywords)


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path, self.found, self._loops, self._func = path, [], 0, ""

    def _where(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{self.path}:{node.lineno} in {self._func or '<module>'}: {what}")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, loops = self._func, self._loops
        self._func, self._loops = node.name, 0  # a function defined in a loop runs later
        self.generic_visit(node)
        self._func, self._loops = outer, loops

    visit_AsyncFunctionDef = visit_FunctionDef

    def _loop(self, node: ast.AST) -> None:
        self._loops += 1
        self.generic_visit(node)
        self._loops -= 1

    visit_For = visit_AsyncFor = _loop

    def visit_While(self, node: ast.While) -> None:
        test = node.test.operand if isinstance(node.test, ast.UnaryOp) else node.test
        if _timed_wait(test) and (self.path, self._func) not in TIMERS:
            self._where(node, f"while … {_name(test.func)}(timeout): a loop woken to look "
                              f"again")
        self._loop(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _name(node.func)
        if self._loops and name.split(".")[-1] in SLEEPS and (self.path, self._func) \
                not in TIMERS:
            self._where(node, f"{name}() in a loop")
        short = [k for k in node.keywords if k.arg == "timeout"
                 and isinstance(k.value, ast.Constant)
                 and isinstance(k.value.value, (int, float)) and k.value.value < 1]
        if self._loops and short:
            self._where(node, f"{name}(timeout={short[0].value.value}) in a loop: a tick")
        if _timed_wait(node) and isinstance(node.func, ast.Attribute) \
                and _name(node.func.value).endswith("Event()"):
            self._where(node, "Event().wait(timeout): a sleep in disguise")
        self.generic_visit(node)


def polls(folder: str) -> list[str]:
    found: list[str] = []
    base = ROOT / "chord_core" / folder
    for path in [base] if base.is_file() else sorted(base.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        finder = _Finder(rel)
        finder.visit(ast.parse(path.read_text(), rel))
        found += finder.found
    return found


@pytest.mark.parametrize("folder", FOLDERS)
def test_nothing_sleeps_in_a_loop(folder: str) -> None:
    assert polls(folder) == []


def test_the_finder_finds_each_kind_of_poll(tmp_path: Path) -> None:
    source = '''
import threading, time, asyncio
def a():
    while True:
        time.sleep(0.05)
async def b():
    for _ in range(3):
        await asyncio.sleep(1)
def c(stop):
    while not stop.wait(0.25):
        pass
def d():
    threading.Event().wait(2)
def e(executor):
    while True:
        executor.events(timeout=0.05)
def fine(stop, handle):
    handle.wait()
    while not stop.is_set():
        handle.result(timeout=5)
'''
    finder = _Finder("x.py")
    finder.visit(ast.parse(source))
    assert [f.split(" in ")[1].split(":")[0] for f in finder.found] == ["a", "b", "c", "d", "e"]


def test_every_listed_timer_still_exists() -> None:
    for path, func in TIMERS:
        tree = ast.parse((ROOT / path).read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == func for n in ast.walk(tree)), \
            (path, func)
