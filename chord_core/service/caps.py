"""What one request may ask of the workers: frames, pixels per frame, visual tokens and
generated tokens, capped by the server (``CHORD_API_MAX_*``), never by the client.

Measured before the caps (issue 25): one ``POST /v1/jobs`` with ``{"fps": 30, "max_frames":
1000000, "token_budget": 1000000000}`` on a 20 s 640×480 clip ran 600 frames and 117,300
visual tokens — worker +7.3 GiB and 49 s, against 20 frames and +174 MiB by default.

A value over a cap is refused (400, naming the cap and its variable), not silently lowered:
the client asked for something the server will not do. A request that asks nothing gets the
engine's defaults lowered to the caps. Grounding runs one image request per frame and never
drops frames to fit the budget, so its frame count is also held to what the visual-token cap
pays for at the smallest frame size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chord_core.service.http_errors import ApiError

if TYPE_CHECKING:
    from chord_core.service.settings import ServiceSettings


def _tokens_per_min_frame() -> int:
    from chord_core.config import MIN_PIXELS_DEFAULT, PATCH_PX

    return MIN_PIXELS_DEFAULT // (PATCH_PX * PATCH_PX)


def _over(name: str, value: int | None, cap: int, var: str) -> str | None:
    if value is None or value <= cap:
        return None
    return f"{name} {value:,} is over this server's cap of {cap:,} ({var})"


def check_caps(settings: Any, *, max_frames: int | None = None, max_pixels: int | None = None,
               token_budget: int | None = None, max_new_tokens: int | None = None) -> None:
    """ApiError 400 naming every asked-for value that is over its cap."""
    over = [m for m in (
        _over("max_frames", max_frames, settings.max_frames, "CHORD_API_MAX_FRAMES"),
        _over("max_pixels", max_pixels, settings.max_pixels, "CHORD_API_MAX_PIXELS"),
        _over("token_budget", token_budget, settings.max_visual_tokens,
              "CHORD_API_MAX_VISUAL_TOKENS"),
        _over("max_new_tokens", max_new_tokens, settings.max_new_tokens,
              "CHORD_API_MAX_NEW_TOKENS"),
    ) if m]
    if over:
        raise ApiError(400, "; ".join(over),
                       "ask for less (leave a field out for the server's default), or run the "
                       "job from the app or the CLI, which have no per-request caps")


def capped_sampling(settings: Any, task: str, *, fps: float | None = None,
                    max_frames: int | None = None, max_pixels: int | None = None,
                    token_budget: int | None = None) -> Any:
    """The ``SamplingConfig`` a request gets: what it asked (refused over a cap), else the
    engine's defaults lowered to the caps."""
    from chord_core.config import FRAME_FACTOR, MIN_FRAMES, SamplingConfig
    from chord_core.errors import ConfigError

    check_caps(settings, max_frames=max_frames, max_pixels=max_pixels,
               token_budget=token_budget)
    base = SamplingConfig()
    budget = token_budget if token_budget is not None else \
        min(base.token_budget, settings.max_visual_tokens)
    frames = max_frames if max_frames is not None else min(base.max_frames, settings.max_frames)
    if task != "describe":  # one image request per frame: frames are never dropped to fit
        paid = max(MIN_FRAMES, budget // _tokens_per_min_frame() // FRAME_FACTOR * FRAME_FACTOR)
        if max_frames is not None and max_frames > paid:
            raise ApiError(400, f"max_frames {max_frames:,} for {task} needs more than "
                                f"{budget:,} visual tokens even at the smallest frame size",
                           f"ask for at most {paid:,} frames, or a larger token_budget (up to "
                           f"{settings.max_visual_tokens:,}, CHORD_API_MAX_VISUAL_TOKENS)")
        frames = min(frames, paid)
    pixels = max_pixels if max_pixels is not None else settings.max_pixels
    fields: dict[str, Any] = {
        "fps": fps, "max_frames": frames, "token_budget": budget,
        "max_pixels": pixels if max_pixels is not None else min(pixels, base.max_pixels),
        "ground_max_pixels": pixels if max_pixels is not None else
        min(pixels, base.ground_max_pixels),
        "min_pixels": min(base.min_pixels, pixels)}
    try:
        return SamplingConfig(**fields)
    except ConfigError as exc:
        raise ApiError(400, exc.message, exc.hint) from None


def capped_new_tokens(settings: ServiceSettings, asked: int | None, default: int
                      ) -> int:
    """The generation limit a request gets: what it asked (1 up to the cap), else the
    default lowered to the cap."""
    if asked is None:
        return min(default, settings.max_new_tokens)
    if asked < 1:
        raise ApiError(400, f"max_new_tokens must be at least 1, got {asked}",
                       "e.g. 512, or leave it out for the server's default")
    check_caps(settings, max_new_tokens=asked)
    return asked


def fit_to_cap(settings: Any, request: Any, info: Any) -> Any:
    """``request`` with its frames sized so the whole request stays within the visual-token
    cap. A describe clip is one request whose budget is the cap already; grounding (and
    entailment over a video) pays its budget per frame, so on the probed clip the frame size
    is lowered (as the engine lowers it to fit a budget; the plan's notes say so) until
    frames × tokens per frame fits. Measured before: 186 frames at 644×476 were 72,726 visual
    tokens under a 24,000-token cap."""
    from dataclasses import replace

    from chord_core.config import PATCH_PX
    from chord_core.media.sampling import plan_sampling

    if request.task == "describe":
        return request
    planned = plan_sampling(info, request.task, request.sampling)
    cap = settings.max_visual_tokens
    if planned.visual_tokens <= cap:
        return request
    per_frame = cap // max(1, planned.num_frames)
    pixels = max(request.sampling.min_pixels, per_frame * PATCH_PX * PATCH_PX)
    sampling = replace(request.sampling,
                       ground_max_pixels=min(pixels, request.sampling.ground_max_pixels))
    return replace(request, sampling=sampling)
