"""Chord — local video understanding on Qwen2.5-VL. Entry point: ``streamlit run app.py``.

Sets the page up and hands over to the pages in ``views/`` through ``st.navigation``. (Not a
folder named ``pages/``: Streamlit would run a page file of it alone, without this script,
until some visit ran ``st.navigation``: a fresh server's first visit to /review did.)
Long-lived objects (job manager and its worker processes, store, GPU sampler) live in
``chord_ui.resources``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import streamlit as st

from chord_ui import library_view, live_view, resources, theme, watch_view
from chord_ui.i18n import cjk_font_notice, language_switch, t
from chord_ui.messages import store_notices
from chord_ui.quiet_logs import quiet_worker_warnings

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

# A shipped file, not ":material/…:": Streamlit would fetch that tab icon from a font CDN, and
# nothing may leave the machine.
ICON = Path(__file__).resolve().parent / "chord_ui" / "static" / "icon.png"


def main() -> None:
    """The page: its config, the navigation, the watched folders and the alert toasts."""
    st.set_page_config(page_title="Chord", page_icon=str(ICON), layout="wide")
    # Page titles in the interface language (English or Chinese: chord_ui.i18n); the URLs come
    # from the file names (/batch, /history, /library, /review, /gpus), the same in both.
    pages = [
        st.Page("views/analyze.py", title=t("Analyze"), icon=":material/movie:", default=True),
        st.Page("views/batch.py", title=t("Batch"), icon=":material/video_library:"),
        st.Page("views/history.py", title=t("History"), icon=":material/history:"),
        st.Page("views/library.py", title=t("Library"), icon=":material/travel_explore:"),
        st.Page("views/review.py", title=t("Review"), icon=":material/fact_check:"),
        st.Page("views/live.py", title=t("Live"), icon=":material/videocam:"),
        st.Page("views/gpus.py", title=t("GPUs"), icon=":material/memory:"),
    ]

    navigation = st.navigation(pages)
    language_switch()
    cjk_font_notice()  # Chinese chosen, no CJK font here: say which package draws it
    store_notices(resources.store().notices)  # a damaged store moved aside: say so
    with st.sidebar:  # the theme chosen in Settings, the same on every page and reload
        theme.keep_theme([page.url_path for page in pages])
    library_view.start_watches()  # CHORD_WATCH: watched folders, once per server
    watch_view.start_saved()  # the folders watched from the Library page
    live_view.start_env_streams()  # CHORD_WATCH: its live streams, once per server
    library_view.alert_toasts()  # a toast per new alert of a standing check, on every page
    navigation.run()


# A model worker started by multiprocessing's "spawn" runs this file again, as "__mp_main__"
# (Streamlit makes the script the __main__ module): there it must do nothing at all — no
# page, no job manager, no watched folders (issue 38: a second watcher ran in the worker).
if __name__ == "__mp_main__":  # …where Streamlit's "missing ScriptRunContext" means nothing
    quiet_worker_warnings(worker_process=True)
else:
    main()
