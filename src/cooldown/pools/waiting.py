"""`dispatch(wait=...)`: the seconds a dispatch may wait for a key, and the threads an
`adispatch` waits in, so its event loop never does."""

from __future__ import annotations

import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from ..config import LONGEST_WAIT_SECONDS, MOST_WAITERS, settings
from ..forksafe import new_lock

__all__ = ["checked_wait", "wait_threads"]

_threads: tuple[int, ThreadPoolExecutor] | None = None
_threads_lock = new_lock(sys.modules[__name__], "_threads_lock")


def checked_wait(wait: object) -> float:
    """`wait=` as given (0 to 60 seconds), or `MODEL_COOLDOWN_WAIT_SECONDS` for `None`."""
    if wait is None:
        return settings().wait_seconds
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        raise TypeError("wait must be a number of seconds or None")
    if not math.isfinite(wait) or not 0 <= wait <= LONGEST_WAIT_SECONDS:
        raise ValueError(f"wait must be from 0 to {LONGEST_WAIT_SECONDS} seconds")
    return float(wait)


def wait_threads() -> ThreadPoolExecutor:
    """This process's threads for the steps of an `adispatch` that may wait: apart from the
    event loop's default executor, so waiters never hold up another request's steps."""
    global _threads
    with _threads_lock:
        if _threads is None or _threads[0] != os.getpid():  # a forked child: threads anew
            pool = ThreadPoolExecutor(MOST_WAITERS, thread_name_prefix="cooldown-wait")
            _threads = (os.getpid(), pool)
        return _threads[1]
