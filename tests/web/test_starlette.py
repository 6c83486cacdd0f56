"""`init_app` on Starlette and FastAPI: 429/503 with `Retry-After`, `no-store` and the chosen
body; a CORS warning when the middleware would hide `Retry-After`; `relay` as a stream."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from flask import Flask, Response
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from cooldown import APIError, ModelCooldownCapacity, ModelCooldownExhausted, arelay, init_app
from cooldown.web.starlette import relay


def raising(error: Exception, **init: Any) -> FastAPI:
    app = FastAPI()
    init_app(app, **init)

    @app.post("/v1/chat/completions")
    async def chat() -> None:
        raise error

    return app


def test_exhaustion_is_a_429_with_retry_after_and_no_store() -> None:
    answer = TestClient(raising(ModelCooldownExhausted(12))).post("/v1/chat/completions")
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "12"
    assert answer.headers["cache-control"] == "no-store"
    assert answer.json() == {
        "error": "model_cooldown",
        "retry_after": 12,
        "message": ModelCooldownExhausted(12).message,
    }


def test_capacity_is_a_503_in_openai_shape() -> None:
    app = raising(ModelCooldownCapacity(3), error_format="openai")
    answer = TestClient(app).post("/v1/chat/completions")
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "3"
    assert answer.json()["error"]["code"] == "model_cooldown_capacity"


def test_anthropic_shape_on_starlette() -> None:
    app = raising(ModelCooldownExhausted(4), error_format="anthropic")
    answer = TestClient(app).post("/v1/chat/completions")
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == "rate_limit_error"


def test_a_plain_starlette_app_is_served_too() -> None:
    async def chat(request: Request) -> None:
        raise ModelCooldownExhausted(5)

    app = Starlette(routes=[Route("/chat", chat, methods=["POST"])])
    init_app(app)
    init_app(app)  # a second call changes nothing
    answer = TestClient(app).post("/chat")
    assert (answer.status_code, answer.headers["retry-after"]) == (429, "5")


def test_an_apierror_handler_the_app_has_is_kept() -> None:
    app = FastAPI()

    async def own(request: Request, error: Exception) -> Any:
        from starlette.responses import PlainTextResponse

        return PlainTextResponse("ours", status_code=418)

    app.add_exception_handler(APIError, own)
    init_app(app)

    @app.get("/")
    async def index() -> None:
        raise APIError("nope", 400)

    assert TestClient(app).get("/").text == "ours"


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="error_format"):
        init_app(FastAPI(), error_format="xml")


# -- CORS: Retry-After readable by a browser -------------------------------------------------


def cors_app(**cors: Any) -> FastAPI:
    app = FastAPI()
    app.add_middleware(CORSMiddleware, allow_origins=["*"], **cors)
    init_app(app)

    @app.post("/chat")
    async def chat() -> None:
        raise ModelCooldownExhausted(9)

    return app


def hidden_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "expose_headers" in r.getMessage()]


@pytest.mark.usefixtures("fresh_warnings")
def test_cors_exposing_other_headers_warns_once_and_hides_retry_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "cooldown"):
        app = cors_app(expose_headers=["X-Request-Id"])
        answer = TestClient(app).post("/chat", headers={"Origin": "https://web.example"})
    assert len(hidden_warnings(caplog)) == 1
    assert answer.headers["access-control-expose-headers"] == "X-Request-Id"


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.parametrize("exposed", [None, ["Retry-After", "X-Request-Id"]])
def test_cors_that_keeps_retry_after_readable_does_not_warn(
    caplog: pytest.LogCaptureFixture, exposed: list[str] | None
) -> None:
    with caplog.at_level(logging.WARNING, "cooldown"):
        app = cors_app() if exposed is None else cors_app(expose_headers=exposed)
        answer = TestClient(app).post("/chat", headers={"Origin": "https://web.example"})
    assert hidden_warnings(caplog) == []
    exposed_names = answer.headers["access-control-expose-headers"].lower()
    assert "retry-after" in exposed_names
    assert answer.headers["access-control-allow-origin"] == "*"


# -- relay: an async upstream streamed chunk by chunk ----------------------------------------


@pytest.fixture
def slow_stream(serve_in_thread: Callable[[Flask], str]) -> Iterator[tuple[str, threading.Event]]:
    """An upstream whose second chunk waits until the test has read the first."""
    first_read = threading.Event()
    upstream = Flask("slow")

    @upstream.get("/events")
    def events() -> Response:
        def chunks() -> Iterator[bytes]:
            yield b"data: one\n\n"
            first_read.wait(5)
            yield b"data: two\n\n"

        return Response(chunks(), mimetype="text/event-stream", headers={"Retry-After": "1"})

    yield serve_in_thread(upstream) + "/events", first_read
    first_read.set()


@pytest.mark.parametrize("relaying", ["relay", "arelay"])
def test_relay_streams_an_httpx_upstream_chunk_by_chunk_and_closes_it(
    slow_stream: tuple[str, threading.Event], relaying: str
) -> None:
    url, first_read = slow_stream
    opened: list[httpx.Response] = []

    async def proxied(request: Request) -> Any:
        client = httpx.AsyncClient()
        upstream = await client.send(client.build_request("GET", url), stream=True)
        opened.append(upstream)
        return relay(upstream) if relaying == "relay" else await arelay(upstream)

    app = Starlette(routes=[Route("/proxied", proxied)])
    with TestClient(app) as test_client, test_client.stream("GET", "/proxied") as answer:
        assert answer.headers["retry-after"] == "1"
        chunks = answer.iter_bytes()
        assert next(chunks) == b"data: one\n\n"  # arrived before the upstream sent the rest
        first_read.set()
        assert b"".join(chunks) == b"data: two\n\n"
    assert opened[0].is_closed


def test_relay_streams_an_aiohttp_upstream(slow_stream: tuple[str, threading.Event]) -> None:
    import aiohttp

    url, first_read = slow_stream
    first_read.set()

    async def main() -> bytes:
        async with aiohttp.ClientSession() as session:
            upstream = await session.get(url)
            streamed = relay(upstream)
            assert isinstance(streamed, StreamingResponse)
            assert streamed.status_code == 200
            read = b"".join([chunk async for chunk in streamed.body_iterator])  # type: ignore[misc]
            assert upstream.closed
            return read

    assert asyncio.run(main()) == b"data: one\n\ndata: two\n\n"
