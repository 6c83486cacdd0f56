"""How many models or buckets one credential may cool for before it cools everywhere."""

from __future__ import annotations

from array import array
from collections.abc import Collection

__all__ = ["DIGEST_SIZE", "SCOPES_PER_CREDENTIAL", "ScopeBudget"]

SCOPES_PER_CREDENTIAL = 64
"""Live scope entries one credential may hold; a throttle for one more cools it everywhere."""
DIGEST_SIZE = 32
"""Bytes of one digest: a credential entry is one, a scope entry two (credential + scope)."""
_SLOTS = 1 << 14  # counters of scope entries, indexed by a credential digest's first bits


def _slot(entry: bytes) -> int:
    """Which counter a credential digest shares (a few credentials share each one)."""
    return (entry[0] << 6) | (entry[1] >> 2)


class ScopeBudget:
    """Scope entries per credential, counted in 16,384 shared slots (32 KiB, not a dict).

    A slot under budget proves its credentials are too; only a full slot costs an exact
    count over the table, so junk model names cannot make the common path slow or large.
    """

    __slots__ = ("_counts", "_full", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts = array("H", bytes(2 * _SLOTS))
        self._full: dict[bytes, None] = {}  # credentials counted at their budget, until one leaves

    def admits(self, entry: bytes, held: Collection[bytes]) -> bool:
        """May this new scope entry be stored, or does its credential hold its whole budget?"""
        if self._counts[_slot(entry)] < self.limit:
            return True
        credential = entry[:DIGEST_SIZE]
        if credential in self._full:  # counted before, and none of its entries left since
            return False
        count = sum(
            1 for other in held if len(other) > DIGEST_SIZE and other.startswith(credential)
        )
        if count >= self.limit:
            self._full[credential] = None  # at most one per `limit` entries: bounded
        return count < self.limit

    def added(self, entry: bytes) -> None:
        if len(entry) > DIGEST_SIZE:
            self._counts[_slot(entry)] += 1

    def removed(self, entry: bytes) -> None:
        if len(entry) > DIGEST_SIZE:
            self._counts[_slot(entry)] -= 1
            if self._full:
                self._full.pop(entry[:DIGEST_SIZE], None)

    def clear(self) -> None:
        self._counts = array("H", bytes(2 * _SLOTS))
        self._full.clear()
