"""``python -m chord_core serve``: plan and start this process's workers, then serve HTTP.

Settings are checked before any worker starts (a public address without a key is refused
at once, exit 2). uvicorn serves the app; Ctrl-C or SIGTERM stops it and then the workers.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

log = logging.getLogger("chord_core.service")


def add_parser(sub: Any, model_args: Any) -> None:
    """Register the ``serve`` subcommand (``model_args`` adds the shared --model options)."""
    p = sub.add_parser("serve", help="HTTP service: jobs API, OFA-VE /batch_predict, "
                                     "OpenAI-compatible /v1/chat/completions")
    p.add_argument("--host", default=None,
                   help="address to bind (default 127.0.0.1 or $CHORD_API_HOST); any other "
                        "needs --api-key or --no-auth")
    p.add_argument("--port", type=int, default=None, help="port (default 8080 or "
                                                          "$CHORD_API_PORT)")
    p.add_argument("--api-key", default=None,
                   help="callers must send 'Authorization: Bearer KEY' ($CHORD_API_KEY); "
                        "a key given here shows in ps: prefer $CHORD_API_KEY or --api-key-file")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="read the key from FILE's first line ($CHORD_API_KEY_FILE)")
    p.add_argument("--no-auth", action="store_true", default=None,
                   help="serve a non-local address without a key (trusted networks only)")
    p.add_argument("--max-body-mb", type=float, default=None,
                   help="largest request body in MB (default 256, $CHORD_API_MAX_BODY_MB)")
    p.add_argument("--max-tasks", type=int, default=None,
                   help="most /batch_predict tasks per request (default 64)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds a waiting request may take (default 300)")
    p.add_argument("--readers", type=int, default=None,
                   help="processes that read /batch_predict bodies beside the dispatcher "
                        "(default: 1 per 4 cores, 1–4; 0: threads; $CHORD_API_READERS)")
    g = p.add_argument_group("workers")
    g.add_argument("--config", default=None, help="multigpu_config.yaml")
    g.add_argument("--gpus", default=None, help="CUDA ordinals to use, e.g. 0,1")
    g.add_argument("--strategy", default=None, help="auto, replicate (data_parallel), shard")
    g.add_argument("--cpu-workers", type=int, default=None,
                   help="run N CPU worker processes (no GPU needed)")
    g.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where the workers run: local processes (default) or a Ray cluster")
    g.add_argument("--ray-address", default="auto", metavar="auto|HOST:PORT",
                   help="the Ray cluster (auto: the one this machine joined with `ray start`)")
    g.add_argument("--warmup", choices=("auto", "full", "lazy", "off"), default=None,
                   help="auto (default): GPU workers warm up (compile, capture every decode "
                        "shape of the default settings) before /health says ready; lazy: "
                        "ready once loaded, the warm-up runs between requests; full: CPU "
                        "workers too; off ($CHORD_WARMUP)")
    g.add_argument("--warmup-tasks", default=None, metavar="describe,ground,entail",
                   help="warm up only for these tasks (default: all the service's routes "
                        "serve); another task captures its shapes on its first request "
                        "($CHORD_WARMUP_TASKS)")
    model_args(p)


def _settings(args: argparse.Namespace) -> Any:
    from chord_core.service.settings import MIB, settings_from_env

    body = None if args.max_body_mb is None else int(args.max_body_mb * MIB)
    if args.api_key:
        log.warning("the API key was given on the command line, where every user of this "
                    "machine sees it (ps); set CHORD_API_KEY or use --api-key-file instead")
        print("warning: --api-key shows in ps to every user of this machine; set "
              "CHORD_API_KEY or use --api-key-file FILE", file=sys.stderr)
    return settings_from_env(host=args.host, port=args.port, api_key=args.api_key,
                             api_key_file=args.api_key_file,
                             no_auth=args.no_auth, max_body_bytes=body,
                             max_tasks=args.max_tasks, request_timeout_s=args.timeout,
                             readers=args.readers)


def _check_installed() -> None:
    """The service's packages are in requirements.txt but not on every host (GPU hosts
    that cannot install): say so before any worker starts, not as an internal error."""
    import importlib.util

    from chord_core.errors import ConfigError

    for module, package in (("fastapi", "fastapi"), ("uvicorn", "uvicorn"),
                            ("python_multipart", "python-multipart")):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ConfigError(f"the service needs the {package} package, which is not "
                              "installed here",
                              hint="pip install -r requirements.txt (fastapi, uvicorn, "
                                   "python-multipart); offline, carry their wheels and "
                                   "pip install --no-index --find-links <folder>")


def _leave_on_sigterm() -> None:
    """uvicorn stops gracefully on SIGTERM, then raises the signal again under the handler
    it found. Let that handler leave through SystemExit, so that ``cmd_serve``'s clean-up
    (reader processes, workers, the store) runs instead of the process just ending."""
    import signal

    def leave(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, leave)


def _http_limits(settings: Any) -> dict[str, Any]:
    """uvicorn's HTTP settings: the h11 protocol with header limits and read timeouts
    (protocol.py; uvicorn's own parsers bound neither)."""
    from chord_core.service.protocol import MAX_HEADER_BYTES, protocol_class

    return {"http": protocol_class(settings.read_timeout_s, settings.body_timeout_s),
            "h11_max_incomplete_event_size": MAX_HEADER_BYTES, "timeout_keep_alive": 5}


def _start_sweeper(runtime: Any, settings: Any) -> Any:
    """Say if the data dir is open to others, and start the uploads' retention."""
    from chord_core.config import default_data_dir
    from chord_core.service.media import api_uploads_dir
    from chord_core.service.retention import UploadSweeper, paths_in_use, warn_if_open

    warning = warn_if_open(default_data_dir())
    if warning:
        print(warning, file=sys.stderr)
    api_uploads_dir()  # created (or tightened) private now, not at the first upload
    return UploadSweeper(api_uploads_dir, settings.upload_retention_h,
                         lambda: paths_in_use(runtime.manager)).start()


def cmd_serve(args: argparse.Namespace) -> int:
    """Start the workers and the HTTP server; returns when the server stops."""
    _check_installed()
    import uvicorn

    from chord_core.config import model_config_from_env
    from chord_core.runtime.parallel_config import load_parallel_config
    from chord_core.service.app import create_app
    from chord_core.service.readers import Readers
    from chord_core.service.runtime import start_runtime

    settings = _settings(args)  # refused here, before any worker starts
    if args.warmup:  # the workers read it (they inherit the environment)
        os.environ["CHORD_WARMUP"] = args.warmup
    if args.warmup_tasks is not None:
        os.environ["CHORD_WARMUP_TASKS"] = args.warmup_tasks
    from chord_core.config import warmup_mode
    from chord_core.runtime.startup import warmup_tasks

    warmup_mode()  # a bad CHORD_WARMUP (or CHORD_WARMUP_TASKS) is refused here too
    warmup_tasks()
    parallel = load_parallel_config(args.config, overrides={
        "gpus": args.gpus, "strategy": args.strategy, "cpu_workers": args.cpu_workers,
        "batch_size_per_gpu": args.batch_size})
    cfg = model_config_from_env(model=args.model, device=args.device,
                                max_memory=args.max_memory, allow_offload=args.allow_offload)
    readers = Readers(settings.readers).start()  # they import while the workers load
    runtime = start_runtime(cfg, parallel, executor=args.executor,
                            ray_address=args.ray_address)
    from chord_core.service.long_routes import resume_long_runs

    resume_long_runs(runtime)  # chapters / ground-long / search-long a stop left open
    for line in runtime.plan_lines:
        print(f"plan: {line}", file=sys.stderr)
    auth = "API key required" if settings.auth_required else "no API key"
    print(f"Chord service: http://{settings.host}:{settings.port} ({auth}); workers are "
          "loading, GET /health says when they are ready", file=sys.stderr, flush=True)
    _leave_on_sigterm()
    from chord_core.library.background import start_from_env
    from chord_core.service.discovery import advertise, local_url, new_token, withdraw

    watches, token = None, new_token()  # proven at /v1/identity before a CLI sends its key
    app = create_app(runtime, settings, readers)
    app.state.identity_token = token
    advertised = advertise(local_url(settings.host, settings.port), cfg.model, token=token)
    sweeper = _start_sweeper(runtime, settings)
    try:
        watches = start_from_env(runtime.manager, runtime.store, runtime.model)  # CHORD_WATCH
        uvicorn.run(app, host=settings.host, port=settings.port,
                    log_level="info" if args.verbose else "warning", access_log=args.verbose,
                    timeout_graceful_shutdown=5, **_http_limits(settings))
    finally:
        withdraw(advertised)  # the one-shot CLI stops sending here
        if watches is not None:
            watches.stop()
        sweeper.stop()
        readers.close()
        runtime.manager.shutdown(timeout=10.0)
        if runtime.store is not None:
            runtime.store.close()
    return 0
