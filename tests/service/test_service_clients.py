"""Clients other programs use, unchanged, against the real service: the OFA-VE guide's
``requests`` loop on ``/batch_predict`` and the official ``openai`` client on
``/v1/chat/completions`` (plain and streamed); auth on and off."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
import requests
from service_server import MAX_TASKS, start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def ofa_ve_client(url: str, pairs: list[tuple[str, str]]) -> list[dict]:
    """The OFA-VE guide's client, as written there: base64 images + texts, one POST."""
    tasks = []
    for image_path, text in pairs:
        with open(image_path, "rb") as f:
            tasks.append({"image_data": base64.b64encode(f.read()).decode("utf-8"),
                          "text": text})
    response = requests.post(url + "/batch_predict", json={"tasks": tasks})
    response.raise_for_status()
    return response.json()["predictions"]


def test_ofa_ve_client_gets_one_prediction_per_task_in_order(server, media) -> None:
    pairs = [(str(media["img"]), "a dog on a sofa"), (str(media["img2"]), "two birds"),
             (str(media["img"]), "an empty street")]
    preds = ofa_ve_client(server.url, pairs)
    assert [p["id"] for p in preds] == [0, 1, 2]
    for p in preds:
        assert p["entailment"] in ("yes", "maybe", "no")
        assert p["label"] == {"yes": "entailment", "maybe": "neutral",
                              "no": "contradiction"}[p["entailment"]]
        assert sum(p["probabilities"].values()) == pytest.approx(1, abs=1e-3)
        assert p["confidence"] == max(p["probabilities"].values())
    # the same pair asked again is the same job (a content key): answered, not scored again
    alone = ofa_ve_client(server.url, pairs[1:2])[0]
    assert alone["job_id"] == preds[1]["job_id"]
    assert alone["probabilities"] == preds[1]["probabilities"]


def test_a_bad_task_never_costs_the_others_their_answers(server, media) -> None:
    good = _b64(media["img"])
    tasks = [{"image_data": good, "text": "a cat", "id": "a"},
             {"image_data": "not base64 at all!!", "text": "a cat", "id": "broken"},
             {"image_data": "", "text": "a cat", "id": "empty"},
             {"image_data": base64.b64encode(b"plain text, no image").decode(), "text": "x",
              "id": "not-image"},
             {"image_data": good, "text": "   ", "id": "no-text"},
             {"text": "no image"},
             "not an object",
             {"image_data": f"data:image/png;base64,{good}", "hypothesis": "a cat", "id": "z"}]
    r = requests.post(server.url + "/batch_predict", json={"tasks": tasks})
    assert r.status_code == 200
    preds = r.json()["predictions"]
    assert [p["id"] for p in preds] == ["a", "broken", "empty", "not-image", "no-text", 5, 6,
                                        "z"]
    ok = {p["id"] for p in preds if "entailment" in p}
    assert ok == {"a", "z"}
    for p in preds:
        if p["id"] not in ok:
            assert p["error"] and "hint" in p and "Traceback" not in p["error"]
    assert "base64" in preds[1]["error"] and "empty" in preds[2]["error"]
    assert preds[0]["probabilities"] == pytest.approx(preds[7]["probabilities"], abs=1e-6)
    assert not list((server.data / "uploads" / "api").glob(".body-*"))  # spooled body removed


def test_an_image_that_does_not_decode_fails_its_own_task(server, media) -> None:
    """The readers check a task's image by its header; its worker decodes it, and a file cut
    short fails there, as that task's own error entry."""
    data = media["img"].read_bytes()
    cut = base64.b64encode(data[:len(data) // 2]).decode()
    tasks = [{"image_data": _b64(media["img"]), "text": "a cat", "id": "a"},
             {"image_data": cut, "text": "a cat", "id": "cut"},
             {"image_data": _b64(media["img2"]), "text": "two birds", "id": "b"}]
    r = requests.post(server.url + "/batch_predict", json={"tasks": tasks})
    assert r.status_code == 200
    preds = r.json()["predictions"]
    assert [p["id"] for p in preds] == ["a", "cut", "b"]
    assert "entailment" in preds[0] and "entailment" in preds[2]
    assert "not a readable image" in preds[1]["error"] and preds[1]["hint"]
    assert "Traceback" not in preds[1]["error"]
    # where the request's time went: each stage once, in order, in milliseconds
    stages = [part.strip().split(";dur=") for part in r.headers["Server-Timing"].split(",")]
    assert [name for name, _ in stages] == ["spool", "read", "queue", "jobs", "answer"]
    durations = [float(ms) for _, ms in stages]
    assert all(d >= 0 for d in durations)
    assert durations[3] > 0  # two images scored by the worker
    assert sum(durations) / 1000 <= r.elapsed.total_seconds() + 0.05


@pytest.mark.parametrize("body,status", [
    ({"tasks": []}, 400), ({"tasks": "x"}, 422), ({}, 422),
    ({"tasks": [{"text": "t"}] * (MAX_TASKS + 1)}, 413)],
    ids=["no-tasks", "tasks-not-list", "no-tasks-field", "too-many-tasks"])
def test_batch_predict_bad_requests(server, body, status) -> None:
    r = requests.post(server.url + "/batch_predict", json=body)
    assert r.status_code == status and r.json()["error"] and "hint" in r.json()


def test_batch_predict_non_json_is_400(server) -> None:
    r = requests.post(server.url + "/batch_predict", data=b"tasks=1",
                      headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _image_message(media, text: str = "What is in the picture?") -> list[dict]:
    return [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": [
                {"type": "text", "text": text},
                {"type": "image_url",
                 "image_url": {"url": f"data:image/png;base64,{_b64(media['img'])}"}}]}]


def test_openai_client_chat_and_stream_give_the_same_answer(server, media) -> None:
    client = _client(server)
    resp = client.chat.completions.create(model="test", messages=_image_message(media),
                                          max_tokens=200, temperature=0)
    text = resp.choices[0].message.content
    assert isinstance(text, str) and resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.prompt_tokens > resp.model_extra["chord"]["visual_tokens"] > 0
    assert resp.usage.completion_tokens <= 200
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    stream = client.chat.completions.create(model="test", messages=_image_message(media),
                                            max_tokens=200, stream=True,
                                            stream_options={"include_usage": True})
    parts, usage, finish = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(parts) == text  # greedy: the same question, the same answer
    assert usage.completion_tokens == resp.usage.completion_tokens and finish is not None


def test_openai_client_max_tokens_cuts_the_answer(server, media) -> None:
    from chord_core.runtime.store import Store

    resp = _client(server).chat.completions.create(
        model="chord", messages=_image_message(media, "Describe every detail."), max_tokens=5)
    assert resp.usage.completion_tokens <= 5
    notes = resp.model_extra["chord"]["notes"]
    assert any("random weights" in n for n in notes)
    # the job itself stopped at 5 new tokens (none generated only to be cut away)
    with Store(server.data / "chord.sqlite3") as store:
        job = store.get_job(resp.model_extra["chord"]["job_id"])
        doc = store.get_result(job["job_id"])
    assert job["spec"]["request"]["max_new_tokens"] == 5
    # usage is what the model read and wrote, as the job's result records it
    assert 0 < doc["tokens"]["completion"] <= 5
    assert resp.usage.completion_tokens == doc["tokens"]["completion"]
    assert resp.usage.prompt_tokens == doc["tokens"]["prompt"] > doc["sampling"]["visual_tokens"]


def test_openai_client_video_by_path_under_the_media_roots(server, media) -> None:
    client = _client(server)
    for url in (str(media["clip"]), f"file://{media['clip']}"):
        resp = client.chat.completions.create(model="test", max_tokens=128, temperature=0.7,
                                              messages=[{"role": "user", "content": [
                                                  {"type": "video_url", "video_url": {"url": url}},
                                                  {"type": "text", "text": "What happens?"}]}])
        assert isinstance(resp.choices[0].message.content, str)
        assert any("greedy" in n for n in resp.model_extra["chord"]["notes"])


@pytest.mark.parametrize("messages,model,error", [
    ([{"role": "user", "content": "hi, no image"}], "test", openai.BadRequestError),
    ([{"role": "user", "content": [{"type": "video_url",
                                    "video_url": {"url": "/etc/passwd"}}]}], "test",
     openai.BadRequestError),
    ([{"role": "user", "content": [{"type": "image_url",
                                    "image_url": {"url": "https://example.com/a.png"}}]}],
     "test", openai.BadRequestError),
    ([{"role": "user", "content": [{"type": "image_url",
                                    "image_url": {"url": "data:image/png;base64,%%%"}}]}],
     "test", openai.BadRequestError),
    ([{"role": "user", "content": "hi"}], "gpt-4o", openai.NotFoundError),
], ids=["no-media", "outside-roots", "remote-url", "broken-data-url", "unknown-model"])
def test_openai_client_errors_are_clear(server, messages, model, error) -> None:
    with pytest.raises(error) as info:
        _client(server).chat.completions.create(model=model, messages=messages)
    assert "hint" in str(info.value) and "Traceback" not in str(info.value)


def test_answer_boxes_are_parsed_and_normalised() -> None:
    from types import SimpleNamespace

    from chord_core.service.chat import _boxes

    result = SimpleNamespace(sampling=SimpleNamespace(input_wh=(200, 100)))
    text = 'Here: ```json\n[{"bbox_2d": [20, 10, 100, 50], "label": "dog"}]\n```'
    assert _boxes(text, result) == [{"bbox": [0.1, 0.1, 0.5, 0.5], "label": "dog",
                                     "kind": "box"}]
    assert _boxes("no boxes here", result) == []
    qwen3 = SimpleNamespace(sampling=result.sampling, model=SimpleNamespace(coords="relative1000"))
    assert _boxes('[{"bbox_2d": [100, 200, 500, 1000]}]', qwen3)[0]["bbox"] == [0.1, 0.2, 0.5, 1.0]


@pytest.fixture(scope="module")
def keyed(tiny_model_dir, tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("keyed"), "--cpu-workers", "1",
                       "--api-key", "s3cret", "--timeout", "0.05", wait_ready=False)
    yield srv
    stop_server(srv)


def test_health_is_503_with_progress_while_loading(keyed) -> None:
    first = keyed.first_health  # seen before the worker had loaded the model
    assert first is not None and first["status"] == "loading"
    assert first["progress"] == "0/1 workers ready" and first["hint"]
    assert [w["state"] for w in first["workers"]] == ["starting"]


def test_auth_on_needs_the_bearer_key(keyed) -> None:
    url = keyed.url + "/v1/models"
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
        r = httpx.get(url, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "API key" in r.json()["error"]
    assert httpx.get(url, headers={"authorization": "Bearer s3cret"}).status_code == 200
    assert httpx.post(keyed.url + "/batch_predict", json={"tasks": []}).status_code == 401
    assert httpx.get(keyed.url + "/health").status_code in (200, 503)  # open for probes
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed.url + "/v1", api_key="wrong", max_retries=0
                      ).models.list()
    models = openai.OpenAI(base_url=keyed.url + "/v1", api_key="s3cret").models.list()
    assert [m.id for m in models.data] == ["test"]


def test_per_request_time_limit_cancels_and_says_so(keyed, media) -> None:
    r = httpx.post(keyed.url + "/batch_predict", headers={"authorization": "Bearer s3cret"},
                   json={"tasks": [{"image_data": _b64(media["img"]), "text": "a cat"}]})
    assert r.status_code == 503 and r.headers["retry-after"]
    assert "longer than 0.05 s" in r.json()["error"] and "CHORD_API_TIMEOUT_S" in r.json()["hint"]


def test_auth_off_on_localhost_needs_no_key(server) -> None:
    assert httpx.get(server.url + "/v1/models").status_code == 200


@pytest.mark.parametrize("args", [["--host", "0.0.0.0"], ["--host", "192.0.2.1"]],
                         ids=["all-interfaces", "other-address"])
def test_public_address_without_key_is_refused_before_workers_start(args) -> None:
    out = subprocess.run([sys.executable, "-m", "chord_core", "serve", "--model", "test",
                          "--cpu-workers", "1", *args], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 2
    assert out.stderr.startswith("error: refusing to listen on")
    assert "hint:" in out.stderr and "--no-auth" in out.stderr and "plan:" not in out.stderr
