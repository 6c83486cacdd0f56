"""One upstream client per key, built once and dropped least recently used.

A gateway that builds `OpenAI(api_key=key)` per request pays a new connection pool each time;
one that keeps a client per key forever keeps one per revoked key too. `KeyedClients` sits
between: `clients[key]` builds with `factory(key)` once, keeps at most `max_size`, and lets
go of what it drops.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..forksafe import new_lock

__all__ = ["KeyedClients"]

logger = logging.getLogger("cooldown")

_Client = TypeVar("_Client")

LARGEST_MAX_SIZE = 4096
BUILD_WAIT_SECONDS = 10.0
"""How long a caller waits for another caller's build of the same key before building its
own (a factory that hangs must not hang every request for that key)."""
RETRIES_WARNING = (
    "%s returned a client with max_retries above 0: the SDK retries a 429 with the same key "
    "inside send; build clients with max_retries=0 so rotation picks the next key"
)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class KeyedClients(Generic[_Client]):
    """A bounded, thread-safe map from key to the client `factory(key)` built for it.

    Build clients with `max_retries=0` so that rotation, not the SDK, picks the next key (a
    client with `max_retries` above 0 is warned about once, when it is built). A client
    built inside a running event loop (`AsyncOpenAI`) belongs to that loop: a call from
    another loop gets a new one, since its connections cannot cross loops (a Flask
    `async def` view runs each request on a new loop). A dropped client is never closed
    under a caller that may still hold it: the garbage collector closes it once nobody
    does (the SDKs' clients close themselves then); `close()` and `aclose()` close every
    client still alive.
    """

    def __init__(self, factory: Callable[[str], _Client], *, max_size: int = 64) -> None:
        if not callable(factory):
            raise TypeError("factory must be callable: factory(key) -> client")
        if isinstance(max_size, bool) or not isinstance(max_size, int):
            raise TypeError("max_size must be an int")
        if not 1 <= max_size <= LARGEST_MAX_SIZE:
            raise ValueError(f"max_size must be between 1 and {LARGEST_MAX_SIZE}")
        self._factory = factory
        self._max_size = max_size
        # key -> (client, the loop it was built on, weakly; None outside a loop)
        self._clients: OrderedDict[str, tuple[_Client, Any]] = OrderedDict()
        self._building: dict[str, threading.Event] = {}
        self._dropped: weakref.WeakSet[Any] = weakref.WeakSet()
        self._warned_retries = False
        self._lock = new_lock(self)

    def __getitem__(self, key: str) -> _Client:
        if not isinstance(key, str) or not key:
            raise TypeError("a key must be a non-empty str")
        loop = _running_loop()
        for _ in range(2):  # at most one wait for another caller's build
            with self._lock:
                client = self._usable(key, loop)
                if client is not None:
                    return client
                building = self._building.get(key)
                if building is None:
                    building = self._building[key] = threading.Event()
                    break
            building.wait(BUILD_WAIT_SECONDS)
        else:
            building = threading.Event()  # the other build overran: build our own
        try:
            built = self._factory(key)  # outside the lock: a factory may do I/O
            self._warn_when_retrying(built)
            with self._lock:
                self._keep(key, built, loop)
        finally:
            with self._lock:
                if self._building.get(key) is building:
                    del self._building[key]
            building.set()
        return built

    def __len__(self) -> int:
        return len(self._clients)

    def __repr__(self) -> str:
        return f"KeyedClients({len(self._clients)} of at most {self._max_size} clients)"

    def close(self) -> None:
        """Close every client still alive (a sync one; an async one's close is scheduled on
        the running loop, see `aclose`); every close is tried, then the first failure is
        raised."""
        failures = []
        for client in self._drain():
            try:
                _close(client)
            except Exception as failure:
                failures.append(failure)
        if failures:
            raise failures[0]

    async def aclose(self) -> None:
        """Close every client still alive, awaiting the async ones (`AsyncOpenAI`); every
        close is tried, then the first failure is raised."""
        failures = []
        for client in self._drain():
            try:
                closed = _close_call(client)
                if inspect.isawaitable(closed):
                    await closed
            except Exception as failure:
                failures.append(failure)
        if failures:
            raise failures[0]

    def _usable(self, key: str, loop: asyncio.AbstractEventLoop | None) -> _Client | None:
        """The client held for `key`, when it may serve a call on `loop` (a client built on
        another loop may not); called under the lock."""
        held = self._clients.get(key)
        if held is None:
            return None
        client, built_on = held
        if built_on is not None and built_on() is not loop:
            del self._clients[key]
            old = built_on()
            if loop is not None and (old is None or old.is_closed()):
                _close(client)  # its loop is over (a Flask async view's): closed here, now
            else:
                self._let_go(client)
            return None
        self._clients.move_to_end(key)
        return client

    def _keep(self, key: str, client: _Client, loop: asyncio.AbstractEventLoop | None) -> None:
        replaced = self._clients.pop(key, None)
        if replaced is not None:
            self._let_go(replaced[0])
        self._clients[key] = (client, None if loop is None else weakref.ref(loop))
        while len(self._clients) > self._max_size:
            self._let_go(self._clients.popitem(last=False)[1][0])

    def _let_go(self, client: object) -> None:
        """No longer handed out; closed by `close()` while alive, else by the collector."""
        with contextlib.suppress(TypeError):  # not weakly referable: the collector closes it
            self._dropped.add(client)

    def _warn_when_retrying(self, client: object) -> None:
        retries = getattr(client, "max_retries", 0)
        if isinstance(retries, int) and retries > 0 and not self._warned_retries:
            self._warned_retries = True
            logger.warning(RETRIES_WARNING, "KeyedClients' factory")

    def _drain(self) -> list[Any]:
        with self._lock:
            clients = [client for client, _ in self._clients.values()]
            clients += [client for client in list(self._dropped) if client not in clients]
            self._clients.clear()
            self._dropped = weakref.WeakSet()
        return clients


def _close_call(client: object) -> object:
    """Call the client's `close` (or, failing that, `aclose`); what it returned."""
    for name in ("close", "aclose"):
        close = getattr(client, name, None)
        if callable(close):
            return close()
    return None


def _close(client: object) -> None:
    """Close a client: a coroutine is scheduled on the running loop, if there is one, else
    closed unrun and left to garbage collection. A close that fails (connections of a loop
    that is over) is retrieved and dropped: the client is marked closed all the same, so an
    SDK's own close at collection does not schedule another that nobody retrieves."""
    closed = _close_call(client)
    if inspect.iscoroutine(closed):
        try:
            task = asyncio.get_running_loop().create_task(closed)
        except RuntimeError:  # no running loop: nobody can await it
            closed.close()
            return
        _closing.add(task)
        task.add_done_callback(_closed)


def _closed(task: asyncio.Task[object]) -> None:
    _closing.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a closed loop's connections cannot be closed cleanly


_closing: set[asyncio.Task[object]] = set()
"""Close tasks scheduled for async clients, held until they finish."""
