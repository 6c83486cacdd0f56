"""Which credential-wide cooldowns are spent quotas: so operators read "out of quota", not an
auth rejection, for a key that cools on every model."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["QuotaMarks", "held_by_quota"]


class QuotaMarks:
    """Credential digest -> the deadline of its spent quota; at most `most` (the expired
    first, then the oldest, make room). The store's lock guards it."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._until: dict[bytes, float] = {}

    def __bool__(self) -> bool:
        return bool(self._until)

    def marked(self, credential: bytes, deadline: float, now: float) -> None:
        until = self._until
        if credential not in until and len(until) >= self._most:
            for expired in [entry for entry, end in until.items() if end <= now]:
                del until[expired]
            if len(until) >= self._most:
                del until[next(iter(until))]
        until[credential] = deadline

    def until(self, credential: bytes) -> float:
        return self._until.get(credential, 0.0)

    def forget(self, matches: Callable[[bytes], bool]) -> None:
        for entry in [entry for entry in self._until if matches(entry)]:
            del self._until[entry]

    def clear(self) -> None:
        self._until.clear()


def held_by_quota(quota_until: float, release: float) -> bool:
    """A credential-wide hold is the quota's while its mark lasts as long (a later auth
    rejection that outlasts it is named as such)."""
    return quota_until > 0 and quota_until >= release - 0.001
