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


def test_caps_default_to_the_engines_defaults_and_read_their_variables() -> None:
    s = settings_from_env({})
    assert (s.max_frames, s.max_pixels, s.max_visual_tokens, s.max_new_tokens) == \
        (768, 1280 * 28 * 28, 24_000, 2048)
    assert (s.read_timeout_s, s.upload_retention_h) == (10.0, 24.0)
    env = {"CHORD_API_MAX_FRAMES": "16", "CHORD_API_MAX_PIXELS": "200704",
           "CHORD_API_MAX_VISUAL_TOKENS": "4000", "CHORD_API_MAX_NEW_TOKENS": "64",
           "CHORD_API_READ_TIMEOUT_S": "2.5", "CHORD_API_UPLOAD_RETENTION_H": "0"}
    s = settings_from_env(env)
    assert (s.max_frames, s.max_pixels, s.max_visual_tokens, s.max_new_tokens) == \
        (16, 200704, 4000, 64)
    assert (s.read_timeout_s, s.upload_retention_h) == (2.5, 0.0)


@pytest.mark.parametrize("env,words", [
    ({"CHORD_API_MAX_FRAMES": "2"}, "CHORD_API_MAX_FRAMES must be at least 4"),
    ({"CHORD_API_MAX_PIXELS": "100"}, "CHORD_API_MAX_PIXELS must be at least"),
    ({"CHORD_API_MAX_VISUAL_TOKENS": "10"}, "CHORD_API_MAX_VISUAL_TOKENS must be at least"),
    ({"CHORD_API_MAX_NEW_TOKENS": "0"}, "CHORD_API_MAX_NEW_TOKENS must be at least 1"),
    ({"CHORD_API_READ_TIMEOUT_S": "0"}, "read timeout must be positive"),
    ({"CHORD_API_UPLOAD_RETENTION_H": "-1"}, "retention must be 0 or more"),
    ({"CHORD_API_MAX_FRAMES": "many"}, "CHORD_API_MAX_FRAMES must be a number"),
], ids=["frames", "pixels", "tokens", "new-tokens", "read-timeout", "retention", "nan"])
def test_bad_caps_are_refused_with_a_hint(env, words) -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_env(env)
    assert words in info.value.message and info.value.hint


def test_the_key_comes_from_a_file_unless_given_outright(tmp_path) -> None:
    key = tmp_path / "key"
    key.write_text("  from-the-file \nsecond line\n")
    assert settings_from_env({"CHORD_API_KEY_FILE": str(key)}).api_key == "from-the-file"
    assert settings_from_env({"CHORD_API_KEY": "env"}, api_key_file=str(key)).api_key == \
        "from-the-file"
    assert settings_from_env({}, api_key="flag", api_key_file=str(key)).api_key == "flag"
    for bad, words in ((tmp_path / "missing", "cannot read the API key file"),
                       (tmp_path / "empty", "is empty")):
        if words == "is empty":
            bad.write_text("\n")
        with pytest.raises(ConfigError) as info:
            settings_from_env({"CHORD_API_KEY_FILE": str(bad)})
        assert words in info.value.message and "CHORD_API_KEY_FILE" in info.value.hint


def test_capped_sampling_lowers_defaults_and_refuses_what_is_over() -> None:
    from chord_core.service.caps import capped_new_tokens, capped_sampling
    from chord_core.service.http_errors import ApiError

    s = ServiceSettings(max_frames=16, max_pixels=200704, max_visual_tokens=4000,
                        max_new_tokens=64)
    cfg = capped_sampling(s, "describe")
    assert (cfg.max_frames, cfg.max_pixels, cfg.token_budget) == (16, 200704, 4000)
    assert capped_sampling(s, "ground").max_frames == 16  # 4000 tokens pay for 30 frames
    assert capped_sampling(ServiceSettings(), "ground").max_frames == 186
    assert capped_new_tokens(s, None, 512) == 64 and capped_new_tokens(s, 10, 512) == 10
    for kwargs in ({"max_frames": 17}, {"max_pixels": 200705}, {"token_budget": 4001},
                   {"fps": 61.0}):
        with pytest.raises(ApiError) as info:
            capped_sampling(s, "describe", **kwargs)
        assert info.value.status == 400 and info.value.hint
    with pytest.raises(ApiError):
        capped_new_tokens(s, 65, 512)


def test_old_uploads_go_unless_a_job_still_reads_them(tmp_path) -> None:
    import os
    import time

    from chord_core.service.retention import sweep_uploads, warn_if_open

    now = time.time()
    files = {name: tmp_path / name for name in ("old.png", "busy.mp4", "new.png", ".part-x")}
    for name, path in files.items():
        path.write_bytes(b"x")
        age = 10 if name == "new.png" else 7200
        os.utime(path, (now - age, now - age))
    (tmp_path / "sub").mkdir()
    assert sweep_uploads(tmp_path, 3600, [str(files["busy.mp4"])], now=now) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy.mp4", "new.png", "sub"]
    assert sweep_uploads(tmp_path / "nothing", 3600, []) == 0
    os.chmod(tmp_path, 0o755)
    assert "chmod 700" in warn_if_open(tmp_path)
    os.chmod(tmp_path, 0o700)
    assert warn_if_open(tmp_path) is None


@pytest.mark.parametrize("asked,frames", [
    ({"fps": 30, "max_frames": 186, "max_pixels": 1003520}, 186), ({"fps": 30}, 186),
    ({"fps": 2}, 40), ({}, 40),
], ids=["the-worst-asked", "all-frames", "2fps", "defaults"])
def test_grounding_is_fitted_to_the_visual_token_cap_on_the_probed_clip(asked, frames) -> None:
    """Grounding pays its budget per frame: before, 186 frames at 644×476 were 72,726
    visual tokens under a 24,000 cap."""
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.media.sampling import plan_sampling
    from chord_core.service.caps import capped_sampling, fit_to_cap
    from chord_core.types import VideoInfo

    info = VideoInfo(path="c.mp4", duration_s=20.0, fps=30.0, frame_count=600, width=640,
                     height=480, codec="h264", rotation=0, container="mp4")
    s = ServiceSettings()
    request = AnalysisRequest("c.mp4", "ground", "a dog", capped_sampling(s, "ground", **asked))
    fitted = plan_sampling(info, "ground", fit_to_cap(s, request, info).sampling)
    assert fitted.num_frames == frames and fitted.visual_tokens <= s.max_visual_tokens
    describe = AnalysisRequest("c.mp4", "describe", "", capped_sampling(s, "describe"))
    assert fit_to_cap(s, describe, info) is describe
