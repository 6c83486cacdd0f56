"""Locks that a child created by `os.fork()` gets back unlocked, whatever its parent was doing."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["new_condition", "new_lock", "new_rlock"]

_owners: list[tuple[weakref.ReferenceType[Any], str, Callable[[], Any]]] = []
_registry_lock = threading.Lock()


_L = TypeVar("_L")


def _register(owner: object, name: str, factory: Callable[[], _L]) -> _L:
    """A new lock for `owner.<name>`; every forked child gets a fresh one in its place."""
    with _registry_lock:
        _owners[:] = [entry for entry in _owners if entry[0]() is not None]
        _owners.append((weakref.ref(owner), name, factory))
    return factory()


def new_lock(owner: object, name: str = "_lock") -> threading.Lock:
    """Assign the result to `owner.<name>`: `self._lock = new_lock(self)`."""
    return _register(owner, name, threading.Lock)


def new_rlock(owner: object, name: str = "_lock") -> threading.RLock:
    return _register(owner, name, threading.RLock)


def new_condition(owner: object, name: str) -> threading.Condition:
    return _register(owner, name, threading.Condition)


def _reset_in_child() -> None:
    """A lock held by a parent thread would never be released in the child: replace it."""
    global _registry_lock
    _registry_lock = threading.Lock()
    for reference, name, factory in _owners:
        owner = reference()
        if owner is not None:
            setattr(owner, name, factory())


os.register_at_fork(after_in_child=_reset_in_child)
