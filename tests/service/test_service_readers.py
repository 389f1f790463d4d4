"""Reader processes: a ``/batch_predict`` body is read outside the service process (its
dispatcher keeps the interpreter lock for feeding the workers), a reader that dies costs only
the request it was reading, and a refused body says what is wrong."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from PIL import Image
from service_server import start_server, stop_server

from chord_core.service.http_errors import ApiError
from chord_core.service.ofa import read_batch
from chord_core.service.readers import Readers


def _png() -> str:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (40, 50, 3), dtype=np.uint8)
                    ).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_nothing_outlives_the_service(tiny_model_dir, tmp_path, how) -> None:
    """Its reader processes and workers end with the service: on SIGTERM through its own
    clean-up (uvicorn re-raises the signal after its graceful stop), on SIGKILL through each
    child's lifeline."""
    server = start_server(tmp_path, "--cpu-workers", "1", "--readers", "2", wait_ready=False)
    try:  # the worker may still be loading: that must not matter
        deadline = time.monotonic() + 30
        while True:
            children = psutil.Process(server.proc.pid).children(recursive=True)
            spawned = [c for c in children if "spawn_main" in " ".join(c.cmdline())]
            if len(spawned) >= 3:  # 2 readers + 1 worker (+ multiprocessing's helpers)
                break
            assert time.monotonic() < deadline, [" ".join(c.cmdline())[:80] for c in children]
            time.sleep(0.2)
        if how == "SIGTERM":
            stop_server(server)
            assert server.proc.returncode == 0, server.log.read_text()[-2000:]
        else:
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait(10)
        gone, alive = psutil.wait_procs(children, timeout=15)
        assert not alive, [" ".join(p.cmdline())[:120] for p in alive]
    finally:
        if server.proc.poll() is None:
            stop_server(server)


def test_a_body_is_read_in_a_reader_and_a_dead_reader_costs_one_request(
        tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path))  # the readers are spawned with it
    body = json.dumps({"tasks": [{"image_data": _png(), "text": "a cat", "id": "good"},
                                 {"image_data": "%%%", "text": "a cat"}]}).encode()
    readers = Readers(1).start()

    async def scenario() -> None:
        first = await readers.run(os.getpid)
        assert first != os.getpid()
        read = await readers.run(read_batch, body, 8)
        assert read.refusal is None and read.ids == ["good"] and read.slots == [0]
        stored = Path(read.specs[0].request.video_path)
        assert stored.is_file() and stored.is_relative_to(tmp_path)  # written by the reader
        assert read.specs[0].info.width == 50 and read.specs[0].info.height == 40
        assert read.out[1]["id"] == 1 and "base64" in read.out[1]["error"]
        with pytest.raises(ApiError) as info:  # the reader dies mid-request
            await readers.run(os._exit, 3)
        assert info.value.status == 500 and "send the request again" in info.value.hint
        again = await readers.run(os.getpid)  # a new reader serves the next request
        assert again not in (first, os.getpid())
        assert (await readers.run(read_batch, body, 8)).ids == ["good"]

    try:
        asyncio.run(scenario())
    finally:
        readers.close()


@pytest.mark.parametrize("body,status,words", [
    (b"tasks=1", 400, "not valid JSON"),
    (b"\xff\xfe{", 400, "not valid JSON"),
    (b"[1, 2]", 422, "not a JSON object"),
    (b"{}", 422, "tasks is missing"),
    (b'{"tasks": {"a": 1}}', 422, "tasks is not a list"),
    (b'{"tasks": []}', 400, "tasks is empty"),
    (json.dumps({"tasks": [{}] * 9}).encode(), 413, "9 tasks in one request; the limit is 8"),
], ids=["form", "not-utf8", "array", "no-tasks", "tasks-object", "empty", "too-many"])
def test_a_refused_body_says_what_is_wrong(body, status, words) -> None:
    read = read_batch(body, 8)
    assert read.refusal is not None and not read.specs
    got_status, message, hint = read.refusal
    assert got_status == status and words in message and "tasks" in hint + message


def test_shards_read_a_body_as_one_reader_does(tmp_path, monkeypatch) -> None:
    """A big body is read by several readers, a run of its tasks each: joined, the same
    entries, ids, slots and stored files as one reader reading all of it."""
    from chord_core.service.ofa import merge_shards, shard_count, within_pixels

    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path))
    good = _png()
    tasks = [{"image_data": good, "text": f"s{i}", "id": f"t{i}"} for i in range(7)]
    tasks[2] = {"image_data": "not base64!", "text": "x", "id": "bad"}
    tasks[5] = "not an object"
    body = json.dumps({"tasks": tasks}).encode()
    whole = read_batch(body, 8)
    for n in (2, 3, 7):
        parts = [read_batch(body, 8, None, (k, n)) for k in range(n)]
        assert sum(len(p.ids) for p in parts) == len(whole.ids)  # each task read once
        joined = merge_shards(parts)
        assert joined.out == whole.out and joined.ids == whole.ids
        assert joined.slots == whole.slots == [0, 1, 3, 4, 6]
        assert [s.request.video_path for s in joined.specs] == \
            [s.request.video_path for s in whole.specs]
        assert [s.request.query for s in joined.specs] == ["s0", "s1", "s3", "s4", "s6"]
    assert merge_shards([read_batch(b"[1]", 8, None, (k, 2)) for k in range(2)]).refusal
    assert within_pixels(whole).ids == whole.ids
    assert shard_count(100, 4) == 1 and shard_count(9 << 20, 4) == 4
    assert shard_count(9 << 20, 0) == 1  # no reader processes: the service's own thread


@pytest.mark.parametrize("asked,status,words", [
    (0, 422, "whole number (1 to 64)"), ("64", 422, "whole number"), (True, 422, "True"),
    (2.5, 422, "2.5"), (65, 400, "over this server's cap of 64")],
    ids=["zero", "text", "bool", "fraction", "over-cap"])
def test_a_bad_think_budget_refuses_the_request(asked, status, words) -> None:
    body = json.dumps({"think_tokens": asked, "tasks": [{"image_data": _png(), "text": "a"}]})
    read = read_batch(body.encode(), 8, None, (0, 1), 64)
    assert read.refusal is not None and not read.specs
    got, message, hint = read.refusal
    assert got == status and words in message and hint


def test_the_think_budget_is_each_tasks_max_new_tokens(tmp_path, monkeypatch) -> None:
    from chord_core.config import MAX_NEW_TOKENS_DEFAULT

    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path))
    tasks = [{"image_data": _png(), "text": f"s{i}"} for i in range(3)]
    asked = read_batch(json.dumps({"think_tokens": 40, "tasks": tasks}).encode(), 8, None,
                       (0, 1), 64)
    assert [s.request.max_new_tokens for s in asked.specs] == [40, 40, 40]
    default = read_batch(json.dumps({"tasks": tasks}).encode(), 8, None, (0, 1), 4096)
    assert {s.request.max_new_tokens for s in default.specs} == {MAX_NEW_TOKENS_DEFAULT}
    capped = read_batch(json.dumps({"tasks": tasks}).encode(), 8, None, (0, 1), 100)
    assert {s.request.max_new_tokens for s in capped.specs} == {100}  # the default, lowered


def test_a_reader_keys_each_task_without_reading_its_file_again(tmp_path, monkeypatch
                                                                ) -> None:
    """Given the served model, the reader makes each good task's content key from the hash
    it took while storing the image: the same key the service makes from the stored file
    (``keyed`` with a cold cache), and no stored file is opened again for it."""
    from dataclasses import replace

    from chord_core.media import content_keys
    from chord_core.service.ofa import keyed

    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path))
    tasks = [{"image_data": _png(), "text": f"s{i}", "id": i} for i in range(3)]
    tasks.append({"image_data": "not base64!", "text": "x", "id": "bad"})
    body = json.dumps({"tasks": tasks}).encode()
    opened: list[str] = []
    real_source = content_keys.source

    def counting_source(path):  # the only way file_hash reads a file
        opened.append(str(path))
        return real_source(path)

    monkeypatch.setattr(content_keys, "source", counting_source)
    monkeypatch.setattr(content_keys, "_HASH_CACHE", {})
    read = read_batch(body, 8, model="test")
    assert len(read.specs) == 3 and all(s.key for s in read.specs)
    assert opened == []  # keyed from the hash taken while the image was written
    monkeypatch.setattr(content_keys, "_HASH_CACHE", {})  # cold: the service's own way
    fresh, parent = keyed([replace(s, key="") for s in read.specs], read.ids, "test")
    assert [s.key for s in fresh] == [s.key for s in read.specs]
    assert len(opened) == 1  # one image, stored once (same bytes), read once here
    assert keyed(read.specs, read.ids, "test")[1] == parent  # the same request's parent
    other = read_batch(body, 8, model="another-model")
    assert {s.key for s in other.specs}.isdisjoint(s.key for s in read.specs)


def test_an_image_sent_again_is_keyed_without_a_read_even_mid_store(tmp_path,
                                                                     monkeypatch) -> None:
    """The same bytes stored on several threads at once (one request's repeated image):
    the one storing them again renews the file's mtime, and a thread keying the file at
    that moment still finds the hash taken while it was written. It is remembered under
    the new mtime before the file gets it (the CI flake of the test above: a sibling
    thread's renewal between this thread's store and its key cost one re-read)."""
    from chord_core.media import content_keys
    from chord_core.service import media

    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path))
    data = base64.b64decode(_png())
    path, _ = media.save_image_probed(data, decode=False)
    opened: list[str] = []
    real_source, real_utime = content_keys.source, os.utime
    monkeypatch.setattr(content_keys, "source",
                        lambda p: (opened.append(str(p)), real_source(p))[1])
    keyed_mid_store: list[str] = []

    def utime_then_key(p, *args, **kwargs):  # another thread keys the file right then
        real_utime(p, *args, **kwargs)
        keyed_mid_store.append(content_keys.file_hash(p))

    monkeypatch.setattr(media.os, "utime", utime_then_key)
    again, _ = media.save_image_probed(data, decode=False)
    assert again == path and len(keyed_mid_store) == 1
    assert opened == []  # no re-read, at the renewed mtime
    monkeypatch.setattr(content_keys, "_HASH_CACHE", {})
    assert content_keys.file_hash(path) == keyed_mid_store[0]  # and the remembered hash is right
    assert opened == [str(path)]
