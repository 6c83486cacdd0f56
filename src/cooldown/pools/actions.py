"""An operator's hands on a pool's keys, by label: drain, undrain, clear."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from ..config import settings
from ..shared import share_when_configured
from ..store import CallScope, ModelCooldown
from .default import pool_method
from .key_status import KeyStatus, PoolStatus
from .legacy import LegacyRests

__all__ = ["KEY_ACTIONS", "KeyAction", "PoolActions"]

logger = logging.getLogger("cooldown")


class KeyAction(NamedTuple):
    """One operator action on a key, as the status route and the CLI offer it: the pool
    method of that name, what it does, and whether it takes a model or quota bucket."""

    name: str
    help: str
    scoped: bool = False


KEY_ACTIONS = (
    KeyAction(
        "drain", "Take the key LABEL (as `status` shows it) out of rotation for every model."
    ),
    KeyAction("undrain", "Put the drained key LABEL back into rotation."),
    KeyAction(
        "clear",
        "Forget the key LABEL's throttles, auth rests, budgets and probes (one scope, or all).",
        scoped=True,
    ),
)
"""Every action the status route (`POST .../keys/<provider>/<label>/<action>`) and the
`flask cooldown` commands offer; a new action is a `PoolActions` method and its row here."""


class PoolActions:
    """Mixed into `CredentialPool`. Each action names a key by its status label (never the
    key), logs one INFO record without the key, model or bucket, and returns the key's new
    status row."""

    store: ModelCooldown
    _legacy: LegacyRests
    keys: Callable[..., list[str]]
    pooled: Callable[[str], bool]
    status: Callable[..., PoolStatus]

    @pool_method
    def drain(self, provider: str, label: str) -> KeyStatus:
        """No new attempt goes to the key, for any model, until `undrain` (attempts in flight
        finish). Fleet-wide with Redis sharing, where it outlives any worker's restart (when
        Redis is out, it holds here at once and is retried until Redis takes it).

        Parameters:

        - `provider`: the registered name (`KeyError` naming it when it is not).
        - `label`: the key's label as `status()` shows it (`"k-..."`; `KeyError` when no key
          of the provider has it).
        """
        return self._act("drain", CallScope(provider), label, self.store.operators.drain)

    @pool_method
    def undrain(self, provider: str, label: str) -> KeyStatus:
        """Put a drained key back into rotation."""
        return self._act(
            "undrain",
            CallScope(provider),
            label,
            lambda provider, key: self.store.operators.drain(provider, key, drained=False),
        )

    @pool_method
    def clear(
        self,
        provider: str,
        label: str,
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
    ) -> KeyStatus:
        """Forget the key's throttles, auth rests, budgets and probes, for every scope (its
        provider-wide legacy rest too), or with a `model` or `quota_bucket` for that scope
        only. A rejection seen again afterwards is recorded as usual."""

        scope = CallScope(provider, model, quota_bucket)

        def forget(provider: str, key: str) -> None:
            if model is None and quota_bucket is None:
                self._legacy.clear(provider, key)
            self.store.operators.clear_key(scope, key)  # last: it wakes the waiters, the key free

        return self._act("clear", scope, label, forget)

    @pool_method
    def _act(
        self, action: str, scope: CallScope, label: str, act: Callable[[str, str], None]
    ) -> KeyStatus:
        """Find the key a label names (`KeyError` naming the provider when it is not
        registered, else the label), `act(provider, key)`, log it (the scope by kind, never
        by name) and answer the key's new row."""
        provider = scope.provider
        if not isinstance(provider, str) or not isinstance(label, str):
            raise TypeError("provider and label must be str")
        if not self.pooled(provider):
            raise KeyError(f"no provider {provider!r} is registered")
        current = settings()
        if current.enabled:  # a worker that has not served yet acts on the fleet too
            share_when_configured(self.store, current)
        keys = self.keys(provider)
        position = next(
            (
                at
                for at, key in enumerate(keys, 1)
                if self.store.operators.label(provider, key) == label
            ),
            None,
        )
        if position is None:
            raise KeyError(f"no key labelled {label!r} in this provider")
        act(provider, keys[position - 1])
        kind = "one quota bucket" if scope.quota_bucket else "one model" if scope.model else None
        logger.info(
            "model cooldown: operator %s of key %s (provider %s, %s)",
            action,
            label,
            provider,
            kind or "every scope",
        )
        status = self.status(provider, model=scope.model, quota_bucket=scope.quota_bucket)
        return status["keys"][position - 1]
