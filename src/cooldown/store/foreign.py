"""Entries of keys a pool does not hold (a caller's own list, a client's token): recorded and
honoured like any other, but bounded apart, so they never fill the table its own keys need."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["FOREIGN_DROPPED_WARNING", "FOREIGN_PER_PROVIDER", "ForeignEntries"]

_Provider = TypeVar("_Provider", bound=Hashable)
_Entry = TypeVar("_Entry", bound=Hashable)

FOREIGN_PER_PROVIDER = 1024
"""Entries of keys a provider's pool does not hold, kept at most (per table)."""
FOREIGN_DROPPED_WARNING = (
    "provider %s: more than 1024 cooldowns of keys the pool does not hold; the oldest is dropped"
)


class ForeignEntries(Generic[_Provider, _Entry]):
    """Which live entries are foreign, oldest first, per provider. Its owner's lock guards it
    (the store's, by digests; the legacy rests', by provider and key)."""

    def __init__(self, most: int = FOREIGN_PER_PROVIDER) -> None:
        self._most = most
        self._by_provider: dict[_Provider, OrderedDict[_Entry, None]] = {}
        self._provider_of: dict[_Entry, _Provider] = {}  # entry -> provider, oldest first

    def __bool__(self) -> bool:
        return bool(self._provider_of)

    def added(self, provider: _Provider, entry: _Entry) -> _Entry | None:
        """Note a foreign entry; return the provider's oldest one it pushes out, if any."""
        entries = self._by_provider.setdefault(provider, OrderedDict())
        if entry in entries:
            entries.move_to_end(entry)
            del self._provider_of[entry]
            self._provider_of[entry] = provider
            return None
        entries[entry] = None
        self._provider_of[entry] = provider
        if len(entries) <= self._most:
            return None
        oldest, _ = entries.popitem(last=False)
        del self._provider_of[oldest]
        return oldest

    def forget(self, entry: _Entry) -> None:
        """The entry is not foreign (any more): a held key's, or gone from the table."""
        provider = self._provider_of.pop(entry, None)
        if provider is not None:
            entries = self._by_provider[provider]
            del entries[entry]
            if not entries:
                del self._by_provider[provider]

    def oldest(self) -> _Entry | None:
        """The oldest foreign entry of any provider, forgotten: it gives way to a held key's."""
        entry = next(iter(self._provider_of), None)
        if entry is not None:
            self.forget(entry)
        return entry

    def clear(self) -> None:
        self._by_provider.clear()
        self._provider_of.clear()
