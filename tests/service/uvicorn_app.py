"""A service app on a real uvicorn in a thread, over a ``Store`` with no workers (the library
routes read the store only): the shape the library tests use, shared by the hardening tests."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from service_server import free_port


@contextmanager
def served(store: Any, key: str, **settings: Any) -> Iterator[tuple[str, Any]]:
    """(base URL, the app) of ``create_app`` over ``store`` on 127.0.0.1, stopped after."""
    import uvicorn

    from chord_core.service.app import create_app
    from chord_core.service.runtime import ServiceRuntime
    from chord_core.service.settings import ServiceSettings

    from chord_core.service.cli import _http_limits

    port = free_port()
    config = ServiceSettings(port=port, api_key=key, **settings)
    app = create_app(ServiceRuntime(manager=None, store=store), config)
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                                        **_http_limits(config)))  # serve's own protocol
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        srv.should_exit = True
        thread.join(10)
