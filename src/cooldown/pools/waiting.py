"""`dispatch(wait=...)`: the seconds a dispatch may wait for a key, and the threads an
`adispatch` runs its steps and waits in, so its event loop never does."""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

from ..config import LONGEST_WAIT_SECONDS, settings
from ..forksafe import new_lock

__all__ = ["NO_WAIT", "STEP_THREADS", "Wait", "checked_wait", "step_threads", "wait_threads"]

STEP_THREADS = 64
"""Threads an `adispatch` runs its steps in (admissions that cannot wait, attempts' ends):
apart from the waiters', so an answer never queues behind thousands of waiting callers."""

_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_threads_lock = new_lock(sys.modules[__name__], "_threads_lock")


class Wait(NamedTuple):
    """How long a dispatch may wait for a key; for an `adispatch`, `gone` is set when its
    caller is (cancelled): a waiting admission then leaves the queue at once and takes no
    key, and one made meanwhile is released."""

    seconds: float
    gone: threading.Event | None = None


NO_WAIT = Wait(0.0)
_T = TypeVar("_T")


class _ThreadPerCall(Executor):
    """Each call in a thread of its own: admissions that may wait are few at a time (the
    waiter caps bound them) and must never queue behind each other for a thread, as they
    would in any fixed pool once thousands wait."""

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        future: Future[_T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as error:
                future.set_exception(error)

        threading.Thread(target=run, name="cooldown-wait", daemon=True).start()
        return future


_WAIT_THREADS = _ThreadPerCall()


def checked_wait(wait: object) -> float:
    """`wait=` as given (0 to 60 seconds), or `MODEL_COOLDOWN_WAIT_SECONDS` for `None`."""
    if wait is None:
        return settings().wait_seconds
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        raise TypeError("wait must be a number of seconds or None")
    if not math.isfinite(wait) or not 0 <= wait <= LONGEST_WAIT_SECONDS:
        raise ValueError(f"wait must be from 0 to {LONGEST_WAIT_SECONDS} seconds")
    return float(wait)


def wait_threads() -> Executor:
    """Where the admissions of an `adispatch` that may wait run: a thread each."""
    return _WAIT_THREADS


def step_threads() -> ThreadPoolExecutor:
    """This process's threads for every other step of an `adispatch` run off its loop."""
    return _pool("cooldown-step", STEP_THREADS)


def _pool(name: str, size: int) -> ThreadPoolExecutor:
    with _threads_lock:
        known = _pools.get(name)
        if known is None or known[0] != os.getpid():  # a forked child: threads anew
            known = _pools[name] = (os.getpid(), ThreadPoolExecutor(size, thread_name_prefix=name))
        return known[1]
