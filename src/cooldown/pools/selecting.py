"""How a provider pool chooses among its keys: the free ones, in configured or spread order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timezone

from ..arguments import check_cost, require_keys, resolve_now
from ..store import CallScope, ModelCooldown, Order
from ..store.declared import DeclaredLimits
from ._common import by_affinity, check_affinity, scoped_max_seconds
from .accounts import AccountMap, accounts_from_environment, labels_by_key
from .default import pool_method
from .legacy import LegacyRests
from .limits import limits_from_environment
from .provider import Provider
from .usage_readings import UsageReadings

__all__ = ["KeySelection"]


class KeySelection:
    """`keys`, `available`, `eligible` and `select`, mixed into `CredentialPool`."""

    store: ModelCooldown
    _legacy: LegacyRests
    _providers: dict[str, Provider]  # registered, in registration order
    _usage: UsageReadings  # the usage readers and their last readings

    @pool_method
    def _provider(self, provider: str) -> Provider | None:
        """The provider as registered, or `None`."""
        return self._providers.get(provider)

    @pool_method
    def keys(self, provider: str, environ: Mapping[str, str] | None = None) -> list[str]:
        """The configured keys in order; `[]` for a provider that is not registered.

        `environ` stands in for the process environment; keys given in code ignore it.
        """
        registered = self._providers.get(provider)
        return [] if registered is None else registered.keys(environ)

    @pool_method
    def key_positions(
        self, provider: str, environ: Mapping[str, str] | None = None
    ) -> dict[str, int]:
        """Each configured key's 1-based place in its list as configured (what account
        positions name): a placeholder or duplicate dropped keeps its place, and a key keeps
        the place it was first seen at while it stays pooled, so a key that leaves moves no
        other key between accounts."""
        registered = self._providers.get(provider)
        return {} if registered is None else registered.key_positions(environ)

    @pool_method
    def _reads_keys_now(self, provider: str) -> bool:
        """Would reading `provider`'s keys call its `keys=` callable now (a secret manager
        read, which an async caller makes off the event loop)?"""
        registered = self._providers.get(provider)
        return registered is not None and registered.reads_keys_now()

    @pool_method
    def accounts(self, provider: str) -> AccountMap:
        """Position -> account label: registered ones, else `MODEL_COOLDOWN_ACCOUNTS`."""
        registered = self._providers.get(provider)
        return accounts_from_environment(provider) if registered is None else registered.accounts()

    @pool_method
    def declared_limits(self, provider: str) -> DeclaredLimits | None:
        """The limits declared for `provider`: registered ones, else `MODEL_COOLDOWN_LIMITS`'s
        (its day ending in the registered `day_zone`)."""
        registered = self._providers.get(provider)
        if registered is None:
            return limits_from_environment(provider, timezone.utc)
        return registered.limits()

    @pool_method
    def key_accounts(self, provider: str) -> dict[str, str]:
        """Key -> its account's label, for the configured keys in an account."""
        grouped = self.accounts(provider)
        return self._labels(provider, self.keys(provider), grouped)

    @pool_method
    def _labels(
        self, provider: str, keys: list[str], grouped: AccountMap | None = None
    ) -> dict[str, str]:
        """Key -> account label for these of `provider`'s keys; nothing read without accounts."""
        if grouped is None:
            grouped = self.accounts(provider)
        if not grouped:
            return {}
        positions = self.key_positions(provider)
        return labels_by_key(
            keys,
            grouped,
            positions,
            provider,
            lambda key: self.store.operators.label(provider, key),
        )

    @pool_method
    def siblings(self, provider: str, key: str) -> list[str]:
        """The other keys of `key`'s account (none when it is in no account)."""
        labels = self.key_accounts(provider)
        label = labels.get(key)
        if label is None:
            return []
        return [other for other, its in labels.items() if its == label and other != key]

    @pool_method
    def _in_rotation(self, provider: str, candidates: list[str], now: float) -> list[str]:
        """The candidates an operator has not drained (no digest at all while none is); a
        key another process cleared leaves this pool's own rests too."""
        cleared: list[str] = []
        drained = self.store.operators.drained_keys(provider, candidates, now=now, cleared=cleared)
        for key in cleared:
            self._legacy.clear(provider, key)
        return [key for key in candidates if key not in drained] if drained else candidates

    @pool_method
    def available(
        self,
        provider: str,
        keys: Sequence[str] | None = None,
        *,
        now: float | None = None,
        model: str | None = None,
        quota_bucket: str | None = None,
        affinity: str | None = None,
        order: Order = "configured",
        cost: int | None = None,
    ) -> list[str]:
        """The keys free for this call, in configured (affinity, or spread) order; may be empty.
        With a `cost` in tokens, a key whose token budget cannot hold it is not free."""
        asked = CallScope(provider, model, quota_bucket, now, order=order, cost=cost)
        return self._filter(asked, keys, affinity, raise_when_empty=False)

    @pool_method
    def eligible(
        self,
        provider: str,
        keys: Sequence[str] | None = None,
        *,
        now: float | None = None,
        model: str | None = None,
        quota_bucket: str | None = None,
        affinity: str | None = None,
        order: Order = "configured",
        cost: int | None = None,
    ) -> list[str]:
        """`available`, except that a scoped all-cooling pool raises the 429 `select` would."""
        asked = CallScope(provider, model, quota_bucket, now, order=order, cost=cost)
        return self._filter(asked, keys, affinity, raise_when_empty=True)

    @pool_method
    def _filter(
        self,
        asked: CallScope,
        keys: Sequence[str] | None,
        affinity: str | None,
        *,
        raise_when_empty: bool,
    ) -> list[str]:
        """The free keys of `available` and `eligible`: `asked` holds the caller's provider,
        scope, clock, order and cost as given (checked here)."""
        provider, model, quota_bucket, now = (
            asked.provider,
            asked.model,
            asked.quota_bucket,
            asked.now,
        )
        affinity = check_affinity(affinity)
        cost = check_cost(asked.cost)
        max_seconds = scoped_max_seconds(self.store, model, quota_bucket, provider)
        candidates = self.keys(provider) if keys is None else list(require_keys(keys))
        current_time = resolve_now(now)
        candidates = self._in_rotation(provider, candidates, current_time)
        rests = self._legacy.live(provider, candidates, current_time, max_seconds)
        if max_seconds is None:
            return [key for key in candidates if key not in rests]
        accounts = self.key_accounts(provider)
        scope = asked._replace(
            now=current_time,
            max_seconds=max_seconds,
            accounts=accounts,
            cost=cost,
            limits=self.declared_limits(provider),
        )
        filter_keys = self.store.eligible if raise_when_empty else self.store.available
        free = filter_keys(scope, candidates, legacy_rest_until=rests)
        return by_affinity(free, affinity)

    @pool_method
    def select(
        self,
        provider: str,
        *,
        now: float | None = None,
        model: str | None = None,
        quota_bucket: str | None = None,
        affinity: str | None = None,
        order: Order = "configured",
        cost: int | None = None,
    ) -> str | None:
        """The key to dispatch with, or `None` when none is configured.

        Legacy: when every key rests, the first configured key (the old fallback).
        Scoped: when every key cools, `ModelCooldownExhausted`; nothing is dispatched. With
        an `affinity` (a conversation or prompt-cache id) the free key it ranks first.
        """
        max_seconds = scoped_max_seconds(self.store, model, quota_bucket, provider)
        cost = check_cost(cost)
        configured = self.keys(provider)
        candidates = self._in_rotation(provider, configured, resolve_now(now))
        if check_affinity(affinity) is not None and max_seconds is not None:
            candidates, order = by_affinity(candidates, affinity), "configured"  # rendezvous
        current_time = resolve_now(now)
        rests = self._legacy.live(provider, candidates, current_time, max_seconds)
        if max_seconds is None:
            free = [key for key in candidates if key not in rests]
            return free[0] if free else (candidates[0] if candidates else None)
        accounts = self._labels(provider, configured)
        # `now` is checked; the store reads the clock itself when it is None
        limits = self.declared_limits(provider)
        scope = CallScope(
            provider, model, quota_bucket, now, max_seconds, accounts, order, cost, limits
        )
        return self.store.select(scope, candidates, legacy_rest_until=rests)
