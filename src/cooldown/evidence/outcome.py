"""Evidence about one upstream attempt, independent of what any pool does with it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "SPENT_WINDOW",
    "TRANSPORT_FAILURES",
    "UpstreamOutcome",
    "classify_status",
    "classify_upstream_outcome",
]

SPENT_WINDOW = "rate_limit_exhausted"
"""The reason of a served answer whose headers show a spent window: a budget's hold, which
lasts as long as its refill says (a throttle's cooldown lasts at least a second)."""

PROVIDER_HEALTH = frozenset({"success", "failure", "neutral"})
CREDENTIAL_HEALTH = frozenset({"accepted", "rejected", "throttled", "unknown"})
TRANSPORT_FAILURES = frozenset({"connect", "timeout", "interrupted"})
PROVIDER_FAILURE_STATUSES = frozenset({408, 500, 502, 503, 504})
CREDENTIAL_REJECTED_STATUSES = frozenset({401, 403})


@dataclass(frozen=True)
class UpstreamOutcome:
    """What one attempt says about the provider and about the credential it used.

    `replay_permission` is whether the request may be sent again; nothing in this
    package ever grants it.
    """

    replay_permission: bool
    provider_health: str
    credential_health: str
    reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.replay_permission, bool):
            raise TypeError("replay_permission must be a bool")
        if self.provider_health not in PROVIDER_HEALTH:
            raise ValueError(f"provider_health must be one of {sorted(PROVIDER_HEALTH)}")
        if self.credential_health not in CREDENTIAL_HEALTH:
            raise ValueError(f"credential_health must be one of {sorted(CREDENTIAL_HEALTH)}")
        if not isinstance(self.reason, str):
            raise TypeError("reason must be a str")


def classify_upstream_outcome(
    status_code: int | None = None,
    *,
    transport_failure: str | None = None,
    cancelled: bool = False,
    replay_permission: bool = False,
) -> UpstreamOutcome:
    """Classify an HTTP status or a transport failure; cancellation wins over both."""
    if transport_failure is not None and transport_failure not in TRANSPORT_FAILURES:
        raise ValueError(f"transport_failure must be one of {sorted(TRANSPORT_FAILURES)} or None")
    if status_code is not None and (
        isinstance(status_code, bool) or not isinstance(status_code, int)
    ):
        raise TypeError("status_code must be an int or None")
    if cancelled:
        return UpstreamOutcome(False, "neutral", "unknown", "cancelled")
    if transport_failure is not None:
        return UpstreamOutcome(
            replay_permission, "failure", "unknown", f"transport_{transport_failure}"
        )
    if status_code is None:
        return UpstreamOutcome(replay_permission, "neutral", "unknown", "unknown")
    if 200 <= status_code < 300:
        return UpstreamOutcome(replay_permission, "success", "accepted", "http_success")
    if status_code in PROVIDER_FAILURE_STATUSES:
        return UpstreamOutcome(replay_permission, "failure", "unknown", "http_provider_failure")
    if status_code in CREDENTIAL_REJECTED_STATUSES:
        return UpstreamOutcome(replay_permission, "neutral", "rejected", "http_credential_rejected")
    if status_code == 429:
        return UpstreamOutcome(replay_permission, "neutral", "throttled", "http_throttled")
    if 400 <= status_code < 500:
        return UpstreamOutcome(replay_permission, "neutral", "unknown", "http_caller_error")
    return UpstreamOutcome(replay_permission, "neutral", "unknown", "http_neutral")


classify_status = lru_cache(maxsize=256)(classify_upstream_outcome)
"""Outcomes are immutable, so one per status code is enough for the hot paths."""
