"""The loop behind `dispatch` and `adispatch`: send with one key, learn from the answer, rotate.

The loop is written once, as a generator that yields "send with this key" and receives the
response; `rotate` drives it with plain calls and `arotate` with awaits (the way tenacity
shares its sync and async retrying), so the two can never drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol, TypeVar

from ..errors import CooldownError, ModelCooldownExhausted
from ..evidence.advice import RecordingContext, recording_context
from ..evidence.headers import Headers
from ..evidence.outcome import classify_status

__all__ = ["arotate", "response_headers", "response_status", "rotate", "rotation"]

_Response = TypeVar("_Response")
Steps = Generator[str, Any, Any]
"""Yields the key to send with next; receives that attempt's response; returns the answer."""


Admitted = tuple[str, Any]
"""A key to send with, and what must be ended when its attempt is over (or `None`)."""


class Record(Protocol):
    def __call__(
        self, admitted: Admitted, status: int, headers: Headers, evidence: RecordingContext
    ) -> None: ...


def response_status(response: object) -> int:
    """`.status_code` (requests, httpx, werkzeug) or `.status` (urllib3, `http.client`, aiohttp)."""
    for name in ("status_code", "status"):
        status = getattr(response, name, None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    raise TypeError("send() must return a response with an int .status_code or .status")


def response_headers(response: object) -> Headers:
    headers = getattr(response, "headers", None)
    return headers if headers is not None else {}


def rotation(
    *,
    first: Callable[[], Admitted | None],
    rest: Callable[[set[str]], Admitted | None],
    record: Record,
    finish: Callable[[Admitted, bool], None],
) -> Steps:
    """Every key at most once; the answer when it is not a key problem.

    `first` and `rest` admit a key (on the scoped path they count it in flight); `finish`
    ends each attempt whatever happens (`send` raising, the caller leaving, a 429 raised).
    `rest(tried)` is the pool's next admission: on the scoped path it raises
    `ModelCooldownExhausted` when every key now cools, and that 429 replaces the last throttle
    or auth rejection (the client's own credentials are not what failed); `None` when the
    free keys were all tried, and then the last response is the answer.
    """
    admitted = first()  # a CooldownError here propagates: nothing has been sent
    tried: set[str] = set()
    while admitted is not None:
        key = admitted[0]
        tried.add(key)
        served = False
        try:
            response = yield key
            status = response_status(response)
            headers = response_headers(response)
            evidence = recording_context(status, headers)
            record(admitted, status, headers, evidence)
            outcome = evidence.get("outcome") or classify_status(status)
            served = outcome.provider_health == "success"  # even if its window is now spent
        finally:
            finish(admitted, served)
        if served or outcome.credential_health not in ("throttled", "rejected"):
            return response
        try:
            admitted = rest(tried)
        except ModelCooldownExhausted:
            raise
        except CooldownError:  # a capacity guard: some key is free, this answer stands
            return response
    return response if tried else None


def _advance(steps: Steps, response: object) -> tuple[bool, Any]:
    """One step: `(False, key)` to send with next, or `(True, answer)` at the end."""
    try:
        return False, steps.send(response)
    except StopIteration as done:
        return True, done.value


def _close(response: object) -> None:
    """Give a response's connection back (a streamed body would otherwise hold it)."""
    close = getattr(response, "close", None)
    if callable(close):
        close()


async def _aclose(response: object) -> None:
    aclose = getattr(response, "aclose", None)  # httpx.AsyncClient's responses
    if callable(aclose):
        await aclose()
    else:
        _close(response)  # aiohttp's close() is a plain call


def refuse_coroutine_function(send: object) -> None:
    if inspect.iscoroutinefunction(send):
        raise TypeError("send is an async function: use CredentialPool.adispatch")


def rotate(steps: Steps, send: Callable[[str], _Response]) -> _Response | None:
    """Drive the loop with plain calls; `send` is a blocking function."""
    try:
        done, value = _advance(steps, None)
        while not done:
            response = send(value)  # an exception cools nothing and goes to the caller
            if inspect.isawaitable(response):
                if inspect.iscoroutine(response):
                    response.close()  # never awaited, and never warned about
                raise TypeError("send returned an awaitable: use CredentialPool.adispatch")
            try:
                done, value = _advance(steps, response)
            finally:
                if not done or value is not response:  # rotated away from: give it back
                    _close(response)
        return value  # type: ignore[no-any-return]
    finally:
        steps.close()


async def arotate(
    steps: Steps, send: Callable[[str], Awaitable[_Response]], *, offload: bool
) -> _Response | None:
    """Drive the loop with awaits; with `offload`, each step (it may reach Redis) runs in a
    worker thread, so a slow or frozen Redis never blocks the event loop."""

    async def step(response: object) -> tuple[bool, Any]:
        if offload:
            return await asyncio.to_thread(_advance, steps, response)
        return _advance(steps, response)

    try:
        done, value = await step(None)
        while not done:
            response = await send(value)
            try:
                done, value = await step(response)
            finally:
                if not done or value is not response:  # rotated away from: give it back
                    await _aclose(response)
        return value  # type: ignore[no-any-return]
    finally:
        with contextlib.suppress(ValueError):  # cancelled while a worker thread runs a step
            steps.close()
