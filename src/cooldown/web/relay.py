"""An upstream's answer passed on as a streamed Flask response, without reading it whole."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from flask import Response

from ..evidence.headers import lowered_headers
from ..pools.rotation import response_headers, response_status

__all__ = ["RELAYED_HEADERS", "relay"]

RELAYED_HEADERS = ("Retry-After", "Content-Type")
CHUNK_BYTES = 64 * 1024


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

    Only the named headers are copied (case-insensitively), so hop-by-hop headers, cookies
    and the upstream's encoding never reach the client. `Retry-After` is copied by default;
    on an app set up with `init_app` it is exposed cross-origin like the adapter's own 429.
    """
    if isinstance(headers, (str, bytes)):
        raise TypeError("headers must be a sequence of header names, not a single string")
    names = list(headers)
    if not all(isinstance(name, str) for name in names):
        raise TypeError("each header name must be a str")
    status = response_status(upstream)
    body = _body(upstream, _chunks(upstream))
    available = lowered_headers(response_headers(upstream))
    response = Response(body, status=status, mimetype="application/octet-stream")
    for name in names:
        value = available.get(name.lower())
        if isinstance(value, str):
            response.headers[name] = value
    return response
