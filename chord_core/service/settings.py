"""Service settings: where it listens, who may call it, and how much one request may ask.

Read from ``CHORD_API_*`` variables, then CLI flags (``python -m chord_core serve``). Safe by
default: it binds 127.0.0.1; any other address needs an API key (Bearer) or an explicit
``--no-auth``, checked before a worker starts. Read at call time, never at import.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from typing import Callable, Mapping

from chord_core.config import env_value
from chord_core.errors import ConfigError

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
MIB = 1024 * 1024

DEFAULT_PORT = 8080
DEFAULT_MAX_BODY_MB = 256
DEFAULT_MAX_TASKS = 64
DEFAULT_TIMEOUT_S = 300.0
MAX_READERS = 32
# what one request may ask of the workers (caps.py); the defaults are the engine's own
# defaults, so a request that asks for nothing is never refused
DEFAULT_MAX_FRAMES = 768
DEFAULT_MAX_PIXELS = 1280 * 28 * 28  # ≈ 1 MP a frame: grounding's default size
DEFAULT_MAX_VISUAL_TOKENS = 24_000
DEFAULT_MAX_NEW_TOKENS = 2048
DEFAULT_READ_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 300.0
DEFAULT_MAX_STREAMS = 1024  # event streams one key (or, without a key, one address) holds
DEFAULT_UPLOAD_RETENTION_H = 24.0


def default_readers(cpus: int | None = None) -> int:
    """Request-reader processes: one per 4 cores, 1 to 4 (one reads one body at a time)."""
    return min(4, max(1, (cpus or os.cpu_count() or 2) // 4))


@dataclass(frozen=True)
class ServiceSettings:
    """Validated service settings. ``api_key`` empty + ``no_auth`` False = no key needed only
    because the service is bound to this machine."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str = ""
    no_auth: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_MB * MIB
    max_tasks: int = DEFAULT_MAX_TASKS
    request_timeout_s: float = DEFAULT_TIMEOUT_S
    allowed_hosts: tuple[str, ...] = field(default_factory=tuple)
    readers: int = 1
    max_frames: int = DEFAULT_MAX_FRAMES
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_visual_tokens: int = DEFAULT_MAX_VISUAL_TOKENS
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    upload_retention_h: float = DEFAULT_UPLOAD_RETENTION_H
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_streams: int = DEFAULT_MAX_STREAMS

    def __post_init__(self) -> None:
        self._check_caps()
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0–65535, got {self.port}",
                              hint="e.g. --port 8080 (CHORD_API_PORT)")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"the body limit must be at least 1 KiB, got {self.max_body_bytes}"
                              " bytes", hint="set CHORD_API_MAX_BODY_MB, e.g. 256")
        if self.max_tasks < 1:
            raise ConfigError(f"tasks per request must be at least 1, got {self.max_tasks}",
                              hint="set CHORD_API_MAX_TASKS, e.g. 64")
        if not self.request_timeout_s > 0:
            raise ConfigError(f"the per-request time must be positive, got "
                              f"{self.request_timeout_s}", hint="set CHORD_API_TIMEOUT_S, e.g. 300")
        if not 0 <= self.readers <= MAX_READERS:
            raise ConfigError(f"reader processes must be 0–{MAX_READERS}, got {self.readers}",
                              hint="set CHORD_API_READERS (0: read request bodies on the "
                                   "service's threads), or leave it unset for the default")
        if not self.is_local and not self.api_key and not self.no_auth:
            raise ConfigError(f"refusing to listen on {self.host} without an API key",
                              hint="set CHORD_API_KEY (or --api-key) so callers must send "
                                   "'Authorization: Bearer <key>', or pass --no-auth if this "
                                   "network is trusted")

    def _check_caps(self) -> None:
        """The request caps must leave a request possible (caps.py says what each bounds)."""
        from chord_core.config import MIN_FRAMES, MIN_PIXELS_DEFAULT

        for name, low, var in (("max_frames", MIN_FRAMES, "CHORD_API_MAX_FRAMES"),
                               ("max_pixels", MIN_PIXELS_DEFAULT, "CHORD_API_MAX_PIXELS"),
                               ("max_visual_tokens", 256, "CHORD_API_MAX_VISUAL_TOKENS"),
                               ("max_new_tokens", 1, "CHORD_API_MAX_NEW_TOKENS")):
            if getattr(self, name) < low:
                raise ConfigError(f"{var} must be at least {low:,}, got {getattr(self, name):,}",
                                  hint=f"unset it for the default ({getattr(type(self), name):,})")
        if not self.read_timeout_s > 0:
            raise ConfigError(f"the read timeout must be positive, got {self.read_timeout_s}",
                              hint="set CHORD_API_READ_TIMEOUT_S, e.g. 10")
        if not self.body_timeout_s >= self.read_timeout_s:
            raise ConfigError(f"the body timeout ({self.body_timeout_s} s) must be at least "
                              f"the read timeout ({self.read_timeout_s} s)",
                              hint="set CHORD_API_BODY_TIMEOUT_S, e.g. 300")
        if self.max_streams < 1:
            raise ConfigError(f"event streams per key must be at least 1, got "
                              f"{self.max_streams}", hint="set CHORD_API_MAX_STREAMS, e.g. 1024")
        if self.upload_retention_h < 0:
            raise ConfigError(f"the upload retention must be 0 or more hours, got "
                              f"{self.upload_retention_h}",
                              hint="set CHORD_API_UPLOAD_RETENTION_H (0: keep uploads)")

    @property
    def is_local(self) -> bool:
        return self.host in LOCAL_HOSTS

    @property
    def auth_required(self) -> bool:
        return bool(self.api_key) and not self.no_auth

    def host_allowlist(self) -> list[str]:
        """Host header values accepted (DNS-rebinding guard): ``*`` when bound to all
        addresses with a key or --no-auth, else localhost names, the bound host and extras."""
        if self.host in ("0.0.0.0", "::") and not self.allowed_hosts:
            return ["*"]
        return list(dict.fromkeys([*sorted(LOCAL_HOSTS), self.host, *self.allowed_hosts]))


def _number(env: Mapping[str, str] | None, name: str, kind: Callable[[str], float],
            default: float) -> float:
    raw = env_value(name, env)
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}",
                          hint=f"unset it for the default ({default:g})") from None


def settings_from_env(env: Mapping[str, str] | None = None, **overrides: object
                      ) -> ServiceSettings:
    """Settings from ``CHORD_API_*`` variables, then ``overrides`` (None = not given);
    validated once, on the merged values."""
    values: dict[str, object] = {
        "host": env_value("CHORD_API_HOST", env) or "127.0.0.1",
        "port": int(_number(env, "CHORD_API_PORT", int, DEFAULT_PORT)),
        "api_key": env_value("CHORD_API_KEY", env),
        "no_auth": env_value("CHORD_API_NO_AUTH", env).lower() in {"1", "true", "yes"},
        "max_body_bytes": int(_number(env, "CHORD_API_MAX_BODY_MB", float,
                                      DEFAULT_MAX_BODY_MB) * MIB),
        "max_tasks": int(_number(env, "CHORD_API_MAX_TASKS", int, DEFAULT_MAX_TASKS)),
        "request_timeout_s": _number(env, "CHORD_API_TIMEOUT_S", float, DEFAULT_TIMEOUT_S),
        "readers": int(_number(env, "CHORD_API_READERS", int, default_readers())),
        "allowed_hosts": tuple(h.strip() for h in env_value("CHORD_ALLOWED_HOSTS", env)
                               .split(",") if h.strip()),
        **_caps_from_env(env),
    }
    key_file = overrides.pop("api_key_file", None) or env_value("CHORD_API_KEY_FILE", env)
    if key_file and not overrides.get("api_key"):
        values["api_key"] = read_key_file(str(key_file))
    values.update({k: v for k, v in overrides.items() if v is not None})
    return ServiceSettings(**values)  # type: ignore[arg-type]


def _caps_from_env(env: Mapping[str, str] | None) -> dict[str, object]:
    return {
        "max_frames": int(_number(env, "CHORD_API_MAX_FRAMES", int, DEFAULT_MAX_FRAMES)),
        "max_pixels": int(_number(env, "CHORD_API_MAX_PIXELS", int, DEFAULT_MAX_PIXELS)),
        "max_visual_tokens": int(_number(env, "CHORD_API_MAX_VISUAL_TOKENS", int,
                                         DEFAULT_MAX_VISUAL_TOKENS)),
        "max_new_tokens": int(_number(env, "CHORD_API_MAX_NEW_TOKENS", int,
                                      DEFAULT_MAX_NEW_TOKENS)),
        "read_timeout_s": _number(env, "CHORD_API_READ_TIMEOUT_S", float,
                                  DEFAULT_READ_TIMEOUT_S),
        "upload_retention_h": _number(env, "CHORD_API_UPLOAD_RETENTION_H", float,
                                      DEFAULT_UPLOAD_RETENTION_H),
        "body_timeout_s": _number(env, "CHORD_API_BODY_TIMEOUT_S", float,
                                  DEFAULT_BODY_TIMEOUT_S),
        "max_streams": int(_number(env, "CHORD_API_MAX_STREAMS", int, DEFAULT_MAX_STREAMS)),
    }


def read_key_file(path: str) -> str:
    """The API key from a file (its first line, stripped): a key given on the command line
    shows in ``ps`` to every user of the machine; a file (or CHORD_API_KEY) does not."""
    try:
        with open(path, encoding="utf-8") as fh:
            key = fh.readline().strip()
            mode = stat.S_IMODE(os.fstat(fh.fileno()).st_mode)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the API key file {path!r}: "
                          f"{getattr(exc, 'strerror', None) or exc}",
                          hint="give a readable file holding the key on its first line "
                               "(--api-key-file / CHORD_API_KEY_FILE)") from None
    if not key:
        raise ConfigError(f"the API key file {path!r} is empty",
                          hint="write the key on its first line (CHORD_API_KEY_FILE / "
                               "--api-key-file), e.g. openssl rand -hex 24 > FILE; chmod 600 "
                               "FILE")
    if mode & 0o077:  # issue 40: a key others may read was taken silently
        logging.getLogger(__name__).warning(
            "the API key file %s may be read by other users of this machine (mode %o): "
            "anyone who reads it can call this service; chmod 600 %s", path, mode, path)
    return key
