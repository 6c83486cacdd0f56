"""An operator's hands on a pool's keys, by label: drain, undrain, clear."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..config import settings
from ..shared import share_when_configured
from ..store import ModelCooldown
from .default import pool_method
from .key_status import KeyStatus, PoolStatus
from .legacy import LegacyRests

__all__ = ["PoolActions"]

logger = logging.getLogger("cooldown")


class PoolActions:
    """Mixed into `CredentialPool`. Each action names a key by its status label (never the
    key), logs one INFO record without the key, model or bucket, and returns the key's new
    status row."""

    store: ModelCooldown
    _legacy: LegacyRests
    keys: Callable[..., list[str]]
    status: Callable[..., PoolStatus]

    @pool_method
    def drain(self, provider: str, label: str) -> KeyStatus:
        """No new attempt goes to the key, for any model, until `undrain` (attempts in flight
        finish). Fleet-wide with Redis sharing, where it outlives any worker's restart."""
        key, position = self._labelled(provider, label)
        self.store.drain(provider, key)
        return self._acted("drain", provider, label, position)

    @pool_method
    def undrain(self, provider: str, label: str) -> KeyStatus:
        """Put a drained key back into rotation."""
        key, position = self._labelled(provider, label)
        self.store.drain(provider, key, drained=False)
        return self._acted("undrain", provider, label, position)

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
        key, position = self._labelled(provider, label)
        self.store.clear_key(provider, key, model=model, quota_bucket=quota_bucket)
        if model is None and quota_bucket is None:
            self._legacy.clear(provider, key)
        return self._acted("clear", provider, label, position, model, quota_bucket)

    @pool_method
    def _labelled(self, provider: str, label: str) -> tuple[str, int]:
        """The key a label names and its 1-based position; `KeyError` naming the label."""
        if not isinstance(provider, str) or not isinstance(label, str):
            raise TypeError("provider and label must be str")
        current = settings()
        if current.enabled:  # a worker that has not served yet acts on the fleet too
            share_when_configured(self.store, current)
        for position, key in enumerate(self.keys(provider), start=1):
            if self.store.label(provider, key) == label:
                return key, position
        raise KeyError(f"no key labelled {label!r} in this provider")

    @pool_method
    def _acted(
        self,
        action: str,
        provider: str,
        label: str,
        position: int,
        model: str | None = None,
        quota_bucket: str | None = None,
    ) -> KeyStatus:
        """Log the action (its scope by kind, never by name) and answer the key's new row."""
        scope = "one quota bucket" if quota_bucket else "one model" if model else "every scope"
        logger.info(
            "model cooldown: operator %s of key %s (provider %s, %s)",
            action,
            label,
            provider,
            scope,
        )
        status = self.status(provider, model=model, quota_bucket=quota_bucket)
        return status["keys"][position - 1]
