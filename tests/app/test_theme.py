"""One light/dark theme for every page (issue 39: a reload of /history came back light).

Streamlit keeps the menu's theme under a localStorage key made of the path a tab was loaded
at; chord_ui/static/theme.js writes one shared choice under every page's key. Here: the
page paths it is given, that the app mounts it on every page with them, and the script's
sync run under Node on a fake localStorage through the sequences a user makes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("base", "paths"), [
    ("", ["/", "/history", "/history/"]),
    ("chord", ["/chord", "/chord/", "/chord/history", "/chord/history/"]),
    ("/a/b/", ["/a/b", "/a/b/", "/a/b/history", "/a/b/history/"]),
], ids=["root", "base-url", "nested-base"])
def test_page_paths(base: str, paths: list[str]) -> None:
    from chord_ui.theme import page_paths

    assert page_paths(["", "history"], base) == paths


def test_the_app_mounts_the_theme_sync_with_every_pages_path(new_app) -> None:
    """Mounted by app.py before the navigation runs (so on every page); AppTest shows the
    sidebar of the first page only."""
    at = new_app().run()
    assert not at.exception
    [el] = [e for e in at.sidebar if getattr(e, "key", None) == "chord-theme"]
    data = json.loads(el.proto.json)
    assert data["version"] == 2
    assert {"/", "/history", "/review", "/batch", "/library", "/gpus", "/live"} <= set(
        data["paths"])


_NODE = """
import {{ syncTheme }} from {module};
const store = new Map();
const storage = {{
  get length() {{ return store.size; }},
  key: (i) => [...store.keys()][i] ?? null,
  getItem: (k) => (store.has(k) ? store.get(k) : null),
  setItem: (k, v) => store.set(k, String(v)),
}};
const paths = ["/", "/history", "/review"];
const out = [];
const key = (p) => `stActiveTheme-${{p}}-v2`;
const snap = (what) => out.push([what, Object.fromEntries(paths.map((p) => [p, storage.getItem(key(p))]))]);
syncTheme(storage, paths, 2); snap("never chosen");
storage.setItem(key("/"), '"Dark"'); syncTheme(storage, paths, 2); snap("dark on /");
storage.setItem(key("/other"), '"System"'); syncTheme(storage, paths, 2); snap("a new key");
storage.setItem(key("/history"), '"Light"'); syncTheme(storage, paths, 2); snap("light on /history");
syncTheme(storage, paths, 2); snap("again");
console.log(JSON.stringify(out));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run theme.js")
def test_the_sync_spreads_the_choice_made_on_one_page(tmp_path: Path) -> None:
    module = tmp_path / "theme.mjs"
    module.write_text((ROOT / "chord_ui" / "static" / "theme.js").read_text())
    script = tmp_path / "run.mjs"
    script.write_text(_NODE.format(module=json.dumps(module.as_uri())))
    done = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    steps = dict(json.loads(done.stdout))
    none = {"/": None, "/history": None, "/review": None}
    dark = dict.fromkeys(none, '"Dark"')
    assert steps == {"never chosen": none, "dark on /": dark,
                     "a new key": dark,  # a page loaded first with its own default: no override
                     "light on /history": dict.fromkeys(none, '"Light"'),
                     "again": dict.fromkeys(none, '"Light"')}
