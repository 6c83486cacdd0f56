"""A pool class is also its default object: `CredentialPool.dispatch(...)` and
`CredentialPool().dispatch(...)` run the same method, on the class's state or the object's."""

from __future__ import annotations

from collections.abc import Callable
from types import MethodType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from ..store import ModelCooldown

__all__ = ["own_store", "pool_method"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


class pool_method(Generic[_P, _R]):
    """A method that runs on the object it is called on, or, called on the class, on the
    class's own attributes: the default object every existing gateway already calls.

    Unlike `classmethod`, an object made with `CredentialPool()` answers from its own
    registrations, rests and store; unlike a plain method, the class still answers too.
    """

    def __init__(self, function: Callable[Concatenate[Any, _P], _R]) -> None:
        self.__func__ = function
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__
        self.__qualname__ = function.__qualname__
        self.__wrapped__ = function

    def __get__(self, instance: object, owner: type | None = None) -> Callable[_P, _R]:
        target = owner if instance is None else instance
        return MethodType(self.__func__, target)


def own_store(store: object) -> ModelCooldown:
    """The store a new pool object records into: `store`, or a new one for `None`."""
    if store is None:
        return ModelCooldown()
    if not isinstance(store, ModelCooldown):
        raise TypeError("store must be a ModelCooldown or None")
    return store
