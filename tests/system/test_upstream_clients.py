"""`dispatch` with the clients gateways really call upstream with, over loopback.

The official `openai` (sync and async) and `anthropic` SDKs, and `requests`/`httpx` with
`raise_for_status()`: each throttled key, revoked key and all-throttled pool costs the same
upstream requests per key as plain HTTP (one per key, then our 429 with `Retry-After`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import anthropic
import httpx
import openai
import pytest
import requests
from flask import Flask, Response, request
from werkzeug.serving import WSGIRequestHandler, make_server

from cooldown import (
    CooldownError,
    CredentialPool,
    ModelCooldownExhausted,
    init_app,
    model_cooldown,
    relay,
)

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-proj-first-0123456789abcdef", "sk-proj-second-0123456789abcdef"]
MODEL = "gpt-4o"
MESSAGES = [{"role": "user", "content": "hi"}]


def completion(key: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"served by {KEYS.index(key)}"},
                "finish_reason": "stop",
            }
        ],
    }


def message(key: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": f"served by {KEYS.index(key)}"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


class KeepAliveHandler(WSGIRequestHandler):
    """HTTP/1.1 with keep-alive, as providers answer: clients pool their connections."""

    protocol_version = "HTTP/1.1"


class Upstream:
    """A loopback provider speaking OpenAI's and Anthropic's shapes; it counts requests per key
    and answers each key as told. Its 401 quotes a fragment of the key, as OpenAI's does."""

    def __init__(self, *, keep_alive: bool = False) -> None:
        self.answers: dict[str, tuple[int, dict[str, str]]] = {}
        self.requests: Counter[str] = Counter()
        self.retry_counts: list[str | None] = []
        app = Flask("upstream")

        @app.post("/v1/chat/completions")
        @app.post("/v1/messages")
        def answer() -> Response:
            key = request.headers.get("Authorization", "").removeprefix("Bearer ")
            key = request.headers.get("x-api-key", key)
            self.requests[key] += 1
            self.retry_counts.append(request.headers.get("x-stainless-retry-count"))
            status, headers = self.answers.get(key, (200, {}))
            if status != 200:
                error = {"message": f"Incorrect API key provided: {key[:8]}***{key[-4:]}"}
                body = {"type": "error", "error": {"type": "error", **error}}
                return Response(json.dumps(body), status, headers, mimetype="application/json")
            if (request.get_json(silent=True) or {}).get("stream"):
                return Response(self._events(key), mimetype="text/event-stream")
            served = message(key) if request.path.endswith("messages") else completion(key)
            return Response(json.dumps(served), mimetype="application/json")

        handler = KeepAliveHandler if keep_alive else WSGIRequestHandler
        self.server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _events(self, key: str) -> Iterator[str]:
        chunk = completion(key) | {"object": "chat.completion.chunk"}
        chunk["choices"] = [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]
        yield f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"

    def per_key(self) -> list[int]:
        return [self.requests[key] for key in KEYS]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    served = Upstream()
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch, enabled: None) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])


THROTTLED = (429, {"Retry-After": "30"})
REVOKED = (401, {})


# -- each client, as a gateway writes its send ----------------------------------------------------


def openai_create(upstream: Upstream) -> Callable[[str], Any]:
    return lambda key: openai.OpenAI(
        base_url=upstream.base_url, api_key=key, max_retries=0
    ).chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]


def openai_raw(upstream: Upstream) -> Callable[[str], Any]:
    return lambda key: openai.OpenAI(
        base_url=upstream.base_url, api_key=key, max_retries=0
    ).chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]


def anthropic_create(upstream: Upstream) -> Callable[[str], Any]:
    return lambda key: anthropic.Anthropic(
        base_url=upstream.base_url.removesuffix("/v1"), api_key=key, max_retries=0
    ).messages.create(model="claude-x", max_tokens=8, messages=MESSAGES)  # type: ignore[arg-type]


def requests_checked(upstream: Upstream) -> Callable[[str], Any]:
    def send(key: str) -> Any:
        answer = requests.post(
            f"{upstream.base_url}/chat/completions",
            json={"model": MODEL},
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        answer.raise_for_status()
        return answer.json()

    return send


def httpx_checked(upstream: Upstream) -> Callable[[str], Any]:
    def send(key: str) -> Any:
        answer = httpx.post(
            f"{upstream.base_url}/chat/completions",
            json={"model": MODEL},
            headers={"Authorization": f"Bearer {key}"},
        )
        return answer.raise_for_status().json()

    return send


def openai_async(upstream: Upstream) -> Callable[[str], Any]:
    async def send(key: str) -> Any:
        async with openai.AsyncOpenAI(
            base_url=upstream.base_url, api_key=key, max_retries=0
        ) as client:
            return await client.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]

    return send


SYNC_CLIENTS = [openai_create, openai_raw, anthropic_create, requests_checked, httpx_checked]
ALL_CLIENTS = [*SYNC_CLIENTS, openai_async]


def dispatch(client: Callable[[Upstream], Callable[[str], Any]], upstream: Upstream) -> Any:
    send = client(upstream)
    if client is openai_async:
        return asyncio.run(CredentialPool.adispatch(P, send, model=MODEL))
    return CredentialPool.dispatch(P, send, model=MODEL)


def served_by(answer: Any) -> str:
    if hasattr(answer, "parse"):  # a raw response: the caller parses it when it wants
        answer = answer.parse()
    if isinstance(answer, dict):
        return str(answer["choices"][0]["message"]["content"])
    if hasattr(answer, "choices"):
        return str(answer.choices[0].message.content)
    return str(answer.content[0].text)  # an anthropic Message


# -- 1. requests per key: as plain HTTP ------------------------------------------------------------


@pytest.mark.parametrize("client", ALL_CLIENTS)
def test_a_throttled_key_costs_one_request_and_rotates(
    client: Any, pool: None, upstream: Upstream
) -> None:
    upstream.answers[KEYS[0]] = THROTTLED
    assert served_by(dispatch(client, upstream)) == "served by 1"
    assert served_by(dispatch(client, upstream)) == "served by 1"  # the key still cools
    assert upstream.per_key() == [1, 2]


@pytest.mark.parametrize("client", ALL_CLIENTS)
def test_a_revoked_key_is_hit_once_then_never_again(
    client: Any, pool: None, upstream: Upstream
) -> None:
    upstream.answers[KEYS[0]] = REVOKED
    for _ in range(3):
        assert served_by(dispatch(client, upstream)) == "served by 1"
    assert upstream.per_key() == [1, 3]
    assert CredentialPool.status(P, model="another-model")["keys"][0]["state"] == "cooling"


@pytest.mark.parametrize("client", ALL_CLIENTS)
def test_every_key_throttled_is_our_429_with_retry_after_never_the_sdk_error(
    client: Any, pool: None, upstream: Upstream
) -> None:
    upstream.answers = {key: THROTTLED for key in KEYS}
    with pytest.raises(ModelCooldownExhausted) as raised:
        dispatch(client, upstream)
    assert 29 <= raised.value.retry_after <= 30
    assert raised.value.__cause__ is None
    assert raised.value.__context__ is None
    with pytest.raises(ModelCooldownExhausted):
        dispatch(client, upstream)  # refused before anything is sent
    assert upstream.per_key() == [1, 1]


@pytest.mark.parametrize("client", SYNC_CLIENTS)
def test_an_answer_that_is_not_a_key_problem_is_raised_as_it_came(
    client: Any, pool: None, upstream: Upstream
) -> None:
    upstream.answers[KEYS[0]] = (400, {})
    upstream.answers[KEYS[1]] = (400, {})
    with pytest.raises(
        (
            openai.BadRequestError,
            anthropic.BadRequestError,
            requests.HTTPError,
            httpx.HTTPStatusError,
        )
    ) as raised:
        dispatch(client, upstream)
    assert not isinstance(raised.value, CooldownError)
    assert raised.value.response.status_code == 400  # type: ignore[attr-defined]
    assert sum(upstream.per_key()) == 1  # a caller error: no rotation


def test_a_parsed_result_is_returned_unchanged(pool: None, upstream: Upstream) -> None:
    result = dispatch(openai_create, upstream)
    assert isinstance(result, openai.types.chat.ChatCompletion)
    assert sum(model_cooldown._state.admission._in_flight.values()) == 0


def test_an_sdk_stream_is_read_by_its_response_and_returned_unread(
    pool: None, upstream: Upstream
) -> None:
    upstream.answers[KEYS[0]] = THROTTLED

    def send(key: str) -> Any:
        client = openai.OpenAI(base_url=upstream.base_url, api_key=key, max_retries=0)
        return client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)  # type: ignore[arg-type]

    stream = CredentialPool.dispatch(P, send, model=MODEL)
    assert isinstance(stream, openai.Stream)
    assert [chunk.choices[0].delta.content for chunk in stream] == ["hi"]
    assert upstream.per_key() == [1, 1]


def test_an_async_stream_is_returned_unread(pool: None, upstream: Upstream) -> None:
    async def main() -> list[str | None]:
        client = openai.AsyncOpenAI(base_url=upstream.base_url, api_key="unused", max_retries=0)

        async def send(key: str) -> Any:
            return await client.with_options(api_key=key).chat.completions.create(
                model=MODEL,
                messages=MESSAGES,  # type: ignore[arg-type]
                stream=True,
            )

        stream = await CredentialPool.adispatch(P, send, model=MODEL)
        assert isinstance(stream, openai.AsyncStream)
        chunks = [chunk.choices[0].delta.content async for chunk in stream]
        await client.close()
        return chunks

    upstream.answers[KEYS[0]] = REVOKED
    assert asyncio.run(main()) == ["hi"]
    assert upstream.per_key() == [1, 1]


def test_a_flask_async_view_with_keyed_async_clients_serves_every_request(pool: None) -> None:
    """Flask runs each async view on a new event loop and closes it after: a client kept
    from an earlier request's loop (its pooled connection bound to that loop) must not
    serve the next one."""
    from cooldown import KeyedClients

    upstream = Upstream(keep_alive=True)

    app = Flask("async-gateway")
    init_app(app, error_format="openai")
    clients = KeyedClients(
        lambda key: openai.AsyncOpenAI(base_url=upstream.base_url, api_key=key, max_retries=0)
    )

    @app.post("/v1/chat/completions")
    async def chat() -> dict[str, Any]:
        completion = await CredentialPool.adispatch(
            P,
            lambda key: clients[key].chat.completions.create(model=MODEL, messages=MESSAGES),  # type: ignore[arg-type]
            model=MODEL,
        )
        return completion.model_dump()  # type: ignore[no-any-return]

    test_client = app.test_client()
    statuses = [test_client.post("/v1/chat/completions").status_code for _ in range(4)]
    upstream.server.shutdown()
    upstream.server.server_close()
    assert statuses == [200, 200, 200, 200]
    assert len(clients) <= len(KEYS)  # one per key, not one per request


# -- 2. what is not an answer ----------------------------------------------------------------------


def test_a_transport_failure_cools_nothing_and_propagates_unchanged(pool: None) -> None:
    def send(key: str) -> Any:
        client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key=key, max_retries=0)
        return client.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]

    with pytest.raises(openai.APIConnectionError):
        CredentialPool.dispatch(P, send, model=MODEL)
    assert sum(model_cooldown._state.admission._in_flight.values()) == 0
    assert CredentialPool.available(P, model=MODEL) == KEYS


def test_an_exception_with_only_a_status_code_is_read_too(pool: None) -> None:
    class Throttled(Exception):
        status_code = 429
        headers: ClassVar = {"retry-after": "7"}

    sent: list[str] = []

    def send(key: str) -> str:
        sent.append(key)
        if key == KEYS[0]:
            raise Throttled("no response attribute")
        return "served"

    assert CredentialPool.dispatch(P, send, model=MODEL) == "served"
    assert sent == KEYS
    assert 6 <= CredentialPool.status(P, model=MODEL)["keys"][0]["retry_after"] <= 7


class RaisingItems:
    def items(self) -> Any:
        raise RuntimeError("unreadable")


class RaisingMapping(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise RuntimeError("unreadable")


@pytest.mark.parametrize("odd", [RaisingItems(), RaisingMapping(a="b"), 5, object(), b"x"])
def test_unreadable_headers_on_a_throttle_still_record_the_throttle(
    pool: None, odd: object
) -> None:
    class Throttle:
        status_code = 429
        headers = odd

    sent: list[str] = []

    def send(key: str) -> object:
        sent.append(key)
        return Throttle() if key == KEYS[0] else "served"

    assert CredentialPool.dispatch(P, send, model=MODEL) == "served"
    assert CredentialPool.available(P, model=MODEL) == [KEYS[1]]


# -- 3. the SDKs' own retries ----------------------------------------------------------------------


def test_sdk_retries_inside_send_warn_once_naming_max_retries(
    pool: None, upstream: Upstream, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    upstream.answers = {key: (429, {"retry-after-ms": "1"}) for key in KEYS}
    client = openai.OpenAI(base_url=upstream.base_url, api_key="unused", max_retries=2)

    def send(key: str) -> Any:
        return client.with_options(api_key=key).chat.completions.create(
            model=MODEL,
            messages=MESSAGES,  # type: ignore[arg-type]
        )

    with caplog.at_level(logging.WARNING, "cooldown"), pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch(P, send, model=MODEL)
    assert upstream.per_key() == [3, 3]  # what max_retries=2 costs: why it must be 0
    warned = [record for record in caplog.records if "max_retries" in record.getMessage()]
    assert len(warned) == 1
    assert P in warned[0].getMessage()
    assert not any(key[:8] in record.getMessage() for key in KEYS for record in caplog.records)


def test_no_retry_warning_without_retries(
    pool: None, upstream: Upstream, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    upstream.answers[KEYS[0]] = THROTTLED
    with caplog.at_level(logging.WARNING, "cooldown"):
        dispatch(openai_raw, upstream)
    assert upstream.retry_counts == ["0", "0"]
    assert not [record for record in caplog.records if "max_retries" in record.getMessage()]


# -- 4. rotate_on: provider failures move on without cooling ---------------------------------------


def test_rotate_on_moves_a_5xx_to_the_next_key_and_cools_nothing(
    pool: None, upstream: Upstream
) -> None:
    upstream.answers[KEYS[0]] = (500, {})
    answer = CredentialPool.dispatch(
        P, requests_checked(upstream), model=MODEL, rotate_on=(500, 502, 503, 504)
    )
    assert served_by(answer) == "served by 1"
    assert CredentialPool.available(P, model=MODEL) == KEYS  # a provider failure cools nothing


def test_without_rotate_on_a_5xx_is_the_answer(pool: None, upstream: Upstream) -> None:
    upstream.answers[KEYS[0]] = (500, {})
    with pytest.raises(requests.HTTPError):
        CredentialPool.dispatch(P, requests_checked(upstream), model=MODEL, order="configured")
    assert upstream.per_key() == [1, 0]


def test_rotate_on_when_every_key_failed_the_last_answer_stands(
    pool: None, upstream: Upstream
) -> None:
    upstream.answers = {key: (503, {}) for key in KEYS}
    with pytest.raises(openai.InternalServerError):
        CredentialPool.dispatch(P, openai_create(upstream), model=MODEL, rotate_on=[503])
    assert upstream.per_key() == [1, 1]  # once per key


@pytest.mark.parametrize(
    ("rotate_on", "error"),
    [((429,), ValueError), ((600,), ValueError), ("500", TypeError), ((True,), TypeError)],
)
def test_rotate_on_takes_only_provider_failure_statuses(
    rotate_on: Any, error: type[Exception], pool: None
) -> None:
    with pytest.raises(error, match="rotate_on"):
        CredentialPool.dispatch(P, lambda key: "never", model=MODEL, rotate_on=rotate_on)


# -- 5. secrecy: an SDK's message never reaches what we raise, log or answer -----------------------


def test_no_sdk_message_reaches_our_error_its_chain_a_log_or_a_body(
    pool: None, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    upstream.answers = {key: REVOKED for key in KEYS}
    app = Flask("gateway")
    init_app(app, error_format="openai")

    @app.post("/v1/chat/completions")
    def chat() -> Any:
        return served_by(CredentialPool.dispatch(P, openai_create(upstream), model=MODEL))

    with caplog.at_level(logging.DEBUG):
        answer = app.test_client().post("/v1/chat/completions", json={})
        with pytest.raises(ModelCooldownExhausted) as raised:
            CredentialPool.dispatch(P, openai_create(upstream), model=MODEL)
    assert answer.status_code == 429
    assert "Retry-After" in answer.headers
    fragments = {key[:8] for key in KEYS} | {key[-4:] for key in KEYS}
    error: BaseException | None = raised.value
    while error is not None:
        assert not any(fragment in str(error) for fragment in fragments)
        error = error.__cause__ or error.__context__
    seen = answer.get_data(as_text=True) + "".join(r.getMessage() for r in caplog.records)
    assert not any(fragment in seen for fragment in fragments)


# -- 6. relaying what an SDK returned --------------------------------------------------------------


def test_relay_passes_on_an_sdk_raw_response(
    pool: None, upstream: Upstream, serve_in_thread: Callable[[Flask], str]
) -> None:
    upstream.answers[KEYS[0]] = THROTTLED
    app = Flask("gateway")
    init_app(app, error_format="openai")

    @app.post("/v1/chat/completions")
    def chat() -> Response:
        raw = CredentialPool.dispatch(P, openai_raw(upstream), model=MODEL)
        return relay(raw)

    client = openai.OpenAI(base_url=serve_in_thread(app) + "/v1", api_key="c", max_retries=0)
    result = client.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
    assert result.choices[0].message.content == "served by 1"
