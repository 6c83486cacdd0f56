"""An upstream's answer passed on as a streamed response, without reading it whole.

`relay` serves a sync view (requests, httpx, urllib3, `http.client`, the SDKs' raw responses
and streams); `arelay` serves an `async def` view (httpx.AsyncClient, aiohttp, the SDKs' async
raw responses): under Quart and Starlette it streams chunk by chunk, and in a Flask async view,
which cannot stream from its own event loop, it reads the body first.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from flask import Response, has_app_context

from ..evidence.answers import response_headers, response_status

__all__ = ["RELAYED_HEADERS", "answer_stream", "arelay", "relay", "starlette_stream"]

RELAYED_HEADERS = ("Retry-After", "Content-Type")
CHUNK_BYTES = 64 * 1024


def _http(upstream: object) -> tuple[Any, int]:
    """The HTTP response behind what `dispatch` returned, and its status.

    An SDK raw response relays its `.http_response`, an SDK stream its `.response`.
    """
    for candidate in (
        getattr(upstream, "http_response", None),
        upstream,
        getattr(upstream, "response", None),
    ):
        status = response_status(candidate)
        if status is not None:
            return candidate, status
    raise TypeError("relay() needs a response with an int .status_code or .status")


def _names(headers: Iterable[str]) -> list[str]:
    if isinstance(headers, (str, bytes)):
        raise TypeError("headers must be a sequence of header names, not a single string")
    names = list(headers)
    if not all(isinstance(name, str) for name in names):
        raise TypeError("each header name must be a str")
    return names


def _copied(http: object, names: list[str]) -> dict[str, str]:
    """Only the named headers (case-insensitively): hop-by-hop headers, cookies and the
    upstream's encoding never reach the client."""
    available = response_headers(http)
    copied = {name: available.get(name.lower()) for name in names}
    return {name: value for name, value in copied.items() if isinstance(value, str)}


def _chunks(upstream: Any) -> Iterable[bytes]:
    """The body as the upstream sends it, decoded; chosen now, so a wrong object fails early."""
    if callable(getattr(upstream, "iter_bytes", None)):  # httpx
        return upstream.iter_bytes()  # type: ignore[no-any-return]
    if callable(getattr(upstream, "iter_content", None)):  # requests
        return upstream.iter_content(chunk_size=None)  # type: ignore[no-any-return]
    if callable(getattr(upstream, "read1", None)):  # urllib3, http.client
        return _read1_chunks(upstream)
    raise TypeError("relay() takes a requests, httpx, urllib3 or http.client response")


def _read1_chunks(upstream: Any) -> Iterator[bytes]:
    """Each `read1` returns what has arrived, so server-sent events pass as they come."""
    relayed = False
    while chunk := upstream.read1(CHUNK_BYTES):
        relayed = True
        yield chunk
    if not relayed and isinstance(getattr(upstream, "data", None), bytes):
        yield upstream.data  # urllib3 read the body already (preload_content)


def _body(upstream: Any, chunks: Iterable[bytes]) -> Iterator[bytes]:
    try:
        yield from chunks
    finally:  # also when the client goes away mid-stream: the connection is given back
        close = getattr(upstream, "close", None)
        if callable(close) and not getattr(upstream, "is_closed", False):
            close()  # (an httpx response read to the end, even an async one, is closed)


def relay(upstream: object, *, headers: Iterable[str] = RELAYED_HEADERS) -> Response:
    """A Flask `Response` with the upstream's status, the named headers and its body, streamed.

    Only the named headers are copied (case-insensitively). `Retry-After` is copied by
    default; on an app set up with `init_app` it is exposed cross-origin like the adapter's
    own 429. An SDK raw response (`with_raw_response`) or stream (`stream=True`) relays the
    HTTP response behind it.
    """
    names = _names(headers)
    http, status = _http(upstream)
    body = _body(http, _chunks(http))
    response = Response(body, status=status, mimetype="application/octet-stream")
    response.headers.update(_copied(http, names))
    return response


def _achunks(upstream: Any) -> AsyncIterator[bytes]:
    if callable(getattr(upstream, "aiter_bytes", None)):  # httpx.AsyncClient
        return upstream.aiter_bytes()  # type: ignore[no-any-return]
    content: Any = getattr(upstream, "content", None)  # aiohttp: a StreamReader
    if callable(getattr(content, "iter_any", None)):
        return content.iter_any()  # type: ignore[no-any-return]
    raise TypeError("arelay() takes an httpx.AsyncClient or aiohttp response")


async def _abody(upstream: Any, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield chunk
    finally:  # the connection is given back, also when the client goes away mid-stream
        aclose = getattr(upstream, "aclose", None)
        if callable(aclose):
            await aclose()
        elif callable(getattr(upstream, "release", None)):  # aiohttp
            upstream.release()


def answer_stream(
    upstream: object, headers: Iterable[str]
) -> tuple[int, dict[str, str], AsyncIterator[bytes]]:
    """An async upstream's status, the named headers, and its body as it arrives (the
    upstream closed when the body ends or its reader stops)."""
    names = _names(headers)
    http, status = _http(upstream)
    return status, _copied(http, names), _abody(http, _achunks(http))


async def arelay(upstream: object, *, headers: Iterable[str] = RELAYED_HEADERS) -> Any:
    """`relay` for an `async def` view and what `adispatch` returned.

    Under Quart: a Quart response streamed chunk by chunk; inside a Starlette or FastAPI
    request: a `StreamingResponse`, likewise. In a Flask `async def` view, Flask cannot
    stream from the view's event loop, so the body is read first and a Flask `Response`
    returned; to stream from Flask, use a sync view with `dispatch` and `relay`.
    """
    status, copied, body = answer_stream(upstream, headers)
    if _in_quart_app():
        import quart

        quart_response = quart.Response(body, status=status, mimetype="application/octet-stream")
        quart_response.headers.update(copied)
        return quart_response
    if not has_app_context() and "starlette" in sys.modules:  # an ASGI app that is not Quart
        return starlette_stream(status, copied, body)
    read = b"".join([chunk async for chunk in body])
    response = Response(read, status=status, mimetype="application/octet-stream")
    response.headers.update(copied)
    return response


def starlette_stream(status: int, headers: dict[str, str], body: AsyncIterator[bytes]) -> Any:
    """A Starlette `StreamingResponse` (imported only when Starlette already is)."""
    from starlette.responses import StreamingResponse

    return StreamingResponse(
        body, status_code=status, headers=headers, media_type="application/octet-stream"
    )


def _in_quart_app() -> bool:
    """Inside a Quart app (imported only when the app already did)."""
    quart = sys.modules.get("quart")
    return quart is not None and bool(quart.has_app_context())
