"""The docs' async Flask recipe (`KeyedClients(AsyncOpenAI)` in an `async def` view) under a
real Werkzeug server, where Flask runs each request on an event loop of its own: the clients
a closed loop left behind are closed without an error nobody retrieves."""

from __future__ import annotations

import gc
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from flask import Flask, Response, request
from werkzeug.serving import WSGIRequestHandler, make_server

from cooldown import CredentialPool, KeyedClients, init_app

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-async-recipe-one-0123456", "sk-async-recipe-two-0123456"]
ASK = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
}


class KeepAlive(WSGIRequestHandler):
    """HTTP/1.1 with keep-alive, as a real provider answers: a client's pool keeps the
    connection, bound to the event loop that opened it."""

    protocol_version = "HTTP/1.1"


def serve(app: Flask, handler: type[WSGIRequestHandler] = WSGIRequestHandler) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def upstream() -> Iterator[str]:
    provider = Flask("provider")

    @provider.post("/v1/chat/completions")
    def complete() -> Response:
        return Response(json.dumps(ANSWER), 200, mimetype="application/json")

    for url in serve(provider, KeepAlive):
        yield url + "/v1"


@pytest.fixture
def gateway(upstream: str, monkeypatch: pytest.MonkeyPatch, enabled: None) -> Iterator[str]:
    """The recipe in docs/integration.md, pointed at the loopback provider."""
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])
    app = Flask(__name__)
    init_app(app, error_format="openai")
    clients = KeyedClients(
        lambda key: openai.AsyncOpenAI(base_url=upstream, api_key=key, max_retries=0)
    )

    @app.post("/v1/chat/completions")
    async def chat() -> Any:
        body = request.json
        assert isinstance(body, dict)

        async def send(key: str) -> Any:
            return await clients[key].chat.completions.create(**body)

        completion = await CredentialPool.adispatch(P, send, model=body.get("model"))
        return completion.model_dump()

    yield from serve(app)


def test_twenty_requests_log_no_task_exception_never_retrieved(
    gateway: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = openai.OpenAI(base_url=gateway + "/v1", api_key="sk-client", max_retries=0)
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        for _ in range(20):
            assert client.chat.completions.create(**ASK).choices[0].message.content == "hi"
        gc.collect()  # what a busy process does sooner or later
    unretrieved = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    closed = [r for r in caplog.records if "Event loop is closed" in str(r.exc_info)]
    assert (len(unretrieved), len(closed)) == (0, 0)
