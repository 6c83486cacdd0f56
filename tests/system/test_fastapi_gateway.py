"""A FastAPI gateway on a real uvicorn over loopback: `AsyncOpenAI` per key in `send`, a
throttled key rotated past, and every key throttled answered as our 429 that the SDK reads."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
import uvicorn
from fastapi import FastAPI, Request
from flask import Flask, Response
from flask import request as flask_request

from cooldown import CredentialPool, KeyedClients, init_app

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-fastapi-first-0123456789", "sk-fastapi-second-0123456789"]
ASK = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


class Provider:
    """An OpenAI-shaped upstream that throttles the keys it is told to, counting per key."""

    def __init__(self) -> None:
        self.throttled: set[str] = set()
        self.requests: Counter[str] = Counter()
        self.app = Flask("provider")

        @self.app.post("/v1/chat/completions")
        def complete() -> Response:
            key = flask_request.headers["Authorization"].removeprefix("Bearer ")
            self.requests[key] += 1
            if key in self.throttled:
                body = {"error": {"message": "Rate limit reached", "type": "requests"}}
                return Response(json.dumps(body), 429, {"Retry-After": "20"})
            return Response(json.dumps(completion(KEYS.index(key))), 200)


def completion(index: int) -> dict[str, Any]:
    message = {"role": "assistant", "content": f"served by {index}"}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4o",
            "choices": [choice]}  # fmt: skip


def gateway(upstream_url: str) -> FastAPI:
    """The recipe in docs/integration.md, pointed at the loopback provider."""
    app = FastAPI()
    init_app(app, error_format="openai")
    clients = KeyedClients(
        lambda key: openai.AsyncOpenAI(base_url=upstream_url, api_key=key, max_retries=0)
    )

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        completion = await CredentialPool.adispatch(
            P,
            lambda key: clients[key].chat.completions.create(**body),
            model=body["model"],
        )
        return completion.model_dump()

    return app


@pytest.fixture
def serve_asgi() -> Iterator[Callable[[Any], str]]:
    """Serve an ASGI app with a real uvicorn on a free loopback port; its base URL."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(app: Any) -> str:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        started = threading.Event()
        for _ in range(200):
            if server.started:
                started.set()
                break
            started.wait(0.025)
        assert started.is_set(), "uvicorn did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(5)


@pytest.fixture
def provider(serve_in_thread: Callable[[Flask], str]) -> tuple[Provider, str]:
    served = Provider()
    return served, serve_in_thread(served.app) + "/v1"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch, enabled: None) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key="sk-client", max_retries=0)


@pytest.mark.usefixtures("keys")
def test_a_throttled_key_is_rotated_past_over_real_http(
    provider: tuple[Provider, str], serve_asgi: Callable[[Any], str]
) -> None:
    upstream, upstream_url = provider
    upstream.throttled.add(KEYS[0])
    base_url = serve_asgi(gateway(upstream_url))
    answers = [client(base_url).chat.completions.create(**ASK) for _ in range(3)]
    assert [a.choices[0].message.content for a in answers] == ["served by 1"] * 3
    assert upstream.requests[KEYS[0]] == 1  # hit once, then cooling for its 20 s


@pytest.mark.usefixtures("keys")
def test_every_key_throttled_is_our_429_with_retry_after_read_by_the_sdk(
    provider: tuple[Provider, str], serve_asgi: Callable[[Any], str]
) -> None:
    upstream, upstream_url = provider
    upstream.throttled.update(KEYS)
    base_url = serve_asgi(gateway(upstream_url))
    for _ in range(2):
        with pytest.raises(openai.RateLimitError) as raised:
            client(base_url).chat.completions.create(**ASK)
        assert raised.value.code == "model_cooldown"
        assert raised.value.response.headers["retry-after"] == "20"
        assert raised.value.response.headers["cache-control"] == "no-store"
        assert "sk-fastapi" not in raised.value.response.text
    assert [upstream.requests[key] for key in KEYS] == [1, 1]  # the second ask sent nothing
