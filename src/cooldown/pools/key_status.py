"""Per-key status for operators: positions, states and reasons, never keys, digests or names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple, TypedDict

from ..arguments import resolve_now, retry_after
from ..config import LARGEST_MAX_SECONDS, CooldownSettings, settings
from ..shared import share_when_configured
from ..store import CallScope, ModelCooldown, Reason
from ..store.declared import WindowStatus
from ..store.refills import ProviderRefill
from .usage_readings import UsageReadings, UsageStatus

__all__ = [
    "QUOTA_NOTE",
    "KeyStatus",
    "KeyView",
    "PoolExtras",
    "PoolStatus",
    "keys_status",
    "pool_status",
]

QUOTA_NOTE = "out of quota (credit or a daily limit): add credit, or clear it after topping up"
"""What a key whose quota is spent needs from an operator, in the status rows and the page."""


class _OperatorNote(TypedDict, total=False):
    note: str  # what an operator can do, for a hold that needs one (a spent quota)
    fleet: Literal["pending"]  # an operator's action Redis has not taken yet (retried)
    limits: list[WindowStatus]  # each declared window, for the scope asked
    usage: UsageStatus | None  # the last usage reading (a provider with a reader)


class KeyStatus(_OperatorNote):
    index: int  # 1-based position in the configured order
    label: str  # stable, non-secret: what drain, undrain and clear name the key by
    state: Literal["ready", "cooling", "drained"]  # for the scope asked (none: unscoped)
    reason: Reason | None
    retry_after: int | None
    scoped_cooldowns: int  # models or buckets this key cools for right now, whatever was asked
    account: str | None  # the operator's label of the account it shares a quota with


class PoolStatus(TypedDict):
    provider: str
    keys: list[KeyStatus]
    ready: int
    cooling: int
    drained: int  # taken out of rotation by an operator: ready + cooling + drained == keys
    cooling_some_models: int  # ready keys with scoped_cooldowns > 0: per-model trouble
    accounts_cooling: int  # accounts whose every key is cooling for the scope asked
    refill: ProviderRefill  # how its announced limits come back: fixed, learned or "unknown"


class KeyView(NamedTuple):
    """One key as a status shows it: why it is held and until when, how many models it
    cools for, its account's label, its operator label, and whether it is drained."""

    reason: Reason | None
    release: float
    scoped: int
    account: str | None
    label: str
    drained: bool


class PoolExtras(NamedTuple):
    """What a credential pool adds to its keys' status beside the store's view: the refill
    reading `register` fixed (`None`: what the store learned) and its usage readings."""

    refill: ProviderRefill | None = None
    usage: UsageReadings | None = None


_NO_EXTRAS = PoolExtras()


def pool_status(
    provider: str, views: Sequence[KeyView], now: float, max_seconds: int, refill: ProviderRefill
) -> PoolStatus:
    """JSON-ready status from each key's view, and how the provider's limits refill."""
    keys: list[KeyStatus] = []
    for position, (reason, release, count, account, label, out) in enumerate(views, start=1):
        state: Literal["ready", "cooling", "drained"] = "ready" if reason is None else "cooling"
        keys.append(
            {
                "index": position,
                "label": label,
                "state": "drained" if out else state,
                "reason": reason,
                "retry_after": None if reason is None else retry_after(release, now, max_seconds),
                "scoped_cooldowns": count,
                "account": account,
            }
        )
        if reason == "quota":
            keys[-1]["note"] = QUOTA_NOTE
    cooling = sum(1 for key in keys if key["state"] == "cooling")
    out_of_rotation = sum(1 for key in keys if key["state"] == "drained")
    return {
        "provider": provider,
        "keys": keys,
        "ready": len(keys) - cooling - out_of_rotation,
        "cooling": cooling,
        "drained": out_of_rotation,
        "cooling_some_models": sum(
            1 for key in keys if key["state"] == "ready" and key["scoped_cooldowns"]
        ),
        "accounts_cooling": _accounts_cooling(keys),
        "refill": refill,
    }


def _accounts_cooling(keys: Sequence[KeyStatus]) -> int:
    ready_in: dict[str, bool] = {}
    for key in keys:
        if key["account"] is not None:
            ready_in[key["account"]] = ready_in.get(key["account"], False) or (
                key["state"] == "ready"
            )
    return sum(1 for ready in ready_in.values() if not ready)


def keys_status(
    store: ModelCooldown,
    scope: CallScope,
    keys: Sequence[str],
    rests: Mapping[str, float],
    current: CooldownSettings | None,
    extras: PoolExtras = _NO_EXTRAS,
) -> PoolStatus:
    """A pool's keys as its selection sees them: legacy rests only, or the store's view for
    `scope` (its maximum is `current`'s); and on both paths, how many models each key cools
    for, and its account; how the provider's limits refill; each key's count in each
    declared window (`scope.limits`) and its last usage reading."""
    provider, now, accounts, limits = (
        scope.provider,
        resolve_now(scope.now),
        scope.accounts,
        scope.limits,
    )
    refill, usage = extras
    labels = [(accounts or {}).get(key) for key in keys]
    configured = current or settings()
    if configured.enabled:  # status reads the shared state too, scoped or not
        share_when_configured(store, configured)
    scoped = store.inspection.scoped_counts(provider, keys, now=now)
    drained = store.operators.drained_keys(provider, list(keys), now=now)
    explained: Sequence[tuple[Reason | None, float]]
    counted: list[list[WindowStatus]] | None = None
    if current is None:  # unscoped: the pool's own rests decide, and with the feature on
        ceiling = LARGEST_MAX_SECONDS
        wide: Sequence[tuple[Reason | None, float]] = [(None, 0.0)] * len(keys)
        if configured.enabled:  # a credential-wide rejection another worker saw, too
            wide = store.explain(provider, keys, max_seconds=ceiling, now=now)
        explained = [
            ("legacy", rests[key])
            if _rest_holds(rests.get(key), reason, release)
            else (reason, release)
            for key, (reason, release) in zip(keys, wide, strict=True)
        ]
    else:
        ceiling = current.max_seconds
        scope = scope._replace(now=now, max_seconds=ceiling)
        explained = store.explain(scope, keys, legacy_rest_until=rests)
        counted = store.inspection.declared_counts(scope, keys) if limits is not None else None
    views = [
        KeyView(reason, release, count, label, store.operators.label(provider, key), key in drained)
        for key, (reason, release), count, label in zip(
            keys, explained, scoped, labels, strict=True
        )
    ]
    if refill is None:
        refill = store.refills.provider_refill(provider, now=now)
    status = pool_status(provider, views, now, ceiling, refill)
    pending = store.operators.fleet_pending(provider, list(keys))
    read = usage is not None and usage.has_reader(provider)
    shared = store.operators.fleet_readings(provider, keys, now=now) if read else {}
    for position, (key, row) in enumerate(zip(keys, status["keys"], strict=True)):
        if key in pending:
            row["fleet"] = "pending"
        if counted is not None:
            row["limits"] = counted[position]
        if usage is not None and read:
            row["usage"] = usage.status(provider, row["label"], now, shared.get(key))
    return status


def _rest_holds(rest: float | None, reason: Reason | None, release: float) -> bool:
    """The legacy rest names the hold when it lasts longest; a spent quota mirrored into
    the rests (the same deadline) keeps its own name."""
    if rest is None:
        return False
    return rest > release or (rest == release and reason != "quota")
