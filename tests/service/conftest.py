"""Fixtures of the service tests: one shared real service, and media inside its root."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from service_server import (HARDEN_ENV, MAX_BODY_MB, MAX_TASKS, Server, kill_server,
                            start_server, stop_server)


@pytest.fixture(scope="session")
def server(tiny_model_dir, tmp_path_factory) -> Server:
    """The service the tests share: 2 CPU workers, no API key (bound to 127.0.0.1)."""
    srv = start_server(tmp_path_factory.mktemp("service"), "--cpu-workers", "2",
                       "--max-body-mb", str(MAX_BODY_MB), "--max-tasks", str(MAX_TASKS))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def keyed_server(tiny_model_dir, tmp_path_factory) -> Server:
    """A second real service for the HTTP hardening tests: a key (``HARDEN_KEY``) and small
    limits (``HARDEN_ENV``: 3 streams a key, 2 s for headers, 3 s for a body). Used as soon
    as it answers (its routes under test need no model): about 2 s to start."""
    srv = start_server(tmp_path_factory.mktemp("keyed"), "--cpu-workers", "1",
                       wait_ready=False, env=HARDEN_ENV)
    yield srv
    kill_server(srv)


@pytest.fixture(scope="session")
def media(server: Server) -> dict[str, Path]:
    """Files inside the server's media root: a short clip, two images."""
    from chord_core.testing.videos import make_video

    rng = np.random.default_rng(0)
    out = {"clip": make_video(server.media / "clip.mp4", duration_s=2.0, fps=10.0,
                              size_wh=(160, 120)).path}
    for name, wh in (("img", (160, 120)), ("img2", (200, 150))):
        out[name] = server.media / f"{name}.png"
        Image.fromarray(rng.integers(0, 255, (wh[1], wh[0], 3), dtype=np.uint8)
                        ).save(out[name])
    return out
