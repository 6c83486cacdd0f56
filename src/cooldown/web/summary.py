"""What the status surface reports: counters, per-provider summaries and the catalog matrix."""

from __future__ import annotations

import os
from typing import Any, TypeAlias

from flask import current_app, has_app_context

from ..config import STATUS_MODELS_ENV, warn_once
from ..evidence.advice import selection_scope
from ..pools import CredentialPool

__all__ = [
    "POOLS_EXTENSION",
    "Pools",
    "app_pools",
    "catalog",
    "checked_pools",
    "matrix",
    "overview",
]

Pools: TypeAlias = "CredentialPool | type[CredentialPool]"
"""A pool object, or the class: the default object every class-level call uses."""

POOLS_EXTENSION = "cooldown.pools"


def checked_pools(pools: object) -> Pools:
    """`pools=` as `init_app` and `status_blueprint` take it: `None` is the default object."""
    if pools is None:
        return CredentialPool
    if isinstance(pools, CredentialPool) or (
        isinstance(pools, type) and issubclass(pools, CredentialPool)
    ):
        return pools
    raise TypeError("pools must be a CredentialPool object, the class, or None")


def app_pools() -> Pools:
    """The pools `init_app(app, pools=...)` gave the current app; else the default object."""
    if not has_app_context():
        return CredentialPool
    pools: Pools = current_app.extensions.get(POOLS_EXTENSION, CredentialPool)
    return pools


def catalog() -> list[str]:
    """The models and buckets the operator wants in the matrix, in their order.

    `app.config["MODEL_COOLDOWN_STATUS_MODELS"]` (a list of names), else (and outside an
    app, as in the metrics publisher) the variable of that name (comma-separated). Names
    come from the operator, never from the store.
    """
    configured = current_app.config.get(STATUS_MODELS_ENV) if has_app_context() else None
    if configured is None:
        configured = (os.environ.get(STATUS_MODELS_ENV) or "").split(",")
    if isinstance(configured, str) or not isinstance(configured, (list, tuple)):
        warn_once(STATUS_MODELS_ENV, "%s must be a list of names; the matrix is empty")
        return []
    names = [name.strip() for name in configured if isinstance(name, str)]
    return list(dict.fromkeys(name for name in names if name))


def overview(pools: Pools) -> dict[str, Any]:
    """Per provider with keys, what clients meet first (the scopes where every key cools,
    and the catalog names they get 429 for), then one consistent set of counts (`ready +
    cooling == keys`; `cooling_some_models` counts ready keys cooling for some model); then
    this process's counters, and the fleet's (`None` without sharing). `drained` appears
    for a provider with drained keys (then `ready + cooling + drained == keys`)."""
    names = catalog()
    providers = {}
    store = pools.store
    for provider in pools.providers():
        keys = pools.keys(provider)
        if not keys:
            continue  # a built-in provider this gateway does not use
        status = pools.status(provider)
        drained = store.operators.drained_keys(
            provider, keys
        )  # out of rotation: no client meets them
        in_rotation = [key for key in keys if key not in drained]
        providers[provider] = {
            "all_cooling_scopes": store.inspection.all_cooling_scopes(provider, in_rotation),
            "clients_get_429_for": [
                name for name in names if _every_key_cools(pools, provider, name)
            ],
            "keys": len(status["keys"]),
            "ready": status["ready"],
            "cooling": status["cooling"],
            "cooling_some_models": status["cooling_some_models"],
            "scoped_cooldowns": sum(key["scoped_cooldowns"] for key in status["keys"]),
        }
        if status["drained"]:  # only then: a fleet that never drains reads as it always did
            providers[provider]["drained"] = status["drained"]
    return {
        "providers": providers,
        "worker_pid": os.getpid(),  # whose counters these are (each worker keeps its own)
        **store.stats(),
        "fleet": store.inspection.fleet(),
    }


def _every_key_cools(pools: Pools, provider: str, name: str) -> bool:
    status = pools.status(provider, **selection_scope(provider, name))
    return status["ready"] == 0


def matrix(pools: Pools, provider: str) -> dict[str, Any]:
    """Every catalog model's view of the provider's keys, computed now, in catalog order."""
    rows = []
    for name in catalog():
        scope = selection_scope(provider, name)  # the app's quota buckets apply
        status = pools.status(provider, **scope)
        rows.append(
            {
                "model": name,
                "ready": status["ready"],
                "cooling": status["cooling"],
                "keys": status["keys"],
            }
        )
    return {"provider": provider, "matrix": rows}
