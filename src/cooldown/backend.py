"""What the store asks of a shared backend, and how it reads one lookup's answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from .arguments import require_str
from .digests import PreparedHmac, credential_message

__all__ = ["SharedObservations", "Sharing", "shared_releases"]


class SharedObservations(Protocol):
    """What the store needs from a shared backend (`cooldown.shared.RedisObservations`).

    Entries are hex ids; times are the caller's monotonic seconds. A backend that cannot
    answer returns `None` from `lookup` and never raises.
    """

    def record(self, entry: str, deadline: float, now: float, max_seconds: int) -> None: ...

    def clear(self, entry: str, now: float) -> None: ...

    def lookup(
        self, entries: Sequence[str], now: float, max_seconds: int
    ) -> tuple[list[float | None], float] | None: ...

    def live_entries(self, now: float) -> list[str] | None: ...

    def stats(self) -> dict[str, int | bool]: ...


class Sharing(NamedTuple):
    backend: SharedObservations
    digest: PreparedHmac  # keyed by the shared secret, not the store's salt


def shared_releases(
    sharing: Sharing,
    provider_frame: bytes,
    keys: Sequence[str],
    scope: bytes | None,
    now: float,
    max_seconds: int,
) -> tuple[dict[str, tuple[float, float]], float]:
    """Per key, its shared credential-wide and scope deadlines; and the shared overflow.

    One round trip; when the backend does not answer, nothing (the local answer stands).
    """
    digest = sharing.digest
    scope_digest = b"" if scope is None else digest(scope)
    entries: list[str] = []
    for key in keys:
        credential = digest(credential_message(provider_frame, require_str(key, "each key")))
        entries.append(credential.hex())
        if scope_digest:
            entries.append((credential + scope_digest).hex())
    answer = sharing.backend.lookup(entries, now, max_seconds)
    if answer is None:
        return {}, 0.0
    deadlines, overflow = answer
    per_key = 2 if scope_digest else 1
    releases = {}
    for index, key in enumerate(keys):
        wide = deadlines[index * per_key]
        scoped = deadlines[index * per_key + 1] if scope_digest else None
        releases[key] = (wide or 0.0, scoped or 0.0)
    return releases, overflow
