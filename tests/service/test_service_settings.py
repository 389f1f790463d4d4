"""Service settings: CHORD_API_* variables and flags, refused before any worker starts."""

from __future__ import annotations

import pytest

from chord_core.errors import ConfigError
from chord_core.service.settings import (
    MIB,
    ServiceSettings,
    default_readers,
    settings_from_env,
)


def test_defaults_are_local_and_bounded() -> None:
    s = settings_from_env({})
    assert (s.host, s.port, s.auth_required) == ("127.0.0.1", 8080, False)
    assert s.max_body_bytes == 256 * MIB and s.max_tasks == 64 and s.request_timeout_s == 300
    assert "*" not in s.host_allowlist() and "localhost" in s.host_allowlist()


def test_variables_then_flags() -> None:
    env = {"CHORD_API_PORT": "9000", "CHORD_API_KEY": "k", "CHORD_API_MAX_BODY_MB": "1.5",
           "CHORD_API_MAX_TASKS": "4", "CHORD_API_TIMEOUT_S": "12", "CHORD_API_HOST": "0.0.0.0",
           "CHORD_ALLOWED_HOSTS": "chord.lan, other"}
    s = settings_from_env(env)
    assert (s.port, s.api_key, s.max_tasks, s.request_timeout_s) == (9000, "k", 4, 12.0)
    assert s.max_body_bytes == int(1.5 * MIB) and s.auth_required
    assert s.host_allowlist()[-2:] == ["chord.lan", "other"]
    flagged = settings_from_env(env, port=9100, max_tasks=None, api_key="other-key")
    assert (flagged.port, flagged.max_tasks, flagged.api_key) == (9100, 4, "other-key")


@pytest.mark.parametrize("cpus,readers", [(1, 1), (2, 1), (8, 2), (16, 4), (128, 4)])
def test_request_readers_scale_with_the_cores_then_stop(cpus, readers) -> None:
    assert default_readers(cpus) == readers
    assert settings_from_env({"CHORD_API_READERS": "0"}).readers == 0
    assert settings_from_env({"CHORD_API_READERS": "0"}, readers=3).readers == 3


def test_all_interfaces_with_a_key_accept_any_host() -> None:
    assert ServiceSettings(host="0.0.0.0", api_key="k").host_allowlist() == ["*"]
    assert ServiceSettings(host="::", no_auth=True).host_allowlist() == ["*"]


@pytest.mark.parametrize("env,overrides,words", [
    ({"CHORD_API_HOST": "0.0.0.0"}, {}, "without an API key"),
    ({}, {"host": "10.0.0.5"}, "without an API key"),
    ({"CHORD_API_PORT": "http"}, {}, "CHORD_API_PORT must be a number"),
    ({"CHORD_API_MAX_TASKS": "0"}, {}, "at least 1"),
    ({"CHORD_API_TIMEOUT_S": "-1"}, {}, "positive"),
    ({}, {"max_body_bytes": 10}, "at least 1 KiB"),
    ({}, {"port": 70000}, "0–65535"),
    ({"CHORD_API_READERS": "-1"}, {}, "reader processes must be 0–32"),
    ({}, {"readers": 99}, "reader processes must be 0–32"),
], ids=["public-no-key", "flag-host-no-key", "bad-port", "zero-tasks", "negative-timeout",
        "tiny-body", "port-range", "negative-readers", "too-many-readers"])
def test_bad_settings_are_refused_with_a_hint(env, overrides, words) -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_env(env, **overrides)
    assert words in info.value.message and info.value.hint


def test_no_auth_allows_a_public_address() -> None:
    s = settings_from_env({"CHORD_API_HOST": "0.0.0.0", "CHORD_API_NO_AUTH": "1"})
    assert not s.auth_required and not s.is_local


def test_a_missing_package_is_said_before_workers_start() -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['uvicorn'] = None; from chord_core.__main__ import main; "
            "sys.exit(main(['serve', '--model', 'test', '--cpu-workers', '1']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith("error: the service needs the uvicorn package")
    assert "pip install -r requirements.txt" in out.stderr and "plan:" not in out.stderr
