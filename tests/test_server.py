"""``llamaspec serve``: the OpenAI endpoints through the official openai client, against real servers on 127.0.0.1
running the tiny models (greedy answers equal a Generator's), bad input, the queue bound, disconnects,
metrics and shutdown."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

import llamaspec
from llamaspec.server import BackgroundServer, ServerConfig

N_CTX = 1024
PROMPT = "Hello world, this is a test of speculative decoding."
MESSAGES = [{"role": "user", "content": "Name three prime numbers."}]


def _config(models, **kwargs) -> ServerConfig:
    settings = dict(target=models["target"], draft=models["draft_simple"], n_max=4, n_seq=4, n_ctx=N_CTX, port=0,
                    model_name="tiny")
    settings.update(kwargs)
    return ServerConfig(**settings)


@pytest.fixture(scope="module")
def server(models):
    with BackgroundServer(_config(models)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def metrics(server) -> dict:
    """{(sample name, frozen labels): value} of the /metrics page, parsed with prometheus_client's parser."""
    text = httpx.get(server.url + "/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["model"] == "tiny"


def test_greedy_completion_equals_generate(models, client):
    with llamaspec.Generator(models["target"], models["draft_simple"], n_max=4, n_ctx=N_CTX) as gen:
        expected = gen.generate(PROMPT, 40)
        n_prompt = len(gen.tokenize(PROMPT))
    response = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0)
    assert response.choices[0].text == expected.text
    assert response.choices[0].finish_reason == "length"
    usage = response.usage
    assert usage.completion_tokens == len(expected.tokens) == 40
    assert usage.prompt_tokens == n_prompt
    spec = usage.model_extra["speculative"]
    assert spec["spec_type"] == "draft-simple" and spec["drafted"] == sum(spec["drafted_at"]) > 0
    assert spec["accepted"] == sum(spec["accepted_at"]) == expected.stats.n_accepted
    assert spec["P"] == pytest.approx([a / d if d else None for a, d in zip(spec["accepted_at"], spec["drafted_at"])])

    chunks = list(client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == expected.text
    assert chunks[-1].choices == [] and chunks[-1].usage.model_extra["speculative"]["accepted"] == spec["accepted"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_token_prompt_and_stop_string(models, client):
    with llamaspec.Generator(models["target"], models["draft_simple"], n_max=4, n_ctx=N_CTX) as gen:
        tokens = gen.tokenize(PROMPT)
        full = gen.generate(tokens, 40).text
    stop = full[10:13]
    assert client.completions.create(model="tiny", prompt=tokens, max_tokens=40, temperature=0).choices[0].text == full
    response = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop])
    assert response.choices[0].finish_reason == "stop"
    assert response.choices[0].text == full[:full.index(stop)]


def test_chat_equals_generator_chat(models, client):
    with llamaspec.Generator(models["target"], models["draft_simple"], n_max=4, n_ctx=N_CTX) as gen:
        expected = gen.chat(MESSAGES, 32)
    response = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=32, temperature=0)
    assert response.choices[0].message.role == "assistant"
    assert response.choices[0].message.content == expected.text
    stream = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=32, temperature=0,
                                            stream=True)
    deltas = [c.choices[0].delta for c in stream]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == expected.text


def test_next_chat_turn_reuses_the_conversation_in_the_cache(models):
    """Prefix reuse per sequence: the second turn finds the first turn's conversation in its sequence's cache
    (usage.prompt_tokens_details.cached_tokens, the metric), and answers as a cold Generator does."""
    with BackgroundServer(_config(models)) as srv, \
            llamaspec.Generator(models["target"], models["draft_simple"], n_max=4, n_ctx=N_CTX,
                                reuse_prefix=False) as cold:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        messages = list(MESSAGES)
        first = client.chat.completions.create(model="tiny", messages=messages, max_tokens=16, temperature=0)
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And three even ones?"}]
        second = client.chat.completions.create(model="tiny", messages=messages, max_tokens=16, temperature=0)
        assert second.choices[0].message.content == cold.chat(messages, 16).text
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert 0 < cached < second.usage.prompt_tokens
        assert cached >= first.usage.prompt_tokens - 1  # at least the first turn's prompt
        assert metrics(srv)[("llamaspec_prompt_tokens_cached_total", ())] == cached


def test_sampling_is_seeded(client):
    def sample(seed):
        return client.completions.create(model="tiny", prompt=PROMPT, max_tokens=24, temperature=0.9, top_p=0.95,
                                         seed=seed, extra_body={"top_k": 40, "min_p": 0.02}).choices[0].text
    assert sample(1) == sample(1)
    assert len({sample(s) for s in range(4)}) > 1


BAD_REQUESTS = [
    ("completions", b"{not json", "application/json", None),
    ("completions", b"[1, 2]", "application/json", None),
    ("completions", {"prompt": 3}, None, "prompt"),
    ("completions", {"prompt": "x", "max_tokens": "many"}, None, "max_tokens"),
    ("completions", {"prompt": "x", "max_tokens": 0}, None, "max_tokens"),
    ("completions", {"prompt": "x", "max_tokens": -5}, None, "max_tokens"),
    ("completions", {"prompt": "hello " * 2000}, None, "prompt"),
    ("completions", {"prompt": [10**9]}, None, "prompt"),
    ("completions", {"prompt": ["a", "b"]}, None, "prompt"),
    ("completions", {"prompt": "x", "n": 2}, None, "n"),
    ("completions", {"prompt": "x", "logprobs": 2}, None, "logprobs"),
    ("completions", {"prompt": "x", "echo": True}, None, "echo"),
    ("completions", {"prompt": "x", "temperature": -1}, None, "temperature"),
    ("completions", {"prompt": "x", "top_p": 0}, None, "top_p"),
    ("completions", {"prompt": "x", "stop": [""]}, None, "stop"),
    ("chat/completions", {"messages": []}, None, "messages"),
    ("chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, None, "messages.0.role"),
    ("chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     None, "messages"),
    ("chat/completions", {"messages": MESSAGES, "tools": [{"type": "function", "function": {"name": "f"}}]},
     None, "tools"),
    ("chat/completions", {"messages": MESSAGES, "response_format": {"type": "json_object"}}, None,
     "response_format"),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi " * 2000}]}, None, "messages"),
]


@pytest.mark.parametrize("endpoint, body, content_type, param", BAD_REQUESTS,
                         ids=[f"{e}-{i}" for i, (e, *_rest) in enumerate(BAD_REQUESTS)])
def test_bad_request_is_a_400_with_a_json_error(server, client, endpoint, body, content_type, param):
    url = f"{server.url}/v1/{endpoint}"
    if isinstance(body, bytes):
        response = httpx.post(url, content=body, headers={"content-type": content_type})
    else:
        response = httpx.post(url, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param, error
    # nobody else is disturbed
    assert client.completions.create(model="tiny", prompt="ok", max_tokens=4, temperature=0).usage.completion_tokens == 4


def test_api_key(models):
    with BackgroundServer(_config(models, api_key="sesame", n_seq=1)) as srv:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            response = httpx.get(srv.url + "/v1/models", headers=headers)
            assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0).models.list()
        good = openai.OpenAI(base_url=srv.url + "/v1", api_key="sesame", max_retries=0)
        assert good.completions.create(model="tiny", prompt="hi", max_tokens=3).usage.completion_tokens == 3


def _open_stream(url: str, max_tokens: int) -> tuple:
    """A streamed completion whose first chunk has arrived (so it is running): (client, response, line iterator;
    keep it: a collected iterator closes the response)."""
    http = httpx.Client(timeout=30)
    request = http.build_request("POST", url + "/v1/completions",
                                 json={"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True})
    response = http.send(request, stream=True)
    assert response.status_code == 200
    lines = response.iter_lines()
    while not next(lines).startswith("data: "):
        pass
    return http, response, lines


def _wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_disconnect_cancels_and_frees_the_sequence(models):
    with BackgroundServer(_config(models, n_seq=1, n_ctx=16384)) as srv:
        http, response, lines = _open_stream(srv.url, max_tokens=15000)
        time.sleep(0.5)
        assert metrics(srv)[("llamaspec_running_sequences", ())] == 1  # still generating
        response.close()
        http.close()
        assert _wait_for(lambda: metrics(srv)[("llamaspec_requests_cancelled_total", ())] == 1)
        page = metrics(srv)
        assert page[("llamaspec_running_sequences", ())] == 0
        assert page[("llamaspec_generation_tokens_total", ())] < 15000  # cut short, not run to the end
        # the one sequence is free: a new request runs at once
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=10)
        assert client.completions.create(model="tiny", prompt="hi", max_tokens=5).usage.completion_tokens == 5


def test_queue_bound_is_a_429(models):
    with BackgroundServer(_config(models, n_seq=1, max_waiting=1, n_ctx=16384)) as srv:
        first = _open_stream(srv.url, max_tokens=15000)  # running
        second_http = httpx.Client(timeout=30)  # waits for the sequence (its headers come once it streams)
        second = threading.Thread(target=lambda: second_http.post(
            srv.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "temperature": 0}), daemon=True)
        second.start()
        assert _wait_for(lambda: metrics(srv)[("llamaspec_waiting_requests", ())] == 1)
        third = httpx.post(srv.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 4})
        assert third.status_code == 429 and third.json()["error"]["type"] == "rate_limit_error"
        first[1].close()
        first[0].close()
        second.join(timeout=20)
        assert not second.is_alive()
        assert metrics(srv)[("llamaspec_requests_total", (("endpoint", "/v1/completions"), ("status", "429")))] == 1


def test_metrics_count_every_position(models):
    with BackgroundServer(_config(models)) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        usages = [client.completions.create(model="tiny", prompt=p, max_tokens=30, temperature=0).usage
                  for p in ("Once upon a time", "def fib(n):", "the cat the cat the cat")]
        page = metrics(srv)
        specs = [u.model_extra["speculative"] for u in usages]
        for i in range(4):
            label = (("position", str(i + 1)),)
            assert page[("llamaspec_spec_draft_tokens_total", label)] == sum(s["drafted_at"][i] for s in specs)
            assert page[("llamaspec_spec_accepted_tokens_total", label)] == sum(s["accepted_at"][i] for s in specs)
        assert page[("llamaspec_generation_tokens_total", ())] == sum(u.completion_tokens for u in usages)
        assert page[("llamaspec_prompt_tokens_total", ())] == sum(u.prompt_tokens for u in usages)
        assert page[("llamaspec_spec_rounds_total", ())] == sum(s["rounds"] for s in specs)
        assert page[("llamaspec_round_seconds_count", ())] > 0
        assert page[("llamaspec_requests_total", (("endpoint", "/v1/completions"), ("status", "200")))] == 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_ends_running_requests_and_exits_0(models, tmp_path):
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "llamaspec", "serve", models["target"], "--draft",
                                models["draft_simple"], "--n-max", "4", "--n-seq", "2", "--n-ctx", "16384",
                                "--port", str(port), "--shutdown-seconds", "3"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        assert _wait_for(lambda: _healthy(url), timeout=60), process.stderr.read() if process.poll() else ""
        http, response, lines = _open_stream(url, max_tokens=15000)  # runs ~20 s if nothing stops it
        process.send_signal(signal.SIGTERM)
        start = time.monotonic()
        rest = list(lines)  # the response ends properly: an error event says the server stopped
        assert any('"server_error"' in line for line in rest) and "shut down" in rest[-2]
        assert process.wait(timeout=20) == 0
        assert time.monotonic() - start < 3 + 5  # the 3 s bound, plus unloading
        http.close()
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/health")
    finally:
        if process.poll() is None:
            process.kill()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_serve_with_a_missing_model_is_a_clear_error(tmp_path):
    run = subprocess.run([sys.executable, "-m", "llamaspec", "serve", str(tmp_path / "missing.gguf"), "--port", "0"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.startswith("error:") and "missing.gguf" in run.stderr


def test_the_server_is_not_imported_by_llamaspec():
    code = "import sys, llamaspec; print([m for m in sys.modules if m.startswith(('llamaspec.server', 'fastapi'))])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"
