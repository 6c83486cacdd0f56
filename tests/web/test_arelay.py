"""`arelay`: what `adispatch` returned, streamed under Quart, read whole in a Flask async view."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import ClassVar

import aiohttp
import httpx
import pytest
import quart
from flask import Flask, Response, request
from werkzeug.serving import make_server

from cooldown import CredentialPool, arelay

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-one", "sk-two"]


class Upstream:
    """Key one is throttled; key two streams two events, the second after `release`."""

    def __init__(self) -> None:
        self.release = threading.Event()
        app = Flask("upstream")

        @app.post("/v1/chat/completions")
        def chat() -> Response:
            if request.headers["Authorization"] == f"Bearer {KEYS[0]}":
                return Response("{}", 429, {"Retry-After": "30"}, mimetype="application/json")
            return Response(self._events(), mimetype="text/event-stream")

        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/chat/completions"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _events(self) -> Iterator[bytes]:
        yield b'data: {"n": 1}\n\n'
        self.release.wait(timeout=5)  # bounded: a buffering relay fails, it does not hang
        yield b"data: [DONE]\n\n"


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch, enabled: None) -> Iterator[Upstream]:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])
    served = Upstream()
    yield served
    served.release.set()
    served.server.shutdown()
    served.server.server_close()


def streamed(upstream: Upstream, client: httpx.AsyncClient):  # type: ignore[no-untyped-def]
    async def send(key: str) -> httpx.Response:
        built = client.build_request(
            "POST", upstream.url, json={}, headers={"Authorization": f"Bearer {key}"}
        )
        return await client.send(built, stream=True)

    return send


def test_under_quart_the_first_event_arrives_before_the_upstream_finishes(
    upstream: Upstream,
) -> None:
    app = quart.Quart("gateway")

    @app.post("/v1/chat/completions")
    async def chat() -> quart.Response:
        client = httpx.AsyncClient(timeout=10)
        answer = await CredentialPool.adispatch(P, streamed(upstream, client), model="gpt-4o")
        return await arelay(answer)  # type: ignore[no-any-return]

    async def main() -> tuple[int, bytes, bytes]:
        async with app.test_client().request("/v1/chat/completions", method="POST") as connection:
            await connection.send_complete()
            first = await asyncio.wait_for(connection.receive(), timeout=5)
            upstream.release.set()  # only now may the upstream finish
            rest = b""
            while chunk := await asyncio.wait_for(connection.receive(), timeout=5):
                rest += chunk
            status = (await connection.as_response()).status_code
        return status, first, rest

    status, first, rest = asyncio.run(main())
    assert status == 200
    assert first == b'data: {"n": 1}\n\n'
    assert rest.endswith(b"data: [DONE]\n\n")


def test_in_a_flask_async_view_the_body_is_read_and_served(upstream: Upstream) -> None:
    upstream.release.set()
    app = Flask("gateway")

    @app.post("/v1/chat/completions")
    async def chat() -> Response:
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await CredentialPool.adispatch(P, streamed(upstream, client), model="gpt-4o")
            return await arelay(answer)  # type: ignore[no-any-return]

    answer = app.test_client().post("/v1/chat/completions")
    assert answer.status_code == 200
    assert answer.get_data() == b'data: {"n": 1}\n\ndata: [DONE]\n\n'
    assert answer.headers["Content-Type"].startswith("text/event-stream")


def test_arelay_copies_the_throttle_and_its_retry_after(upstream: Upstream) -> None:
    async def main() -> Response:
        async with httpx.AsyncClient() as client:
            answer = await client.post(upstream.url, headers={"Authorization": f"Bearer {KEYS[0]}"})
            with Flask("view").app_context():
                return await arelay(answer)  # type: ignore[no-any-return]

    relayed = asyncio.run(main())
    assert relayed.status_code == 429
    assert relayed.headers["Retry-After"] == "30"
    assert json.loads(relayed.get_data()) == {}


def test_arelay_refuses_what_is_not_an_async_response() -> None:
    with pytest.raises(TypeError, match="status"):
        asyncio.run(arelay("not a response"))
    with pytest.raises(TypeError, match="arelay"):
        asyncio.run(arelay(SyncOnly()))


class SyncOnly:
    """A status and headers, but no async body."""

    status_code = 200
    headers: ClassVar[dict[str, str]] = {}


def test_aiohttp_answers_rotate_and_relay(upstream: Upstream) -> None:
    upstream.release.set()

    async def main() -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as session:

            async def send(key: str) -> aiohttp.ClientResponse:
                return await session.post(upstream.url, headers={"Authorization": f"Bearer {key}"})

            answer = await CredentialPool.adispatch(P, send, model="gpt-4o")
            with Flask("view").app_context():
                relayed = await arelay(answer)
        return relayed.status_code, relayed.get_data()

    assert asyncio.run(main()) == (200, b'data: {"n": 1}\n\ndata: [DONE]\n\n')
    assert CredentialPool.available(P, model="gpt-4o") == [KEYS[1]]


def test_aiohttp_raise_for_status_is_read_by_its_status(upstream: Upstream) -> None:
    upstream.release.set()

    async def main() -> bytes:
        async with aiohttp.ClientSession() as session:

            async def send(key: str) -> bytes:
                headers = {"Authorization": f"Bearer {key}"}
                async with session.post(upstream.url, headers=headers) as answer:
                    answer.raise_for_status()  # ClientResponseError: .status, .headers
                    return await answer.read()

            return await CredentialPool.adispatch(P, send, model="gpt-4o")  # type: ignore[return-value]

    assert asyncio.run(main()).endswith(b"[DONE]\n\n")
    assert CredentialPool.available(P, model="gpt-4o") == [KEYS[1]]
