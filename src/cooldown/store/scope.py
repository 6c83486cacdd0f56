"""One call's scope: built once where a call enters, read by every layer below it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .admission import ORDERS, Order
from .declared import DeclaredLimits

__all__ = ["CallScope", "call_scope"]


class CallScope(NamedTuple):
    """Whose keys, for which model or quota bucket, as of when, under which maximum, and
    how a selection ranks them; frozen, so a step can pass it on without a copy.

    `accounts` maps a key to the label of the provider account it shares budgets with;
    `limits` are the windows declared for the provider (pools pass them; the store's own
    keywords take none).
    `order` is `"configured"` here and in `select`/`available`, which answer one question;
    `dispatch` and `admit` default to `"spread"` because concurrent dispatches should not
    all take the first key.
    """

    provider: str
    model: str | None = None
    quota_bucket: str | None = None
    now: float | None = None
    max_seconds: int = 3600
    accounts: Mapping[str, str] | None = None
    order: Order = "configured"
    cost: int | None = None
    limits: DeclaredLimits | None = None  # what `register(limits=)` declared, checked


_UNSET = {order: CallScope("", order=order) for order in ORDERS}
"""The keywords of a call that passed none, by the method's default order."""


def call_scope(provider: str | CallScope, keywords: CallScope, default_order: Order) -> CallScope:
    """A store method's scope: the `CallScope` the pools pass in `provider`'s place, or the
    one a direct caller's keywords build (`keywords`, its provider left empty); never both
    (that is a `TypeError`)."""
    if not isinstance(provider, CallScope):
        return CallScope(provider, *keywords[1:])  # cheaper than `_replace` on the hot path
    if keywords != _UNSET[default_order]:
        raise TypeError("pass a CallScope or the scope's keywords, not both")
    return provider
