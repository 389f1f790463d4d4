"""Chord as an HTTP service (``python -m chord_core serve``).

    settings.py      where it listens, the API key, request limits (CHORD_API_* variables)
    runtime.py       the JobManager + store it runs on; submit / wait / token counts
    app.py           create_app(runtime, settings): Host/Origin guard, body limit, auth
    http_errors.py   every error as {"error", "hint"} with a fitting status
    media.py         paths under the media roots, base64 / data URLs / uploads to private files
    jobs_routes.py   /health, /v1/models, /v1/jobs (submit, status, result, cancel, events)
    ofa.py           OFA-VE's POST /batch_predict (visual entailment, many pairs at once)
    readers.py       processes that read heavy request bodies beside the dispatcher
    chat.py          OpenAI-compatible POST /v1/chat/completions (incl. streaming)
    cli.py           the serve subcommand

FastAPI is imported only here: ``import chord_core`` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "ServiceSettings", "settings_from_env"]


def __getattr__(name: str) -> Any:  # lazy: FastAPI loads only when the service is used
    if name == "create_app":
        from chord_core.service.app import create_app

        return create_app
    if name in ("ServiceSettings", "settings_from_env"):
        from chord_core.service import settings

        return getattr(settings, name)
    raise AttributeError(name)
