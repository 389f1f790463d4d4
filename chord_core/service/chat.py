"""OpenAI-compatible ``POST /v1/chat/completions`` over Chord's describe task.

One request = one image or one clip (``image_url`` / ``video_url`` parts: data URLs, or paths
/ ``file://`` URLs under the media roots) plus the question in the text parts. It runs as a
``describe`` job with the question as its prompt, on the same workers as everything else.

What is honoured and what is not, said once here and in each answer's ``chord.notes``:
decoding is greedy (any ``temperature``, ``top_p`` accepted and noted); ``n`` must be 1;
``max_tokens`` is the job's generation limit (``finish_reason: length`` when it was reached;
the default is 512); ``stream: true`` sends the
answer as SSE chunks once the job is done (the workers do not stream tokens), ending with
``data: [DONE]``; ``usage`` holds the tokens the model really read (chat template, question
and visual tokens) and wrote, from the job's result. When the answer holds
box JSON (ask for it in words: "give the bbox_2d of the dog as JSON"), ``chord.boxes`` holds
the boxes normalised to 0–1 of the image or frame (read in the model family's convention:
input pixels for Qwen2.5-VL, 0–1000 for Qwen3-VL).
"""

from __future__ import annotations

import os
import time
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from chord_core.config import MAX_NEW_TOKENS_DEFAULT, MAX_NEW_TOKENS_RANGE
from chord_core.errors import InputError
from chord_core.service.http_errors import ApiError, from_job_error, invalid_body
from chord_core.service.inputs import has_visible

router = APIRouter()
MEDIA_PARTS = ("image_url", "video_url")
ALIASES = ("chord",)
CHUNK_CHARS = 24


class ChatBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return content
    if content is None:
        return []
    raise InputError("a message's content must be a string or a list of parts",
                     hint='e.g. [{"type": "text", "text": "What happens?"}, {"type": '
                          '"image_url", "image_url": {"url": "data:image/png;base64,…"}}]')


def split_messages(messages: list[dict[str, Any]]) -> tuple[str, list[tuple[str, Any]]]:
    """(question, media parts): system texts + the last user message's texts; every
    image_url / video_url part of user messages."""
    system, last_user, media = [], [], []
    for msg in messages:
        role, parts = msg.get("role"), _parts(msg.get("content"))
        texts = [str(p.get("text", "")) for p in parts if p.get("type") == "text"]
        if role in ("system", "developer"):
            system += texts
        elif role == "user":
            last_user = texts
            media += [(p["type"], p.get(p["type"])) for p in parts if p.get("type") in MEDIA_PARTS]
    question = "\n".join(t for t in system + last_user if has_visible(t))
    return question, media


def served_names(served: str) -> tuple[str, ...]:
    """The names a client may send for the served model: its id as given (hub id or folder),
    the hub id's or folder's last part, ``Qwen/<folder name>`` for a folder of a Qwen repo
    (``hf download … --local-dir ./Qwen2.5-VL-3B-Instruct``), and the fixed alias ``chord``.
    OpenAI clients send the name they were configured with; a 404 for the same weights under
    another of their names helps no one."""
    tail = served.rstrip("/").rsplit("/", 1)[-1]
    names = [served, tail]
    folder = served.startswith(("/", ".", "~")) or os.path.isdir(served)
    if folder and tail.lower().startswith("qwen"):
        names.append(f"Qwen/{tail}")
    return tuple(dict.fromkeys(n for n in (*names, *ALIASES) if n))


def _check(body: ChatBody, served: str, settings: Any) -> tuple[int, list[str]]:
    """The generation limit to ask for and the notes; ApiError for what cannot be done."""
    names = served_names(served)
    if body.model and body.model.casefold() not in {n.casefold() for n in names}:
        raise ApiError(404, f"the model {body.model!r} is not served here",
                       "use model " + " or ".join(repr(n) for n in names) + " (GET /v1/models)")
    if body.n not in (None, 1):
        raise ApiError(400, "n must be 1", "ask again for another answer (decoding is greedy, "
                                           "so it would be the same)")
    if not body.messages:
        raise ApiError(400, "messages is empty", "send at least one user message")
    notes = []
    if body.temperature not in (None, 0, 0.0) or body.top_p not in (None, 1, 1.0):
        notes.append("decoding is greedy: temperature/top_p were ignored")
    limit = body.max_completion_tokens or body.max_tokens
    cap = min(settings.max_new_tokens, MAX_NEW_TOKENS_RANGE[1])
    if limit is not None and not 1 <= limit <= cap:
        raise ApiError(400, f"max_tokens must be 1–{cap:,}, got {limit:,}",
                       "e.g. max_tokens: 512 (this server's cap is CHORD_API_MAX_NEW_TOKENS)")
    return (limit or min(MAX_NEW_TOKENS_DEFAULT, cap)), notes


async def _media(media: list[tuple[str, Any]]) -> str:
    from chord_core.service.media import media_from_url

    if len(media) != 1:
        raise ApiError(400, f"{len(media) or 'no'} images/videos in the request; Chord answers "
                            "about exactly one", "send one image_url or video_url part in the "
                                                 "user message")
    kind, url = media[0]
    return str(await run_in_threadpool(media_from_url, url, kind=kind))


_BODY_SCHEMA = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": ChatBody.model_json_schema()}}}}


async def _read_body(request: Request) -> ChatBody:
    """The body, read here rather than by FastAPI: too-deep JSON and lone surrogates are
    400s that say so (they were 500s), and the key was checked before any of it was read."""
    from pydantic import ValidationError

    from chord_core.service.inputs import parse_json

    doc = parse_json(await request.body(), '{"messages": [{"role": "user", "content": "…"}]}')
    try:
        return ChatBody.model_validate(doc)
    except ValidationError as exc:
        raise invalid_body(exc, "send OpenAI's chat completion request: model, messages, "
                                "max_tokens") from None


@router.post("/v1/chat/completions", response_model=None, openapi_extra=_BODY_SCHEMA)
async def chat_completions(request: Request) -> Any:
    """Answer a question about one image or clip, OpenAI style (optionally streamed)."""
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.media.roots import job_roots
    from chord_core.runtime.jobs import JobSpec
    from chord_core.service.caps import capped_sampling

    rt, settings = request.app.state.runtime, request.app.state.settings
    body = await _read_body(request)
    limit, notes = _check(body, rt.model, settings)
    question, media = split_messages(body.messages)
    path = await _media(media)
    # the model stops at max_tokens: nothing is generated only to be cut away
    spec = JobSpec(AnalysisRequest(path, "describe", question,
                                   capped_sampling(settings, "describe"), max_new_tokens=limit,
                                   media_roots=job_roots()),  # the worker re-checks at open
                   model=None, label="api chat")
    (job_id,) = await rt.submit([spec])
    try:
        (st,) = await rt.wait_all([job_id], settings.request_timeout_s, request)
    except TimeoutError:
        raise ApiError(503, f"no answer within {settings.request_timeout_s:g} s; the job was "
                            "cancelled", "retry later, ask for fewer tokens, or raise "
                                         "CHORD_API_TIMEOUT_S", {"Retry-After": "10"}) from None
    if st.result is None:
        raise from_job_error(st.error)
    doc = _completion(rt, job_id, st.result, question, limit, notes)
    if not body.stream:
        return doc
    usage = bool((body.stream_options or {}).get("include_usage"))
    return StreamingResponse(_chunks(doc, usage), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


def _completion(rt: Any, job_id: str, result: Any, question: str, limit: int,
                notes: list[str]) -> dict[str, Any]:
    text = result.text or ""
    tokens = result.tokens or {}  # what the model really read and wrote (describe jobs)
    completion = tokens["completion"] if "completion" in tokens else \
        min(limit, rt.count_tokens(text))
    finish = "length" if completion >= limit else "stop"
    if result.model.test_model:
        notes = [*notes, "test model — random weights; its text is meaningless"]
    prompt = tokens.get("prompt") or result.sampling.visual_tokens + rt.count_tokens(question)
    return {"id": f"chatcmpl-{job_id}", "object": "chat.completion", "created": int(time.time()),
            "model": rt.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
            "chord": {"job_id": job_id, "boxes": _boxes(text, result), "notes": notes,
                      "visual_tokens": result.sampling.visual_tokens}}


def _boxes(text: str, result: Any) -> list[dict[str, Any]]:
    """Boxes found in the answer, normalised to the image (or frame) the model saw."""
    from chord_core.analysis.grounding import parse_boxes

    wh = tuple(result.sampling.input_wh)
    coords = getattr(getattr(result, "model", None), "coords", "absolute")
    if min(wh, default=0) <= 0 or coords not in ("absolute", "relative1000"):
        return []
    parsed = parse_boxes(text, wh, coords=coords)  # never raises on model text
    return [{"bbox": [round(v, 4) for v in b.bbox], "label": b.label, "kind": b.kind}
            for b in parsed.boxes]


async def _chunks(doc: dict[str, Any], usage: bool) -> AsyncIterator[str]:
    """The answer as ``chat.completion.chunk`` events, then ``[DONE]``."""
    import json

    head = {k: doc[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    text = doc["choices"][0]["message"]["content"]
    deltas = [{"role": "assistant", "content": ""}] + [
        {"content": text[i:i + CHUNK_CHARS]} for i in range(0, len(text), CHUNK_CHARS)]
    for delta in deltas:
        choice = {"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}
        yield f"data: {json.dumps(head | {'choices': [choice]}, ensure_ascii=False)}\n\n"
    final = {"index": 0, "delta": {}, "finish_reason": doc["choices"][0]["finish_reason"],
             "logprobs": None}
    yield f"data: {json.dumps(head | {'choices': [final], 'chord': doc['chord']})}\n\n"
    if usage:
        yield f"data: {json.dumps(head | {'choices': [], 'usage': doc['usage']})}\n\n"
    yield "data: [DONE]\n\n"
