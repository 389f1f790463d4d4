"""Workers as Ray actors: Chord past one machine.

``RayExecutor`` is the runtime's third executor (``executors.py``), for a Ray cluster: one
actor per worker, holding ``len(spec.devices)`` GPUs (a sharded group's GPUs reserved
together, on one node, by a placement group) or one CPU. The actor runs the same
``workers.serve`` loop as a local process; the manager, its balancer, split grounding, the
store and every id stay on the machine that submits. Ray gives each actor its GPUs
(``CUDA_VISIBLE_DEVICES``), so the planner's local device numbers are not used here.

What crosses is the same typed records (``messages.py``), over Ray queues: an inbox and a
control queue per worker, one outbox for all. A worker's death is seen through its ``run``
call's result (``ray.wait``), after everything it had put on the outbox — its last words
come first, as with local processes. The manager then re-queues its tasks and starts a new
actor; job ids make a retried task's result count once.

``ray`` is imported only when a RayExecutor is made: the default local path never loads it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from chord_core.runtime.executors import _WAKE, Executor, QueueHandle, WorkerHandle, _Wake
from chord_core.runtime.messages import (
    Event,
    Progress,
    Stopped,
    WorkerDied,
)
from chord_core.runtime.workers import WorkerSpec

log = logging.getLogger(__name__)

NAMESPACE = "chord"
_QUEUE_OPTIONS = {"num_cpus": 0}  # queues never wait for a free CPU (a restart needs them)


class RayWorker:
    """The actor class (made remote on first use): one worker's process on some node."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec

    def where(self) -> dict[str, Any]:
        """pid and node of this actor, for the GPUs page and logs."""
        import ray

        return {"pid": os.getpid(), "host": socket.gethostname(),
                "node_id": ray.get_runtime_context().get_node_id()}

    def run(self, inbox: Any, outbox: Any, control: Any) -> None:
        from chord_core.runtime.workers import prepare_process, serve

        os.environ.update(dict(self.spec.env))
        prepare_process(self.spec)
        sender = _Outbox(outbox)
        try:
            serve(self.spec, inbox, sender, control)
        finally:
            sender.close()


class _Outbox:
    """The worker's side of the shared outbox. Each put to a Ray queue is a round trip to
    its actor, so progress events are sent in batches (at least every ``FLUSH_S``); any
    other message first sends what is buffered, then itself, and returns only when the
    queue holds it — so a result is never behind its progress, nor lost once put."""

    FLUSH_S = 0.2

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self._buffer: list[Any] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._flusher, daemon=True, name="chord-outbox").start()

    def put(self, msg: Any) -> None:
        with self._lock:
            self._buffer.append(msg)
            if not isinstance(msg, Progress):
                self._flush()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._queue.put_nowait_batch(self._buffer)
            self._buffer = []

    def _flusher(self) -> None:
        while not self._closed.wait(self.FLUSH_S):
            with self._lock:
                self._flush()


class _RayHandle(QueueHandle):
    def __init__(self, worker_id: str, actor: Any, run_ref: Any, inbox: Any, control: Any,
                 where_ref: Any, group: Any) -> None:
        self.worker_id, self.actor, self.run_ref = worker_id, actor, run_ref
        self.inbox, self.control, self.where_ref, self.group = inbox, control, where_ref, group
        self.reported = False  # its end (Stopped or WorkerDied) was told
        self._where: dict[str, Any] | None = None


    def terminate(self) -> None:
        self.kill()

    def kill(self) -> None:
        import ray

        ray.kill(self.actor, no_restart=True)

    def join(self, timeout: float) -> bool:
        import ray

        done, _ = ray.wait([self.run_ref], timeout=max(0.0, timeout))
        return bool(done)

    def where(self) -> dict[str, Any] | None:
        """pid and node once the actor has started (None before, or if it never did)."""
        if self._where is None:
            import ray

            done, _ = ray.wait([self.where_ref], timeout=0)
            if done:
                try:
                    self._where = ray.get(self.where_ref)
                except Exception:  # noqa: BLE001 — an actor that died before answering
                    self._where = {}
        return self._where or None

    @property
    def pid(self) -> int | None:
        where = self.where()
        return where.get("pid") if where else None

    @property
    def exitcode(self) -> int | None:
        return None

    @property
    def node(self) -> str | None:
        """host/node id (short): several Ray nodes may share a host."""
        where = self.where()
        return f"{where['host']}/{where['node_id'][:8]}" if where else None


class RayExecutor(Executor):
    """Workers as actors on the Ray cluster at ``address`` ("auto": the one this machine
    joined with ``ray start``; None: start a private one-machine Ray)."""

    def __init__(self, address: str | None = "auto") -> None:
        import ray
        from ray.util.queue import Queue

        if not ray.is_initialized():
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                     include_dashboard=False, configure_logging=False)
        self._ray = ray
        self._queue_cls = Queue
        self._outbox = Queue(actor_options=_QUEUE_OPTIONS)
        self._remote = ray.remote(RayWorker)
        self._handles: list[_RayHandle] = []
        self._lock = threading.Lock()

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        inbox = self._queue_cls(actor_options=_QUEUE_OPTIONS)
        control = self._queue_cls(actor_options=_QUEUE_OPTIONS)
        gpus, group = len(spec.devices), None
        options: dict[str, Any] = {"num_cpus": 1, "num_gpus": gpus, "max_restarts": 0}
        if gpus > 1:  # a sharded model: its GPUs together, on one node
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            group = placement_group([{"GPU": gpus, "CPU": 1}], strategy="STRICT_PACK")
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(group)
        else:
            options["scheduling_strategy"] = "SPREAD"
        actor: Any = self._remote.options(**options).remote(spec)  # Ray's actor proxy
        where = actor.where.remote()  # an actor runs its calls in order: this one before run
        handle = _RayHandle(spec.worker_id, actor, actor.run.remote(inbox, self._outbox, control),
                            inbox, control, where, group)
        with self._lock:
            self._handles.append(handle)
        return handle

    # an actor's end is seen by ``ray.wait`` on its run, which cannot wait on the outbox
    # queue at the same time: the dispatcher looks at least this often
    max_wait_s = 1.0

    def wake(self) -> None:
        self._outbox.put(_WAKE)

    def events(self, timeout: float | None) -> list[Event]:
        ray = self._ray
        with self._lock:
            handles = [h for h in self._handles if not h.reported]
        refs = {h.run_ref: h for h in handles}
        ended = set(ray.wait(list(refs), num_returns=len(refs), timeout=0)[0]) if refs else set()
        out = self._drain()  # a worker's last words before its death
        if not out and not ended:
            try:
                out.append(self._outbox.get(timeout=timeout))
            except Exception:  # noqa: BLE001 — ray.util.queue.Empty: nothing within timeout
                pass
            out += self._drain()
        out = [m for m in out if not isinstance(m, _Wake)]
        for msg in out:
            if isinstance(msg, Stopped):
                for h in handles:
                    if h.worker_id == msg.worker_id and h.run_ref not in ended:
                        h.reported = True  # a clean stop: its run returns, no death
        for ref in ended:
            h = refs[ref]
            if not h.reported:
                h.reported = True
                out.append(WorkerDied(h.worker_id, None))
                log.warning("Ray actor of worker %s ended: %s", h.worker_id, _why(ray, ref))
            self._release(h)
        return out

    def _drain(self) -> list[Any]:
        n = self._outbox.qsize()
        return list(self._outbox.get_nowait_batch(n)) if n else []

    def _release(self, h: _RayHandle) -> None:
        with self._lock:
            if h in self._handles:
                self._handles.remove(h)
        for q in (h.inbox, h.control):
            q.shutdown(force=True)
        if h.group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(h.group)

    def close(self) -> None:
        with self._lock:
            handles = list(self._handles)
        for h in handles:
            self._release(h)
        self._outbox.shutdown(force=True)

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's live nodes: address, CPUs and GPUs (the GPUs page lists them)."""
        return cluster_nodes(self._ray)


def cluster_nodes(ray: Any) -> list[dict[str, Any]]:
    out = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        out.append({"node_id": node.get("NodeID", ""), "address": node.get("NodeManagerAddress"),
                    "cpus": res.get("CPU", 0.0), "gpus": res.get("GPU", 0.0),
                    "head": "node:__internal_head__" in res})
    return out


def _why(ray: Any, ref: Any) -> str:
    try:
        ray.get(ref, timeout=0)
        return "its loop returned"
    except Exception as exc:  # noqa: BLE001 — RayActorError and friends: a death
        return type(exc).__name__


def ray_worker_specs(model_cfg: Any, parallel: Any, nodes: list[dict[str, Any]]
                     ) -> list[WorkerSpec]:
    """The workers for a Ray cluster of ``nodes``: one per GPU (``replicate``/``auto``), or
    one per node holding all its GPUs (``shard``); without GPUs (or ``--device cpu``), one
    CPU worker per node, or ``cpu_workers`` of them."""
    from dataclasses import replace

    from chord_core.runtime.workers import WorkerSpec

    cfg = replace(model_cfg, batch_size=parallel.batch_size_per_gpu)
    per_node = [int(n["gpus"]) for n in nodes if n["gpus"] >= 1]
    if not per_node or cfg.device == "cpu":
        n = parallel.cpu_workers or max(1, len(nodes))
        return [WorkerSpec(f"ray-cpu{i}", (), cfg, cpu_threads=1, warmup=False)
                for i in range(n)]
    if parallel.strategy == "shard":
        groups = [tuple(range(k)) for k in per_node]
    else:
        groups = [(0,) for k in per_node for _ in range(k)]
    return [WorkerSpec(f"ray-gpu{i}", grp, cfg, parallel.max_memory_fraction)
            for i, grp in enumerate(groups)]
