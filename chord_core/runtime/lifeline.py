"""Worker processes die with their parent, and the test hook that makes a worker crash.

A killed ``batch`` process (SIGKILL, or SIGTERM without a clean shutdown) must not leave its
workers — each holding a loaded model — running under PID 1. Two guards, both set up by the
worker itself as its very first step (``bind_to_parent``):

* Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``): the kernel kills the
  worker when the thread that started it exits. The manager starts and stops workers from its
  own long-lived dispatcher thread for that reason. The parent may already be gone before the
  call takes effect, so the parent pid is checked right after it.
* A watchdog thread waiting on ``multiprocessing.parent_process().sentinel`` (a pipe that
  becomes readable when the parent dies): portable, and it covers systems without ``prctl``.

Workers also ignore SIGINT: Ctrl-C in a terminal reaches the whole process group, and the
parent stops its workers itself (leaving their jobs queued for the next run). SIGTERM (a stop
sent to the whole group by systemd, ``docker stop`` or ``timeout``, or the manager's abort)
ends a worker through Python's own exit, with status 143: killed outright, it left its
semaphores to the resource tracker, which warned of "leaked semaphore objects" at every such
stop.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
from typing import Iterable

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def bind_to_parent() -> None:
    """Make this (spawned) process die when its parent does. Call first thing in the child."""
    parent = multiprocessing.parent_process()
    if parent is None:  # not a multiprocessing child: nothing to bind to
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    _set_parent_death_signal()
    if os.getppid() != parent.pid:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent.sentinel,), name="chord-lifeline",
                     daemon=True).start()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM: exit through the interpreter's shutdown (finalizers run), status 128 + 15."""
    raise SystemExit(128 + signum)


def _set_parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent thread exits; False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            return True
        log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        log.warning("prctl is not available (%s); relying on the parent watchdog", exc)
    return False


def _watch_parent(sentinel: int) -> None:
    """Block until the parent's sentinel pipe closes (the parent died), then exit at once:
    no clean-up is worth keeping a model in memory for an owner that is gone."""
    from multiprocessing.connection import wait

    wait([sentinel])
    os._exit(1)


def crash_if_injected(video_paths: Iterable[str]) -> None:
    """Test hook ``CHORD_FAULT_CRASH_ON=<text>``: a worker handed a clip whose path contains
    ``text`` dies on the spot (``os._exit``), like a decoder segfault or the OOM killer would."""
    from chord_core.config import injected_crash_on

    needle = injected_crash_on()
    if needle and any(needle in str(p) for p in video_paths):
        log.error("CHORD_FAULT_CRASH_ON=%s: crashing this worker on purpose", needle)
        logging.shutdown()
        os._exit(1)
