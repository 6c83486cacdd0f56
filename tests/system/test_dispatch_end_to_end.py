"""The one-call path: no upstream 401 reaches the client, streamed relay, and `adispatch`."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
import requests
import urllib3
from flask import Flask, Response, request
from flask_cors import CORS
from werkzeug.serving import make_server

from cooldown import CredentialPool, ModelCooldownExhausted, init_app, model_cooldown, relay

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-one", "sk-two"]
BODY = {"model": "gpt-4o", "messages": []}


class Upstream:
    """A loopback provider: per-key status and headers, and a stream the test releases."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, dict[str, str]]] = {}
        self.calls: list[str] = []
        self.release = threading.Event()
        self.finished_at = 0.0
        app = Flask("upstream")

        @app.post("/v1/chat/completions")
        def chat() -> Response:
            key = request.headers.get("Authorization", "").removeprefix("Bearer ")
            self.calls.append(key)
            status, headers = self.answers.get(key, (200, {}))
            if status == 200 and (request.get_json(silent=True) or {}).get("stream"):
                return Response(self._events(), mimetype="text/event-stream")
            body = json.dumps({"served_by": key, "error": {"message": f"status {status}"}})
            return Response(body, status=status, headers=headers, mimetype="application/json")

        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}/v1/chat/completions"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _events(self) -> Iterator[bytes]:
        yield b'data: {"chunk": 1}\n\n'
        self.release.wait(timeout=5)  # bounded: a buffering relay fails, it does not hang
        yield b'data: {"chunk": 2}\n\ndata: [DONE]\n\n'
        self.finished_at = time.monotonic()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    served = Upstream()
    yield served
    served.release.set()
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def by_requests(upstream: Upstream, body: dict[str, Any] = BODY) -> Callable[[str], Any]:
    return lambda key: requests.post(
        upstream.url, json=body, headers=auth(key), stream=True, timeout=10
    )


def by_httpx(upstream: Upstream, body: dict[str, Any] = BODY) -> Callable[[str], Any]:
    client = httpx.Client(timeout=10)
    return lambda key: client.send(
        client.build_request("POST", upstream.url, json=body, headers=auth(key)), stream=True
    )


def by_urllib3(upstream: Upstream, body: dict[str, Any] = BODY) -> Callable[[str], Any]:
    manager = urllib3.PoolManager()
    return lambda key: manager.request(
        "POST", upstream.url, body=json.dumps(body), headers=auth(key), preload_content=False
    )


def by_http_client(upstream: Upstream, body: dict[str, Any] = BODY) -> Callable[[str], Any]:
    def send(key: str) -> http.client.HTTPResponse:
        connection = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=10)
        connection.request("POST", "/v1/chat/completions", json.dumps(body), auth(key))
        return connection.getresponse()

    return send


CLIENTS = [by_requests, by_httpx, by_urllib3, by_http_client]


# -- 1. the client never sees a key's 401 or 429 --------------------------------------------------


@pytest.mark.parametrize("client", [by_requests, by_httpx])
@pytest.mark.parametrize(
    "answers", [(401, 429), (429, 429), (401, 401)], ids=["401+429", "429+429", "401+401"]
)
def test_every_key_failing_is_our_429_never_the_upstreams_answer(
    enabled: None,
    pool: None,
    upstream: Upstream,
    client: Callable[[Upstream], Callable[[str], Any]],
    answers: tuple[int, int],
) -> None:
    for key, status in zip(KEYS, answers, strict=True):
        upstream.answers[key] = (status, {"Retry-After": "7"} if status == 429 else {})
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.dispatch(P, client(upstream), model="gpt-4o")
    assert upstream.calls == KEYS
    expected = 7 if 429 in answers else 300  # the soonest release among the keys
    assert raised.value.retry_after in (expected - 1, expected)


@pytest.mark.parametrize("client", [by_requests, by_httpx])
def test_a_rotation_that_ends_served_returns_the_served_answer(
    enabled: None, pool: None, upstream: Upstream, client: Callable[[Upstream], Any]
) -> None:
    upstream.answers[KEYS[0]] = (401, {})
    response = CredentialPool.dispatch(P, client(upstream), model="gpt-4o")
    assert response.status_code == 200
    assert json.loads(b"".join(relay(response).response))["served_by"] == KEYS[1]


def test_the_legacy_path_still_returns_the_last_answer(pool: None, upstream: Upstream) -> None:
    upstream.answers[KEYS[0]] = (401, {})
    upstream.answers[KEYS[1]] = (429, {})
    response = CredentialPool.dispatch(P, by_requests(upstream), model="gpt-4o")
    assert response.status_code == 429
    response.close()
    assert model_cooldown.entry_count == 0


def gateway(upstream: Upstream, client: Callable[[Upstream, dict[str, Any]], Any]) -> Flask:
    """The README's integration: dispatch, then relay."""
    app = Flask("gateway")
    init_app(app, error_format="openai")

    @app.post("/v1/chat/completions")
    def chat() -> Response:
        body = request.get_json()
        answer = CredentialPool.dispatch(P, client(upstream, body), model=body["model"])
        return relay(answer)

    return app


def test_the_openai_sdk_sees_a_retryable_rate_limit_not_a_bad_key(
    enabled: None, pool: None, upstream: Upstream, serve_in_thread: Callable[[Flask], str]
) -> None:
    upstream.answers[KEYS[0]] = (401, {})
    upstream.answers[KEYS[1]] = (429, {"Retry-After": "1"})
    arrivals: list[float] = []
    app = gateway(upstream, by_requests)
    app.before_request(lambda: arrivals.append(time.monotonic()) and None)
    client = openai.OpenAI(base_url=serve_in_thread(app) + "/v1", api_key="sk-c", max_retries=1)
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="gpt-4o", messages=[])
    assert raised.value.code == "model_cooldown"
    assert raised.value.response.headers["Retry-After"] == "1"
    assert len(arrivals) == 2  # retried once, as a rate limit is retryable
    assert arrivals[1] - arrivals[0] >= 0.9  # after the Retry-After we sent


# -- 2. relay ------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_relay_streams_the_first_event_before_the_upstream_finishes(
    enabled: None,
    pool: None,
    upstream: Upstream,
    client: Callable[[Upstream, dict[str, Any]], Any],
    serve_in_thread: Callable[[Flask], str],
) -> None:
    url = serve_in_thread(gateway(upstream, client)) + "/v1/chat/completions"
    answer = requests.post(url, json={**BODY, "stream": True}, stream=True, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    chunks = answer.iter_content(chunk_size=None)
    first = next(chunks)
    first_at = time.monotonic()
    assert b'"chunk": 1' in first
    assert upstream.finished_at == 0.0  # the upstream is still waiting to send the rest
    upstream.release.set()
    rest = b"".join(chunks)
    assert b'"chunk": 2' in rest
    assert b"[DONE]" in rest
    assert upstream.finished_at > first_at


@pytest.mark.parametrize("client", CLIENTS)
def test_relay_copies_status_and_retry_after_exposed_through_flask_cors(
    enabled: None,
    pool: None,
    upstream: Upstream,
    client: Callable[[Upstream, dict[str, Any]], Any],
) -> None:
    for key in KEYS:  # a provider failure is no key problem: it passes through
        upstream.answers[key] = (503, {"Retry-After": "9", "Set-Cookie": "upstream=1"})
    app = gateway(upstream, client)
    CORS(app, expose_headers=["X-Request-Id"])
    answer = app.test_client().post(
        "/v1/chat/completions", json=BODY, headers={"Origin": "https://app.example"}
    )
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "9"
    exposed = {
        name.strip().lower() for name in answer.headers["Access-Control-Expose-Headers"].split(",")
    }
    assert exposed == {"x-request-id", "retry-after"}
    assert "Set-Cookie" not in answer.headers  # only the named headers are copied
    assert answer.get_json()["error"]["message"] == "status 503"


def test_relay_refuses_what_is_not_a_response() -> None:
    with pytest.raises(TypeError, match="status"):
        relay("not a response")
    with pytest.raises(TypeError, match="relay"):
        relay(type("Odd", (), {"status_code": 200, "headers": {}})())
    with pytest.raises(TypeError, match="header names"):
        relay(requests.Response(), headers="Retry-After")


# -- 3. adispatch --------------------------------------------------------------------------------


def async_sender(upstream: Upstream, client: httpx.AsyncClient) -> Callable[[str], Any]:
    async def send(key: str) -> httpx.Response:
        return await client.post(upstream.url, json=BODY, headers=auth(key))

    return send


def test_adispatch_rotates_with_a_real_async_client(
    enabled: None, pool: None, upstream: Upstream
) -> None:
    upstream.answers[KEYS[0]] = (429, {"Retry-After": "30"})

    async def main() -> httpx.Response | None:
        async with httpx.AsyncClient(timeout=10) as client:
            return await CredentialPool.adispatch(P, async_sender(upstream, client), model="gpt-4o")

    response = asyncio.run(main())
    assert response is not None
    assert response.json()["served_by"] == KEYS[1]
    assert CredentialPool.select(P, model="gpt-4o") == KEYS[1]  # the throttle was recorded


def test_adispatch_raises_our_429_when_every_key_fails(
    enabled: None, pool: None, upstream: Upstream
) -> None:
    upstream.answers = {KEYS[0]: (401, {}), KEYS[1]: (429, {"Retry-After": "5"})}

    async def main() -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            await CredentialPool.adispatch(P, async_sender(upstream, client), model="gpt-4o")

    with pytest.raises(ModelCooldownExhausted):
        asyncio.run(main())


def test_adispatch_in_a_flask_async_view(enabled: None, pool: None, upstream: Upstream) -> None:
    upstream.answers[KEYS[0]] = (401, {})
    app = Flask("async-view")
    init_app(app, error_format="openai")

    @app.post("/v1/chat/completions")
    async def chat() -> Response:
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await CredentialPool.adispatch(
                P, async_sender(upstream, client), model="gpt-4o"
            )
        return Response(answer.content, answer.status_code, mimetype="application/json")

    client = app.test_client()
    assert client.post("/v1/chat/completions").get_json()["served_by"] == KEYS[1]
    upstream.answers[KEYS[1]] = (429, {"Retry-After": "8"})
    model_cooldown.reset()
    CredentialPool.reset()
    answer = client.post("/v1/chat/completions")
    assert answer.status_code == 429
    assert answer.get_json()["error"]["code"] == "model_cooldown"


def test_adispatch_under_quart(enabled: None, pool: None, upstream: Upstream) -> None:
    from quart import Quart

    upstream.answers[KEYS[0]] = (429, {"Retry-After": "30"})
    app = Quart("quart-gateway")

    @app.post("/v1/chat/completions")
    async def chat() -> tuple[bytes, int]:
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await CredentialPool.adispatch(
                P, async_sender(upstream, client), model="gpt-4o"
            )
        return answer.content, answer.status_code

    async def main() -> tuple[int, bytes]:
        answer = await app.test_client().post("/v1/chat/completions")
        return answer.status_code, await answer.get_data()

    status, data = asyncio.run(main())
    assert status == 200
    assert json.loads(data)["served_by"] == KEYS[1]


def test_a_frozen_redis_does_not_stall_the_event_loop(
    enabled: None,
    pool: None,
    upstream: Upstream,
    monkeypatch: pytest.MonkeyPatch,
    redis_servers: Callable[..., Any],
) -> None:
    server = redis_servers()
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", server.url)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", "s" * 32)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_TIMEOUT_MS", "1000")
    upstream.answers[KEYS[0]] = (429, {"Retry-After": "30"})
    server.freeze()

    async def main() -> tuple[float, httpx.Response | None]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            last = time.monotonic()
            while not done.is_set():
                await asyncio.sleep(0.005)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()

        async with httpx.AsyncClient(timeout=10) as client:
            ticking = asyncio.create_task(ticker())
            response = await CredentialPool.adispatch(
                P, async_sender(upstream, client), model="gpt-4o"
            )
            done.set()
            await ticking
        return max(gaps), response

    started = time.monotonic()
    longest_gap, response = asyncio.run(main())
    assert time.monotonic() - started >= 0.9  # Redis was really waited on (in a thread)
    assert longest_gap < 0.05
    assert response is not None
    assert response.json()["served_by"] == KEYS[1]  # degraded to local state, still rotating


def test_the_sync_dispatch_refuses_async_send_without_a_never_awaited_warning(
    enabled: None, pool: None
) -> None:
    async def send(key: str) -> None:
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="adispatch"):
            CredentialPool.dispatch(P, send, model="gpt-4o")
        with pytest.raises(TypeError, match="adispatch"):
            CredentialPool.dispatch(P, lambda key: send(key), model="gpt-4o")
        import gc

        gc.collect()  # a coroutine left unclosed would warn here


@pytest.mark.parametrize("ending", ["raises", "cancelled"])
def test_an_attempt_ending_while_redis_freezes_does_not_stall_the_event_loop(
    enabled: None,
    pool: None,
    monkeypatch: pytest.MonkeyPatch,
    redis_servers: Callable[..., Any],
    ending: str,
) -> None:
    server = redis_servers()
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", server.url)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", "s" * 32)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_TIMEOUT_MS", "1000")

    async def main() -> float:
        gaps: list[float] = []
        done = asyncio.Event()
        sending = asyncio.Event()

        async def ticker() -> None:
            last = time.monotonic()
            while not done.is_set():
                await asyncio.sleep(0.005)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()

        async def send(key: str) -> httpx.Response:
            server.freeze()  # Redis answered the attempt's start; its end meets a frozen server
            if ending == "raises":
                raise httpx.ConnectError("refused")
            sending.set()
            await asyncio.sleep(30)  # cancelled long before
            raise AssertionError("not cancelled")

        ticking = asyncio.create_task(ticker())
        dispatching = asyncio.create_task(CredentialPool.adispatch(P, send, model="gpt-4o"))
        if ending == "cancelled":
            await asyncio.wait_for(sending.wait(), timeout=5)
            dispatching.cancel()
        with contextlib.suppress(httpx.ConnectError, asyncio.CancelledError):
            await dispatching
        done.set()
        await ticking
        return max(gaps)

    assert asyncio.run(main()) < 0.05  # the attempt's end waited on Redis in a worker thread
