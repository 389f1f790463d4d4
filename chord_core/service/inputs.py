"""Checks on what a client sends, before anything is queued: JSON that parses (not nested
past the parser's depth), strings that are real Unicode, text that has something to read.

Each was a 500 before (issue 25): ``"[" * 100000`` raised RecursionError in the parser; a
lone surrogate (``"\\ud800"``) was queued, then the job's row could not be written and
``GET /v1/jobs/{id}`` answered 500 from then on; a statement of only zero-width characters
was scored while an empty one was refused.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from chord_core.errors import InputError
from chord_core.service.http_errors import ApiError

# invisible when alone: format characters (zero-width space/joiners, BOM, bidi marks) and
# controls; whitespace is stripped anyway
_INVISIBLE = frozenset({"Cf", "Cc", "Zs", "Zl", "Zp"})


def parse_json(raw: bytes, example: str) -> Any:
    """The parsed body, or ApiError 400 that says why (``example`` shows a good body)."""
    try:
        doc = json.loads(raw or b"null")
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply to read",
                       f"send a flat JSON object, e.g. {example}") from None
    except ValueError:  # UnicodeDecodeError is one
        raise ApiError(400, "the request body is not valid JSON",
                       f"send a JSON object with Content-Type: application/json, e.g. {example}"
                       ) from None
    where = unencodable_at(doc)
    if where is not None:
        raise ApiError(400, f"{where} holds a lone UTF-16 surrogate (an escape like \\ud800 "
                            "without its pair), which is not text",
                       "send valid Unicode: encode the text as UTF-8, or escape characters "
                       "outside the BMP as a surrogate pair")
    return doc


def unencodable_at(value: Any, where: str = "body") -> str | None:
    """Where the first string that cannot be UTF-8 encoded lies in a parsed JSON value
    (``body.tasks[3].text``), or None. Walked without recursion: the value may be deep."""
    stack = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and not _encodes(item):
                return path
        elif isinstance(item, dict):
            for key, sub in item.items():
                name = f"{path}.{key}" if isinstance(key, str) and _encodes(key) \
                    else f"{path}[{key!r}]"
                stack += [(name, key), (name, sub)]
        elif isinstance(item, list):
            stack += [(f"{path}[{i}]", sub) for i, sub in enumerate(item)]
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def has_visible(text: str) -> bool:
    """True when ``text`` holds one character a reader would see."""
    return any(unicodedata.category(ch) not in _INVISIBLE for ch in text)


def text_field(value: Any, where: str) -> str:
    """A text field as the job gets it: a string (else InputError), "" when nothing in it is
    visible, so that zero-width-only text is refused exactly like empty text."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{where} must be a string, got {type(value).__name__}",
                         hint=f'e.g. "{where}": "a dog runs across the lawn"')
    if not _encodes(value):
        raise InputError(f"{where} holds a lone UTF-16 surrogate, which is not text",
                         hint="send valid Unicode (UTF-8)")
    return value if has_visible(value) else ""
