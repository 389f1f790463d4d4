"""``GET /v1/identity?challenge=HEX``: the service proves it is the one that wrote
``service.json`` (``discovery.verify``), without a key (the CLI asks before it sends one).

The answer is ``{"service": "chord", "proof": HMAC-SHA256(token, challenge)}`` under the
token ``serve`` put in the file (private to its user). It tells a caller nothing but that
this process holds the token: an HMAC of a challenge the caller chose. A service started
without advertising itself (no token) answers 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import Query, Request

from chord_core.service.http_errors import ApiError


async def identity(request: Request, challenge: str = Query(
        ..., min_length=32, max_length=128, pattern="^[0-9a-f]+$")) -> Any:
    """The proof for ``challenge`` (32–128 lowercase hex digits)."""
    from chord_core.service.discovery import proof

    token = getattr(request.app.state, "identity_token", "")
    if not token:
        raise ApiError(404, "this service does not advertise itself in a service.json",
                       "name it with --server URL (or CHORD_SERVER) instead")
    return {"service": "chord", "proof": proof(token, challenge)}
