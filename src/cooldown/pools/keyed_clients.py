"""One upstream client per key, built once and dropped least recently used.

A gateway that builds `OpenAI(api_key=key)` per request pays a new connection pool each time;
one that keeps a client per key forever keeps one per revoked key too. `KeyedClients` sits
between: `clients[key]` builds with `factory(key)` once, keeps at most `max_size`, and closes
what it drops.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from ..forksafe import new_lock

__all__ = ["KeyedClients"]

logger = logging.getLogger("cooldown")

_Client = TypeVar("_Client")

LARGEST_MAX_SIZE = 4096

_closing: set[asyncio.Task[object]] = set()
"""Close tasks scheduled for dropped async clients, held until they finish."""


class KeyedClients(Generic[_Client]):
    """A bounded, thread-safe map from key to the client `factory(key)` built for it.

    Build clients with `max_retries=0` so that rotation, not the SDK, picks the next key.
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
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._lock = new_lock(self)

    def __getitem__(self, key: str) -> _Client:
        if not isinstance(key, str) or not key:
            raise TypeError("a key must be a non-empty str")
        with self._lock:
            client = self._clients.get(key)
            if client is not None:
                self._clients.move_to_end(key)
                return client
        built = self._factory(key)  # outside the lock: a factory may do I/O
        with self._lock:
            client = self._clients.setdefault(key, built)
            self._clients.move_to_end(key)
            dropped = self._overflow()
        if client is not built:  # another thread built one first: keep theirs
            dropped.append(built)
        for surplus in dropped:
            _close(surplus)
        return client

    def __len__(self) -> int:
        return len(self._clients)

    def __repr__(self) -> str:
        return f"KeyedClients({len(self._clients)} of at most {self._max_size} clients)"

    def close(self) -> None:
        """Close every client held (a sync one; an async one is scheduled, see `aclose`)."""
        for client in self._drain():
            _close(client)

    async def aclose(self) -> None:
        """Close every client held, awaiting the async ones (`AsyncOpenAI`)."""
        for client in self._drain():
            closed = _close_call(client)
            if inspect.isawaitable(closed):
                await closed

    def _overflow(self) -> list[_Client]:
        dropped = []
        while len(self._clients) > self._max_size:
            dropped.append(self._clients.popitem(last=False)[1])
        return dropped

    def _drain(self) -> list[_Client]:
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        return clients


def _close_call(client: object) -> object:
    """Call the client's `close` (or, failing that, `aclose`); what it returned."""
    for name in ("close", "aclose"):
        close = getattr(client, name, None)
        if callable(close):
            return close()
    return None


def _close(client: object) -> None:
    """Close a dropped client: a coroutine is scheduled on the running loop, if there is one,
    else closed unrun and left to garbage collection. A failing close is logged, not raised."""
    try:
        closed = _close_call(client)
    except Exception:
        logger.warning("A dropped upstream client failed to close; it is left to the collector")
        return
    if inspect.iscoroutine(closed):
        try:
            task = asyncio.get_running_loop().create_task(closed)
        except RuntimeError:  # no running loop: nobody can await it
            closed.close()
            return
        _closing.add(task)
        task.add_done_callback(_closing.discard)
