"""Security of the app's inputs (issue 11): typed paths only under the media roots, one
message whatever lies outside them, bounded folder listings, uploads streamed to private
files, and user or model text shown as text, never rendered as markdown.

Canaries are files outside the roots (a "private key" FFmpeg would open as ANSI video, a real
video); every box and page is checked never to show, serve or describe them."""

from __future__ import annotations

import io
import os
import shutil
import stat
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest

from chord_core.errors import InputError
from chord_core.media import roots as media_roots

HISTORY_PAGE = "views/history.py"
BATCH_PAGE = "views/batch.py"
CANARY = b"-----BEGIN PGP PRIVATE KEY BLOCK-----\nCHORD-CANARY-7f3a\n" * 40


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_clip: Path) -> dict[str, Path]:
    """A media root with a good clip and traps, and a private folder outside it with canaries."""
    roots, outside = tmp_path / "roots", tmp_path / "outside"
    roots.mkdir()
    outside.mkdir(mode=0o700)
    (outside / "secret.asc").write_bytes(CANARY)
    (outside / "key.nfo").write_bytes(CANARY)
    shutil.copyfile(app_clip, outside / "clip.mp4")  # a real video, but outside the roots
    shutil.copyfile(app_clip, roots / "ok.mp4")
    (roots / "link.mp4").symlink_to(outside / "clip.mp4")
    (roots / "asc-link.mp4").symlink_to(outside / "secret.asc")
    (roots / "zero.mp4").symlink_to("/dev/zero")
    os.mkfifo(roots / "fifo.mp4")
    (roots / "notes.asc").write_bytes(CANARY)
    (roots / "types.d.ts").write_text("export {};\n")
    monkeypatch.setenv(media_roots.ENV, str(roots))
    return {"roots": roots, "outside": outside}


def _refusals(t: dict[str, Path]) -> dict[str, str]:
    roots, outside = t["roots"], t["outside"]
    return {"asc outside": str(outside / "secret.asc"), "nfo outside": str(outside / "key.nfo"),
            "video outside": str(outside / "clip.mp4"), "dotdot": f"{roots}/../outside/clip.mp4",
            "symlink out": str(roots / "link.mp4"), "symlink asc": str(roots / "asc-link.mp4"),
            "dev zero": str(roots / "zero.mp4"), "fifo": str(roots / "fifo.mp4"),
            "asc inside": str(roots / "notes.asc"),
            "missing out": str(outside / "missing.mp4"), "passwd": "/etc/passwd",
            "ssh key": "~/.ssh/id_rsa", "shadow": "/etc/shadow"}


def _same(message: str, typed: str) -> str:
    return message.replace(typed, "<typed>")


# -- the media roots, directly ------------------------------------------------------------------

def test_every_refusal_says_the_same(tree: dict[str, Path]) -> None:
    messages = {}
    for case, typed in _refusals(tree).items():
        with pytest.raises(InputError) as err:
            media_roots.resolve_video(typed)
        messages[case] = _same(err.value.message, typed)
    assert len(set(messages.values())) == 1, messages  # nothing tells what exists outside
    only = next(iter(messages.values()))
    assert "not a video file under the media roots" in only and str(tree["roots"]) in only
    assert media_roots.resolve_video(str(tree["roots"] / "ok.mp4")) == tree["roots"] / "ok.mp4"
    with pytest.raises(InputError) as err:  # inside a root (readable anyway): said plainly
        media_roots.resolve_video(str(tree["roots"] / "missing.mp4"))
    assert err.value.message == f"no such file in {tree['roots']}: missing.mp4"


def test_default_roots_and_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(media_roots.ENV, raising=False)
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path / "data"))
    roots = media_roots.configured_roots(data_dir=tmp_path)
    assert roots[0] == Path(os.path.realpath(tmp_path / "media"))
    assert roots[1:] == ([Path(os.path.realpath(Path.home() / "Videos"))]
                         if (Path.home() / "Videos").is_dir() else [])
    env = {media_roots.ENV: f"{tmp_path}/a{os.pathsep}{tmp_path}/b,{tmp_path}/a"}
    assert media_roots.configured_roots(env) == [tmp_path / "a", tmp_path / "b"]
    monkeypatch.setenv(media_roots.ENV, "off")
    with pytest.raises(InputError, match="switched off"):
        media_roots.resolve_video(str(tmp_path / "x.mp4"))
    upload = media_roots.uploads_root() / "abc.mp4"  # uploads stay readable when typing is off
    upload.parent.mkdir(parents=True, exist_ok=True)
    upload.write_bytes(b"x")
    assert media_roots.resolve_video(str(upload)) == Path(os.path.realpath(upload))


def test_folder_listing_is_bounded_and_only_regular_videos(tree: dict[str, Path]) -> None:
    roots = tree["roots"]
    listing = media_roots.list_videos(str(roots))
    assert listing.paths == [roots / "ok.mp4"] and not listing.truncated
    many = roots / "many"
    deep = many.joinpath(*[f"d{i}" for i in range(media_roots.MAX_DEPTH + 2)])
    deep.mkdir(parents=True)
    (deep / "too-deep.mp4").write_bytes(b"x")
    for i in range(30):
        (many / f"c{i:02d}.mp4").write_bytes(b"x")
    capped = media_roots.list_videos(str(many), limit=10)
    assert len(capped.paths) == 10 and capped.truncated
    full = media_roots.list_videos(str(many))
    assert len(full.paths) == 30 and full.truncated  # the too-deep file is not reached
    for outside in (str(tree["outside"]), "/", f"{roots}/../outside"):
        with pytest.raises(InputError, match="not a folder under the media roots"):
            media_roots.list_videos(outside)


def test_folder_listing_survives_vanishing_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc: entries vanish while it is walked; the walk ends, bounded, without a crash."""
    monkeypatch.setenv(media_roots.ENV, "/proc")
    start = time.monotonic()
    with pytest.raises(InputError, match="no video files"):
        media_roots.list_videos("/proc", max_seconds=2.0)
    assert time.monotonic() - start < 15


# -- uploads ----------------------------------------------------------------------------------

def test_upload_is_streamed_to_a_private_file(tmp_path: Path) -> None:
    from chord_ui import uploads

    data = os.urandom(1 << 20) * 48  # 48 MiB
    src = io.BytesIO(data)
    tracemalloc.start()
    clip = uploads.save_upload("big.mp4", src, tmp_path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 << 20, f"saving a 48 MiB upload allocated {peak / 2**20:.1f} MiB"
    path = Path(clip.path)
    assert path.stat().st_size == len(data) and clip.key == uploads.content_hash(data)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "uploads").stat().st_mode) == 0o700


def test_failed_upload_leaves_nothing(tmp_path: Path) -> None:
    from chord_ui import uploads

    class Broken(io.BytesIO):
        def read(self, n: int = -1) -> bytes:
            if self.tell() > 3 << 20:
                raise OSError(28, "No space left on device")
            return super().read(n)

    with pytest.raises(OSError):
        uploads.save_upload("x.mp4", Broken(b"\0" * (8 << 20)), tmp_path)
    assert list((tmp_path / "uploads").iterdir()) == []


# -- markdown --------------------------------------------------------------------------------

NASTY = ["![x](http://127.0.0.1:9/pixel.png)", "**bold** _it_ `code`", "# heading",
         "- item\n1. item", "[link](http://127.0.0.1:9/)", "<img src=x onerror=alert(1)>",
         ":red[colour] :material/home: $x^2$", "a\\b ~~gone~~ | t |", "> quote",
         "title\n===\ntext\n---", "    indented code\n+ plus\n2) two", "<http://127.0.0.1:9/>",
         "3.0 s #tag -x 2)x", "##\n--\n=="]


def _render(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def _visible(html_text: str) -> str:
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
def test_md_escape_shows_text_as_typed(text: str) -> None:
    from chord_ui.formatting import md_escape

    rendered = _render(md_escape(text))
    assert rendered.startswith("<p>") and rendered.count("<p>") == 1, rendered
    assert not {"<img", "<a ", "<strong", "<em", "<h1", "<ul", "<ol", "<code", "<s>",
                "<blockquote", "<table"} & {t for t in rendered.split() if t.startswith("<")}
    assert "<img" not in rendered and "<a " not in rendered
    assert " ".join(_visible(rendered).split()) == " ".join(text.split())


# -- the real pages ----------------------------------------------------------------------------

def _page_texts(at) -> list[str]:
    kinds = ("markdown", "caption", "subheader", "error", "warning", "info", "success",
             "title", "code")
    return [str(e.value) for kind in kinds for e in at.get(kind)]


def _assert_no_canary(at) -> None:
    shown = "\n".join(_page_texts(at))
    assert "CHORD-CANARY" not in shown and "PGP" not in shown
    assert not at.get("video") and not at.get("imgs")


def test_analyze_path_box_never_opens_a_canary(new_app, tree: dict[str, Path]) -> None:
    from chord_ui.formatting import md_escape

    at = new_app().run()
    messages = {}
    for case, typed in _refusals(tree).items():
        at.text_input(key="local_path").input(typed).run()
        assert not at.exception, (case, [e.value for e in at.exception])
        _assert_no_canary(at)
        assert len(at.error) == 1, (case, _page_texts(at))
        messages[case] = _same(at.error[0].value, md_escape(typed))
    assert len(set(messages.values())) == 1, messages
    assert "under the media roots" in messages["passwd"]
    at.text_input(key="local_path").input(str(tree["roots"] / "ok.mp4")).run()
    assert not at.error and len(at.get("video")) == 1  # the control: a clip under a root plays


def test_batch_folder_box_stays_under_the_roots(new_app, tree: dict[str, Path]) -> None:
    at = new_app().run()
    at.switch_page(BATCH_PAGE).run()
    for typed in (str(tree["outside"]), "/", "/proc", f"{tree['roots']}/../outside", "/dev"):
        at.text_input(key="batch_folder").input(typed).run()
        assert not at.exception
        assert "not a folder under the media roots" in at.error[0].value
        assert at.button(key="batch_queue").disabled
        _assert_no_canary(at)
    at.text_input(key="batch_folder").input(str(tree["roots"])).run()
    shown = " ".join(_page_texts(at))
    assert "**1 clip** ready to queue" in shown and "ok.mp4" in shown
    for trap in ("link", "asc-link", "zero", "fifo", "notes", "types"):
        assert trap not in shown


def test_refused_upload_is_deleted(new_app, app_env: dict[str, Path], tmp_path: Path) -> None:
    from chord_core.testing.videos import make_text_as_mp4

    data = make_text_as_mp4(tmp_path / "notes.mp4").read_bytes()
    at = new_app().run()
    at.file_uploader[0].set_value([("notes.mp4", data, "video/mp4")]).run()
    assert not at.exception and at.error
    uploads = app_env["data"] / "uploads"
    assert not uploads.exists() or not any(uploads.iterdir())


def test_history_shows_prompts_and_names_as_text(new_app, app_server, app_clip: Path,
                                                 tmp_path: Path) -> None:
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.runtime.jobs import JobSpec

    name = f"**{uuid.uuid4().hex[:6]}**[x](http:evil)_.mp4"
    path = tmp_path / name
    shutil.copyfile(app_clip, path)
    prompt = "![x](http://127.0.0.1:9/pixel.png) <b>hi</b> # not a heading"
    manager = app_server["manager"]
    job = manager.submit(JobSpec(AnalysisRequest(str(path), "describe", prompt,
                                                 max_new_tokens=128), model="test", label=name))
    manager.wait(job, 120.0)
    at = new_app().run()
    at.switch_page(HISTORY_PAGE).run()
    names = list(at.dataframe[0].value["clip"])
    at.session_state["history_table"] = {"selection": {"rows": [names.index(name)],
                                                       "columns": [], "cells": []}}
    at.run()
    assert not at.exception
    rendered = [_render(t) for t in _page_texts(at)]
    assert not any("<img" in r or "<a " in r for r in rendered), rendered
    visible = [" ".join(_visible(r).split()) for r in rendered]
    assert any(prompt in v for v in visible), visible  # the prompt, literally
    assert any(name in v for v in visible), visible   # the file name, literally


@pytest.mark.parametrize(("typed", "words"), [
    ("/tmp/clip\x00.mp4", "NUL byte"),
    ("~nosuchuser/x.mp4", "does not expand another account's home folder"),
    ("~root/x.mp4", "does not expand another account's home folder"),
], ids=["nul-byte", "unknown-account", "root-account"])
def test_path_box_refuses_nul_bytes_and_other_accounts(new_app, tree, typed, words) -> None:
    """A NUL byte or ``~name`` crashed the Analyze page (ValueError, RuntimeError); now one
    clear message, and ``~nosuchuser`` reads like ``~root`` (no account oracle)."""
    at = new_app().run()
    at.text_input(key="local_path").input(typed).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.error) == 1 and words in at.error[0].value
    assert "How to fix" in at.error[0].value
    assert at.button(key="run").disabled


def test_a_link_swapped_in_after_the_path_box_check_is_refused(new_app, tree, app_server) -> None:
    """The path box checks ``swap.mp4`` (a clip under the root); then it becomes a link to
    a different clip outside. Everything that opens it later (the page's probe, Run's content
    hash, the job's probe and reader) opens it under the roots again: the swap is refused, no
    job is queued, and the outside clip's size (160×120) and length never show."""
    from chord_core.testing.videos import make_video

    outside = make_video(tree["outside"] / "other.mp4", duration_s=2.0, fps=10.0,
                         size_wh=(160, 120)).path
    clip = tree["roots"] / "swap.mp4"
    shutil.copyfile(tree["roots"] / "ok.mp4", clip)
    at = new_app().run()
    at.text_input(key="local_path").input(str(clip)).run()
    assert not at.error and "Size **320×240**" in "\n".join(_page_texts(at))
    clip.unlink()
    clip.symlink_to(outside)
    at.run()
    if not at.error:  # the page's probe is cached by the clip's key: Run hashes the file
        at.button(key="run").click().run()
    assert all(j.spec.request.video_path != str(clip) for j in app_server["manager"].jobs())
    assert not at.exception
    shown = "\n".join(_page_texts(at))
    assert "is not a file under the media roots" in shown, shown
    assert "160×120" not in shown and "2 s" not in shown
