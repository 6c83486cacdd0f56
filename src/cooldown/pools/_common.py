"""What both pool kinds share: the scoped-path decision and the recording arguments."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import NamedTuple

from ..config import settings
from ..outcome import UpstreamOutcome, classify_upstream_outcome
from ..shared import share_when_configured
from ..store import model_cooldown

__all__ = [
    "ScopedRecording",
    "check_evidence",
    "numbered_suffix",
    "scoped_max_seconds",
    "status_code",
    "unique_stripped",
]


def unique_stripped(values: Iterable[object]) -> list[str]:
    """Strip, skip empties and non-strings, and keep the first of any duplicate."""
    if isinstance(values, (str, bytes)):
        raise TypeError("keys must be a sequence of strings, not a single string")
    seen: dict[str, None] = {}
    for value in values:
        if isinstance(value, str) and value.strip():
            seen.setdefault(value.strip(), None)
    return list(seen)


def numbered_suffix(name: str, prefix: str) -> int | None:
    """`n` when `name` is `prefix` followed by ASCII digits only, else `None`."""
    suffix = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(suffix) if suffix.isascii() and suffix.isdigit() else None


def check_evidence(outcome: object, credential_wide_auth: object) -> None:
    """Reject wrong evidence types on every path, even where the legacy path ignores them."""
    if outcome is not None and not isinstance(outcome, UpstreamOutcome):
        raise TypeError("outcome must be an UpstreamOutcome or None")
    if credential_wide_auth is not None and not isinstance(credential_wide_auth, bool):
        raise TypeError("credential_wide_auth must be a bool or None")


def status_code(status: object) -> int:
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError("status must be an int")
    return status


def scoped_max_seconds(model: object, quota_bucket: object) -> int | None:
    """The configured maximum when this call takes the scoped path, else `None`.

    The scoped path needs the feature enabled and a non-empty model or bucket; anything
    else keeps the legacy provider-wide behaviour.
    """
    for value, name in ((model, "model"), (quota_bucket, "quota_bucket")):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None")
    if not (model or quota_bucket):
        return None
    current = settings()
    if not current.enabled:
        return None
    share_when_configured(model_cooldown, current)
    return current.max_seconds


_classify_status = lru_cache(maxsize=256)(classify_upstream_outcome)
"""Outcomes are immutable, so one per status code is enough for the hot path."""


class ScopedRecording(NamedTuple):
    """The evidence one scoped `record` call passes to the store."""

    outcome: UpstreamOutcome
    credential_wide_auth: bool

    @classmethod
    def from_call(
        cls, status: int, outcome: UpstreamOutcome | None, credential_wide_auth: bool | None
    ) -> ScopedRecording:
        """A supplied outcome overrides the status; a 401 is wide auth unless told otherwise.

        The pools have already passed both through `check_evidence`.
        """
        return cls(
            _classify_status(status) if outcome is None else outcome,
            status == 401 if credential_wide_auth is None else credential_wide_auth,
        )

    @property
    def rejected_wide(self) -> bool:
        return self.outcome.credential_health == "rejected" and self.credential_wide_auth

    def fallback(self, *, rejected: float, otherwise: float) -> float:
        return rejected if self.outcome.credential_health == "rejected" else otherwise
