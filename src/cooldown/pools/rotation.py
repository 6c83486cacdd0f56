"""The loop behind `dispatch` and `adispatch`: send with one key, learn from the answer, rotate.

The loop is written once, as a generator that yields "send with this key" and receives what
`send` gave, read into an `Answer` (returned or raised alike); `rotate` drives it with plain
calls and `arotate` with awaits (the way tenacity shares its sync and async retrying), so the
two can never drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Generator, Iterable
from concurrent.futures import Executor, Future
from typing import Any, Protocol, TypeVar

from ..errors import CooldownError, ModelCooldownExhausted
from ..evidence.advice import RecordingContext
from ..evidence.answers import Answer, answer_raised, answer_returned
from ..evidence.outcome import classify_status

__all__ = ["ADMIT", "DispatchPath", "arotate", "check_rotate_on", "in_thread", "rotate", "rotation"]

_Response = TypeVar("_Response")
_T = TypeVar("_T")


class _Admit:
    """The loop's word that its next step admits the next key, which may wait for one."""

    def __repr__(self) -> str:
        return "ADMIT"


ADMIT = _Admit()
Steps = Generator[str | _Admit, Any, Any]
"""Yields the key to send with next (or `ADMIT` before an admission that may wait);
receives that attempt's `Answer` (`None` after `ADMIT`); returns the last one."""


Taken = tuple[str, Any]
"""A key to send with, and what must be ended when its attempt is over (or `None`)."""


class DispatchPath(Protocol):
    """What the loop asks of one dispatch's path (scoped, or legacy): admit a key, record
    what its answer said, end its attempt."""

    def admit(self, tried: set[str]) -> Taken | None: ...

    def record(self, admitted: Taken, answer: Answer, evidence: RecordingContext) -> None: ...

    def finish(self, admitted: Taken, served: bool, answered: bool) -> None: ...


def check_rotate_on(statuses: object) -> frozenset[int]:
    """Provider-failure statuses (500-599) that move a dispatch to the next untried key."""
    if isinstance(statuses, (str, bytes)) or not isinstance(statuses, Iterable):
        raise TypeError("rotate_on must be a collection of int statuses")
    checked = list(statuses)
    for status in checked:
        if isinstance(status, bool) or not isinstance(status, int):
            raise TypeError("rotate_on must hold int statuses")
        if not 500 <= status <= 599:
            raise ValueError("rotate_on takes provider failures only: statuses 500 to 599")
    return frozenset(checked)


def rotation(
    path: DispatchPath,
    *,
    rotate_on: frozenset[int],
    retried: Callable[[], None],
    read: Callable[[Answer], RecordingContext],
) -> Steps:
    """Every key at most once; the answer when it is not a key problem.

    `path.admit` admits a key (on the scoped path it counts it in flight); `finish`
    ends each attempt whatever happens (`send` raising, the caller leaving, a 429 raised),
    told whether it was served and whether an answer came at all.
    `admit(tried)` after the first is the pool's next admission: on the scoped path it raises
    `ModelCooldownExhausted` when every key now cools, and that 429 replaces the last throttle
    or auth rejection (the client's own credentials are not what failed), as the 503 of a
    full table does; `None` when the
    free keys were all tried, and then the last answer stands. A status in `rotate_on` moves
    to the next untried free key, cooling nothing; when none is free, its answer stands.
    `retried` hears of an answer an SDK retried inside `send`; `read` turns an answer into
    the evidence recorded.
    """
    admitted = path.admit(set())  # a CooldownError here propagates: nothing has been sent
    tried: set[str] = set()
    answer: Answer | None = None
    while admitted is not None:
        tried.add(admitted[0])
        served = answered = False
        try:
            answer = yield admitted[0]
            answered = True
            if answer.retried:
                retried()
            evidence = read(answer)
            path.record(admitted, answer, evidence)
            outcome = evidence.get("outcome") or classify_status(answer.status)
            served = outcome.provider_health == "success"  # even if its window is now spent
        finally:
            path.finish(admitted, served, answered)
        rotating = not served and outcome.credential_health in ("throttled", "rejected")
        if not rotating and answer.status not in rotate_on:
            return answer
        yield ADMIT  # the attempt is over: a driver may run the admission (and a wait) apart
        try:
            admitted = path.admit(tried)
        except ModelCooldownExhausted:
            if rotating:  # every key now cools: our 429 replaces the key's answer
                raise
            return answer
        except CooldownError:  # the table is full: after a key problem, our 503 replaces it
            if rotating:  # (an upstream 401 may quote its key; never hand it on)
                raise
            return answer
    return answer


def _advance(steps: Steps, answer: Answer | None) -> tuple[bool, Any]:
    """One step: `(False, key)` to send with next, or `(True, last answer)` at the end."""
    try:
        return False, steps.send(answer)
    except StopIteration as done:
        return True, done.value


def _close(http: object) -> None:
    """Give a response's connection back (a streamed body would otherwise hold it)."""
    close = getattr(http, "close", None)
    if callable(close):
        close()


async def _aclose(http: object) -> None:
    aclose = getattr(http, "aclose", None)  # httpx.AsyncClient's responses
    if callable(aclose):
        await aclose()
    else:
        _close(http)  # aiohttp's close() is a plain call


def refuse_coroutine_function(send: object) -> None:
    if inspect.iscoroutinefunction(send):
        raise TypeError("send is an async function: use CredentialPool.adispatch")


def _sent(send: Callable[[str], object], key: str) -> Answer:
    """Call `send` and read what it gave; an exception without an answer propagates."""
    try:
        value = send(key)
    except Exception as error:
        answer = answer_raised(error)
        if answer is None:  # a transport failure: nothing is cooled, nothing retried
            raise
        return answer
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited, and never warned about
        raise TypeError("send returned an awaitable: use CredentialPool.adispatch")
    return answer_returned(value)


async def _asent(send: Callable[[str], Awaitable[object]], key: str) -> Answer:
    pending = send(key)  # an async def only builds its coroutine here
    if not inspect.isawaitable(pending):
        raise TypeError("adispatch needs an async send (async def): use dispatch for a plain one")
    try:
        value = await pending
    except Exception as error:
        answer = answer_raised(error)
        if answer is None:
            raise
        return answer
    return answer_returned(value)


def _end(last: Answer | None) -> Any:
    """What the caller gets: nothing when no key was configured, else the last answer as it
    came (raised outside any handler, so no exception of ours is chained to it)."""
    return None if last is None else last.deliver()


def rotate(steps: Steps, send: Callable[[str], _Response]) -> _Response | None:
    """Drive the loop with plain calls; `send` is a blocking function."""
    try:
        done, value = _advance(steps, None)
        while not done:
            if value is ADMIT:
                done, value = _advance(steps, None)
                continue
            answer = _sent(send, value)
            try:
                done, value = _advance(steps, answer)
            finally:
                if not done or value is not answer:  # rotated away from: give it back
                    _close(answer.http)
    finally:
        steps.close()
    return _end(value)  # type: ignore[no-any-return]


async def arotate(
    steps: Steps,
    send: Callable[[str], Awaitable[_Response]],
    *,
    offload: Executor | None,
    waits: Executor | None = None,
    leave: Callable[[], None] = lambda: None,
) -> _Response | None:
    """Drive the loop with awaits; with `offload`, each step (it may reach Redis) runs in one
    of its threads, and each admission (it may wait for a key) in one of `waits`' when given,
    so neither a slow Redis nor a wait ever blocks the event loop, and waiters never hold the
    threads that end attempts. Cancelled, it calls `leave` (a waiting admission gives up its
    place at once) and ends the attempt it holds, in a thread, once its step is done."""
    running: list[Future[tuple[bool, Any]]] = []

    async def step(answer: Answer | None, *, admitting: bool) -> tuple[bool, Any]:
        if offload is None:
            return _advance(steps, answer)
        threads = waits if admitting and waits is not None else offload
        context = contextvars.copy_context()  # an app context, say, goes along
        running[:] = [threads.submit(context.run, _advance, steps, answer)]
        return await asyncio.wrap_future(running[0])

    try:
        done, value = await step(None, admitting=True)
        while not done:
            if value is ADMIT:
                done, value = await step(None, admitting=True)
                continue
            answer = await _asent(send, value)
            try:
                done, value = await step(answer, admitting=False)
            finally:
                if not done or value is not answer:  # rotated away from: give it back
                    await _aclose(answer.http)
    except asyncio.CancelledError:
        leave()
        raise
    finally:
        state = inspect.getgeneratorstate(steps)
        if offload is not None and state == inspect.GEN_RUNNING and running:
            # Cancelled while a thread runs a step: the attempt it may yet take is ended
            # there, once the step is done (`leave` makes a waiting one quick).
            running[0].add_done_callback(lambda _: _close_steps(steps))  # in that thread
        elif offload is not None and state == inspect.GEN_SUSPENDED:
            # `send` raised or the task was cancelled mid-attempt: ending the attempt may
            # reach Redis, so it ends in a worker thread (shielded: it ends even if the
            # task is cancelled again meanwhile).
            await asyncio.shield(asyncio.wrap_future(offload.submit(_close_steps, steps)))
        else:
            _close_steps(steps)
    return _end(value)  # type: ignore[no-any-return]


async def in_thread(threads: Executor | None, function: Callable[..., _T], *args: Any) -> _T:
    """`asyncio.to_thread` on `threads` (else the loop's default executor): the context
    (an app context, say) goes along."""
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(threads, functools.partial(context.run, function, *args))


def _close_steps(steps: Steps) -> None:
    with contextlib.suppress(ValueError):  # cancelled while a worker thread runs a step
        steps.close()
