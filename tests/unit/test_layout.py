"""The house plan holds: chord_core's floors import only downwards, nothing imports in a
circle (lazy imports inside functions count; ``if TYPE_CHECKING:`` blocks do not), and no
module outgrows the size a reader can hold in mind without saying why.

Floors, lowest first (docs/architecture.md draws them):

    ground    errors, families, threads, types, config
    tools     testing/            (synthetic clips, tiny random-weight checkpoints)
    media     media/              gpus/
    model     model/
    analysis  analysis/
    runtime   runtime/
    above     longvideo/  library/  streams/  service/  compat  __main__ / cli
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "chord_core"
FLOORS = {"errors": 0, "families": 0, "threads": 0, "types": 1, "config": 1, "testing": 2, "media": 3,
          "gpus": 3, "model": 4, "analysis": 5, "runtime": 6, "longvideo": 7, "library": 7, "streams": 7, "service": 8,
          "compat": 8, "cli": 9, "__main__": 9}
MAX_LINES = 420  # "about 400": a module a reader can hold in mind
# Longer on purpose; each says why.
LONG_OK = {
    "chord_core/model/fastgen.py": "the fast decoder's buffers, graphs and loop read as one "
                                   "unit; split, each half needs the other's invariants",
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package itself: the public API, above everything
    return FLOORS.get(parts[1])


def _imports(path: Path) -> set[str]:
    """chord_core modules imported anywhere in the file, TYPE_CHECKING blocks excepted."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("chord_core"):
            for alias in node.names:  # `from chord_core.x import y` may import module x.y
                sub = f"{node.module}.{alias.name}"
                found.add(sub if _exists(sub) else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("chord_core"))
    return found


def _exists(module: str) -> bool:
    rel = Path(*module.split("."))
    return (ROOT / rel).with_suffix(".py").exists() or (ROOT / rel / "__init__.py").exists()


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PKG.rglob("*.py")):
        mod = _module(path)
        graph[mod] = {m for m in _imports(path) if m != mod and m != "chord_core"}
    return graph


def test_floors_import_only_downwards():
    wrong = []
    for mod, deps in _graph().items():
        here = _floor(mod)
        if here is None:
            continue
        for dep in deps:
            there = _floor(dep)
            if there is not None and there > here:
                wrong.append(f"{mod} (floor {here}) imports {dep} (floor {there})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" → ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert not cycles, "\n".join(cycles)


def test_every_import_of_chord_core_resolves():
    """Each ``from chord_core.x import name`` in the repository names something that exists
    (a moved module or function breaks here, not in a rarely run path)."""
    import importlib

    missing = []
    for path in sorted(ROOT.glob("*.py")) + sorted(
            p for d in ("chord_core", "chord_ui", "views", "tests", "benchmarks", "scripts")
            for p in (ROOT / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.startswith("chord_core")):
                continue
            module = importlib.import_module(node.module)
            missing += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{a.name}"
                        for a in node.names if not hasattr(module, a.name)
                        and not _exists(f"{node.module}.{a.name}")]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")))
def test_module_size(path):
    lines = len((ROOT / path).read_text().splitlines())
    if path in LONG_OK:
        return
    assert lines <= MAX_LINES, f"{path} has {lines} lines (> {MAX_LINES}): split it by job"


def test_the_package_exports_every_error():
    """``from chord_core import …`` reaches every error the engine raises."""
    import inspect

    import chord_core
    from chord_core import errors

    raised = {name for name, obj in vars(errors).items() if inspect.isclass(obj)
              and issubclass(obj, Exception) and obj.__module__ == errors.__name__}
    assert raised and raised <= set(chord_core.__all__), sorted(raised - set(chord_core.__all__))


def _drawn_floors() -> dict[str, int]:
    """The floors as docs/architecture.md draws them: the first code block after "The
    floors", one line per floor (``N label  names…  (what)``)."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## The floors", 1)[1].split("```", 2)[1]
    drawn: dict[str, int] = {}
    for line in block.splitlines():
        m = re.match(r"\s*(\d+)\s+\w+\s+(.*)$", line)
        if m is None:
            continue
        names = m.group(2).split("(")[0].split()
        drawn.update({n.rstrip("/"): int(m.group(1)) for n in names})
    return drawn


def test_the_architecture_diagram_draws_the_floors_this_test_enforces():
    drawn = _drawn_floors()
    assert drawn, "docs/architecture.md has no floors diagram"
    assert drawn == FLOORS


def test_the_type_checker_is_strict_on_the_seams():
    """mypy.ini (run by run_tests.sh before pytest) checks runtime/, service/, library/ and
    threads.py with every --strict flag on (issue 38): a flag turned off or a package dropped fails here."""
    import configparser

    ini = configparser.ConfigParser()
    ini.read(ROOT / "mypy.ini")
    cfg = ini["mypy"]
    files = {f.strip().rstrip("/") for f in cfg["files"].split(",")}
    assert {"chord_core/runtime", "chord_core/service", "chord_core/library",
            "chord_core/threads.py"} <= files
    strict = ("warn_unused_configs", "disallow_any_generics", "disallow_subclassing_any",
              "disallow_untyped_calls", "disallow_untyped_defs", "disallow_incomplete_defs",
              "check_untyped_defs", "disallow_untyped_decorators", "warn_redundant_casts",
              "warn_unused_ignores", "warn_return_any", "no_implicit_reexport",
              "strict_equality", "extra_checks")
    assert {f: cfg.getboolean(f, fallback=False) for f in strict} == dict.fromkeys(strict, True)
    assert "mypy" in (ROOT / "run_tests.sh").read_text()
