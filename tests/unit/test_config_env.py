"""Every environment variable is read in one module (config.env_value) and listed in the
README's Configuration table; the launcher and Docker files name no variable the table lacks."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from chord_core.config import ENV_VARS, env_value

ROOT = Path(__file__).resolve().parents[2]
NAMES = {v.name for v in ENV_VARS}
SOURCES = sorted([*(ROOT / "chord_core").rglob("*.py"), *(ROOT / "chord_ui").rglob("*.py"),
                  *(ROOT / "views").glob("*.py"), ROOT / "app.py"])


def _reads(path: Path) -> list[str]:
    """Places that read the environment directly: os.environ.get / os.getenv / os.environ[…]
    in a load, and ``env.get(…)`` on a parameter called env or environ."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func in ("os.environ.get", "os.getenv", "env.get", "environ.get"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {func}")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if ast.unparse(node.value) in ("os.environ", "env", "environ"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_environment_is_read_only_in_config():
    outside = [r for p in SOURCES if p.name != "config.py" or p.parent.name != "chord_core"
               for r in _reads(p)]
    assert not outside, "read through chord_core.config.env_value:\n" + "\n".join(outside)


def test_every_name_read_is_in_the_table():
    used = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("env_value")
                    and node.args and isinstance(node.args[0], ast.Constant)):
                used.add(node.args[0].value)
    assert used and used <= NAMES, sorted(used - NAMES)


def test_readme_lists_every_variable():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Configuration"):]
    section = section[:section.index("\n## ", 5)]
    assert not [n for n in sorted(NAMES) if f"`{n}`" not in section]


@pytest.mark.parametrize("name", ["start_service.sh", "Dockerfile", "compose.yaml",
                                  "scripts/docker-smoke.sh"])
def test_launchers_name_only_known_variables(name):
    text = (ROOT / name).read_text()
    named = set(re.findall(r"\b(CHORD_[A-Z][A-Z0-9_]*[A-Z0-9])\b", text))
    assert named and named <= NAMES, sorted(named - NAMES)


def test_env_value_refuses_an_unlisted_name_and_strips():
    with pytest.raises(KeyError, match="ENV_VARS"):
        env_value("CHORD_NOT_A_SETTING", {})
    assert env_value("CHORD_MODEL", {"CHORD_MODEL": "  test "}) == "test"
    assert env_value("CHORD_MODEL", {}) == ""
