"""A damaged job store is moved aside and a new one started (``runtime.store_repair``);
``Store.notices`` says so, and the app says it on every page's sidebar in the interface
language, so a user who finds History empty knows why and where the old file is."""

from __future__ import annotations


def test_a_store_moved_aside_is_said_on_the_sidebar(new_app, app_server, tmp_path) -> None:
    from chord_core.runtime.store_repair import move_aside
    from chord_ui.formatting import md_escape

    (tmp_path / "data_*dir*").mkdir()  # Markdown in the path: shown as written
    damaged = tmp_path / "data_*dir*" / "chord.sqlite3"
    damaged.write_bytes(b"this is not a database " * 64)
    notice = move_aside(damaged, "file is not a database")  # the real notice, as written
    assert not damaged.exists()
    notices = app_server["store"].notices  # the server's store: the list its pages read
    notices.append(notice)
    try:
        at = new_app().run()
        assert not at.exception
        assert [w.value for w in at.sidebar.warning] == [md_escape(notice)]
        at = new_app()
        at.query_params["lang"] = "zh"
        at.run()
        [said] = [w.value for w in at.sidebar.warning]
        where = md_escape(damaged)
        assert said.startswith(f"作业存储 {where} 无法使用（file is not a database）")
        assert where + md_escape(".corrupt-") in said and "earlier history" not in said
    finally:
        notices.remove(notice)
    assert not new_app().run().sidebar.warning  # none: nothing is said
