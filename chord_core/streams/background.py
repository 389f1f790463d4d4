"""Live streams named in the environment, for the app and ``serve``:

    CHORD_WATCH="rtsp://cam:pw@10.0.0.5/stream1|describe;/media/dock|ground|a forklift"
        an entry that is a stream address (rtsp://, rtsps://, http(s)://….m3u8,
        /dev/videoN) is a live stream; ``|ground|TARGET`` grounds TARGET on every chunk,
        ``|describe|PROMPT`` describes with PROMPT; folder entries stay the library's
    CHORD_WATCH_CHECKS / CHORD_WATCH_THRESHOLD   the standing checks, as for folders
    CHORD_LIVE_CHUNK_S=10          seconds per segment and chunk
    CHORD_LIVE_MAX_AGE_H=168       recordings older than this are deleted
    CHORD_LIVE_MAX_GB=20           each stream's recordings stay under this size
"""

from __future__ import annotations

from typing import Mapping

from chord_core.config import env_value
from chord_core.errors import ConfigError
from chord_core.streams.hub import StreamSettings
from chord_core.streams.sources import is_stream


def _number(name: str, default: float, env: Mapping[str, str] | None) -> float:
    raw = env_value(name, env)
    try:
        return float(raw) if raw else default
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number",
                          hint=f"give a number, e.g. {name}={default:g}") from None


def live_settings(model: str | None, env: Mapping[str, str] | None = None,
                  **given: object) -> StreamSettings:
    """The stream settings the environment gives (``given`` overrides, e.g. the CLI's)."""
    statements = tuple(s.strip() for s in env_value("CHORD_WATCH_CHECKS", env).split(";")
                       if s.strip())
    base: dict[str, object] = dict(
        chunk_s=_number("CHORD_LIVE_CHUNK_S", 10.0, env), statements=statements,
        threshold=_number("CHORD_WATCH_THRESHOLD", 0.8, env), model=model,
        max_age_s=_number("CHORD_LIVE_MAX_AGE_H", 168.0, env) * 3600.0,
        max_bytes=int(_number("CHORD_LIVE_MAX_GB", 20.0, env) * 2**30),
        hook=env_value("CHORD_WATCH_HOOK", env))
    base.update({k: v for k, v in given.items() if v is not None})
    return StreamSettings(**base)  # type: ignore[arg-type]


def streams_from_env(model: str | None,
                     env: Mapping[str, str] | None = None) -> list[tuple[str, StreamSettings]]:
    """The live streams ``CHORD_WATCH`` names (its folder entries are left to the library)."""
    out = []
    for entry in filter(None, (e.strip() for e in env_value("CHORD_WATCH", env).split(";"))):
        where, task, query = (entry.split("|", 2) + ["", ""])[:3]
        if not is_stream(where):
            continue
        task, query = task.strip() or "describe", query.strip()
        if task not in ("describe", "ground"):
            raise ConfigError(f"CHORD_WATCH: a stream's task is describe or ground, not {task!r}",
                              hint="e.g. rtsp://cam/1|ground|a forklift (standing checks: "
                                   "CHORD_WATCH_CHECKS)")
        extra = {"prompt": query} if task == "describe" else {"target": query}
        out.append((where.strip(), live_settings(model, env, **extra)))
    return out


def is_stream_entry(entry: str) -> bool:
    """Whether a ``CHORD_WATCH`` entry is a live stream (the folder watches skip those)."""
    return is_stream(entry.split("|", 1)[0])
