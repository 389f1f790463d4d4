"""The interface language: English or Simplified Chinese.

Every label, help text and message the pages show goes through ``t(english, **fields)``: the
English text is the key, ``chord_ui.locale_zh.ZH`` (Analyze) and
``chord_ui.locale_zh_pages.ZH_PAGES`` (the other pages) hold its Chinese. The language is the
user's choice (the sidebar switch, kept in the URL as ``?lang=zh`` so a reload or a shared
link keeps it), else the browser's language (``st.context.locale``). Results, JSON exports
and everything ``chord_core`` stores stay in English whatever the interface shows.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
from typing import Any

import streamlit as st

from chord_ui.locale_zh import ZH as _ZH_ANALYZE
from chord_ui.locale_zh_library import ZH_LIBRARY
from chord_ui.locale_zh_live import ZH_LIVE
from chord_ui.locale_zh_pages import ZH_PAGES
from chord_ui.locale_zh_review import ZH_REVIEW

ZH: dict[str, str] = {**ZH_LIVE, **ZH_REVIEW, **ZH_LIBRARY, **ZH_PAGES, **_ZH_ANALYZE}  # every Chinese text shown

log = logging.getLogger(__name__)

LANGS = {"en": "English", "zh": "中文"}
K_LANG = "ui_lang"
PARAM = "lang"


def browser_lang(locale: str | None) -> str:
    """``zh-CN``, ``zh-Hans``, ``zh`` → ``zh``; anything else (or nothing) → ``en``."""
    return "zh" if (locale or "").lower().startswith("zh") else "en"


def lang() -> str:
    """The language of this session: ``?lang=`` (kept for the session, so a page opened
    without it stays in that language), else the switch's choice, else the browser's."""
    param = st.query_params.get(PARAM)
    if param in LANGS:
        if st.session_state.get(K_LANG) != param:
            st.session_state[K_LANG] = param
        return param
    chosen = st.session_state.get(K_LANG)
    if chosen in LANGS:
        return chosen
    try:
        locale = st.context.locale
    except (AttributeError, RuntimeError):  # no browser (tests without a session)
        locale = None
    return browser_lang(locale)


def link_params(**params: str) -> dict[str, str]:
    """Query parameters of an in-app link (``st.page_link``, ``st.switch_page``, a URL):
    ``params`` plus the session's language, so the page it opens speaks the same one."""
    return {**params, PARAM: lang()}


def translate(text: str, language: str, **fields: Any) -> str:
    """``text`` in ``language`` with ``fields`` filled in (``str.format``). An English text
    without a Chinese entry is shown in English (and logged once), never dropped."""
    out = text
    if language == "zh":
        out = ZH.get(text, text)
        if out is text and text not in _MISSING:
            _MISSING.add(text)
            log.warning("no Chinese text for %r", text)
    return out.format(**fields) if fields else out


_MISSING: set[str] = set()


def t(text: str, **fields: Any) -> str:
    """``text`` in the session's language."""
    return translate(text, lang(), **fields)


_CHOICE_KEYS: set[str] = set()


def choice_key(key: str) -> str:
    """``key``, registered as a choice widget whose options are shown through ``t()``.

    Streamlit keeps a radio's or select box's value as the option's shown text: after a
    language switch the browser's English text matches none of the Chinese options, and all
    three model radios came back unchecked (seen in Chromium; AppTest does not show it). The
    switch sets these widgets' values again from Python, so they are sent in the new
    language. Keys are the same in every session, so one set for the process is enough."""
    _CHOICE_KEYS.add(key)
    return key


def _on_switch() -> None:
    choice = st.session_state.get("lang_switch")
    if choice in LANGS:
        st.session_state[K_LANG] = choice
        st.query_params[PARAM] = choice
        for key in sorted(_CHOICE_KEYS):
            if key in st.session_state:  # a widget of this page: its value sent again
                st.session_state[key] = st.session_state[key]


# Streamlit's file uploader writes its button and size line in English with no option to
# change them: in Chinese they are drawn by CSS instead (a fixed string, no user data).
_ZH_UPLOADER_CSS = """<style>
[data-testid=stFileUploaderDropzone] button [data-testid=stMarkdownContainer] p,
[data-testid=stFileUploaderDropzoneInstructions] > div > span,
[data-testid=stFileUploaderDropzoneInstructions] > div > small { font-size: 0 !important; }
[data-testid=stFileUploaderDropzone] button [data-testid=stMarkdownContainer] p::after {
  content: "上传"; font-size: 0.875rem; }
[data-testid=stFileUploaderDropzoneInstructions] > div::after {
  content: "每个文件最大 2GB · MP4、AVI、MOV、MKV、WEBM"; font-size: 0.875rem; opacity: 0.7; }
</style>"""


def language_switch() -> None:
    """English / 中文, in the sidebar of every page. The choice goes into the URL."""
    current = lang()
    if st.session_state.get(K_LANG) == current and st.query_params.get(PARAM) != current:
        st.query_params[PARAM] = current  # a page opened without ?lang=: a reload keeps it
    if current == "zh":
        st.html(_ZH_UPLOADER_CSS)
    st.session_state["lang_switch"] = current
    st.sidebar.segmented_control("Language / 语言", list(LANGS), format_func=LANGS.get,
                                 key="lang_switch", on_change=_on_switch, required=True,
                                 label_visibility="collapsed")


CJK_PACKAGE = "fonts-noto-cjk"
# Said in English on purpose: without a CJK font the Chinese of this line would be boxes too.
NO_CJK_FONT = (f"No Chinese font was found on this machine, so Chinese text may show as "
               f"empty boxes. Install the Debian package `{CJK_PACKAGE}` (`sudo apt install "
               f"{CJK_PACKAGE}`), then reload the page.")


@functools.cache
def has_cjk_font() -> bool | None:
    """Whether fontconfig knows a font with Chinese glyphs (``fc-list :lang=zh``); None when
    it cannot tell (no fc-list, or it failed). Asked once per process: fonts rarely change
    while the app runs, and a page must not start a process on every rerun."""
    exe = shutil.which("fc-list")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, ":lang=zh", "family"], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("fc-list could not list the Chinese fonts: %s", exc)
        return None
    return bool(out.stdout.strip())


def cjk_font_notice() -> None:
    """One info line when the interface is Chinese and this machine has no CJK font (the app
    is local: the browser draws with this machine's fonts)."""
    if lang() == "zh" and has_cjk_font() is False:
        st.info(NO_CJK_FONT, icon=":material/font_download_off:")
