"""One registered provider of a pool: where its keys come from and what was declared for it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timezone, tzinfo

from ..store.declared import DeclaredLimits
from ..store.refills import RefillSetting
from .accounts import AccountMap, accounts_from_environment
from .code_keys import CodeKeys
from .discovery import discover, discovered_positions, numbered_keys
from .limits import limits_from_environment

__all__ = ["Provider"]


@dataclass
class Provider:
    """A provider as `register` left it (registering again replaces the whole object): its
    key source (the base variable of numbered environment variables, or keys in code), the
    accounts, refill reading, limits and day zone declared for it, and each pooled key's
    place when first seen. What was not declared is read from the settings at each call."""

    name: str
    source: str | CodeKeys
    registered_accounts: AccountMap | None = None
    refill: RefillSetting = "auto"
    registered_limits: DeclaredLimits | None = None
    day_zone: tzinfo | None = timezone.utc  # where its day ends (`None`: 24 rolling hours)
    first_positions: dict[str, int] = field(default_factory=dict)

    def keys(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The configured keys in order; `environ` stands in for the process environment
        (keys given in code ignore it)."""
        source = self.source
        if isinstance(source, CodeKeys):
            return source.current()
        return discover(source, numbered_keys(source), environ)

    def key_positions(self, environ: Mapping[str, str] | None = None) -> dict[str, int]:
        """Each configured key's 1-based place, kept from when it was first seen while it
        stays pooled (see `CredentialPool.key_positions`)."""
        source = self.source
        if isinstance(source, CodeKeys):
            positions = source.positions()
        else:
            positions = discovered_positions(source, numbered_keys(source), environ)
        seen = self.first_positions
        kept = {key: seen.get(key, place) for key, place in positions.items()}
        if kept.keys() != seen.keys():  # a key came or left: keys that left are forgotten
            self.first_positions = kept
        return kept

    def reads_keys_now(self) -> bool:
        """Would reading the keys call a `keys=` callable now (a secret manager read, which
        an async caller makes off the event loop)?"""
        return isinstance(self.source, CodeKeys) and self.source.due()

    def accounts(self) -> AccountMap:
        """Position -> account label: registered ones, else `MODEL_COOLDOWN_ACCOUNTS`."""
        registered = self.registered_accounts
        return accounts_from_environment(self.name) if registered is None else registered

    def limits(self) -> DeclaredLimits | None:
        """Registered limits, else `MODEL_COOLDOWN_LIMITS`'s (its day ending in the
        registered zone)."""
        if self.registered_limits is not None:
            return self.registered_limits
        return limits_from_environment(self.name, self.day_zone)
