"""One selection-style call's checked arguments, and the shared backend's answer for them:
read once before any lock, by every question the store answers about a scope."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

from ..arguments import bounded_max_seconds, finite_number, require_keys, resolve_now
from ..digests import credential_prefix, scope_message
from .accounts import checked_labels
from .admission import ORDERS
from .backend import Sharing, shared_releases
from .declared import DeclaredLimits
from .scope import CallScope

__all__ = ["Lookup", "gather"]

_NO_LEGACY_RESTS: Mapping[str, float] = {}
_NO_ACCOUNTS: Mapping[str, str] = {}

Lookup: TypeAlias = tuple[
    int,  # ceiling: the call's maximum, bounded
    bytes,  # the provider's credential prefix
    Sequence[str],  # keys
    bytes | None,  # scope message
    Mapping[str, float],  # legacy rests
    float | None,  # the caller's `now`, checked
    dict[str, tuple[float, float]],  # shared: key -> (credential-wide, scope) deadlines
    float,  # shared: the overflow deadline
    Mapping[str, str],  # key -> the label of the account it shares budgets with
    DeclaredLimits | None,  # the windows declared for the provider
]
"""One selection-style call's checked arguments and the shared answer; a plain tuple, cheap
on the hot path."""


def gather(
    sharing: Sharing | None,
    scope: CallScope,
    keys: Sequence[str],
    legacy_rest_until: Mapping[str, float] | None,
) -> Lookup:
    """Check the call's scope and keys, then ask the shared backend (before any lock)."""
    if scope.order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}")
    ceiling = bounded_max_seconds(scope.max_seconds)
    prefix = credential_prefix(scope.provider)
    keys = require_keys(keys)
    message = scope_message(scope.model, scope.quota_bucket)
    if legacy_rest_until is None:
        legacy = _NO_LEGACY_RESTS
    elif type(legacy_rest_until) is dict or isinstance(legacy_rest_until, Mapping):
        legacy = legacy_rest_until  # a dict first: the pools pass one, and an ABC check is slow
    else:
        raise TypeError("legacy_rest_until must be a mapping of key to deadline")
    for key in keys:  # every key, before any state is touched: a refused call changes nothing
        if type(key) is not str:
            raise TypeError("each key must be a str")
        if key in legacy:
            finite_number(legacy[key], "legacy_rest_until value")
    grouped = _NO_ACCOUNTS if scope.accounts is None else checked_labels(scope.accounts)
    given_now = None if scope.now is None else resolve_now(scope.now)
    shared: dict[str, tuple[float, float]] = {}
    shared_overflow = 0.0
    if sharing is not None and keys:
        shared, shared_overflow = shared_releases(
            sharing, prefix, keys, message, resolve_now(given_now), ceiling
        )
    return (
        ceiling,
        prefix,
        keys,
        message,
        legacy,
        given_now,
        shared,
        shared_overflow,
        grouped,
        scope.limits,
    )
