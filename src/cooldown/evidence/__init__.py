"""What one upstream answer says: its outcome, advice, rate-limit headers, learned windows.

The helpers for a gateway that records by hand (`select`, then `record` with what the answer
said) are importable from here as well as from `cooldown`.
"""

from __future__ import annotations

from .advice import (
    RecordingContext,
    SelectionScope,
    recording_context,
    retry_after_seconds,
    selection_scope,
    upstream_model,
)
from .bodies import google_quota_spent, google_retry_delay
from .outcome import UpstreamOutcome, classify_upstream_outcome
from .quota import QUOTA_SPENT, QuotaSpent
from .ratelimit import rate_limit_advice

__all__ = [
    "QUOTA_SPENT",
    "QuotaSpent",
    "RecordingContext",
    "SelectionScope",
    "UpstreamOutcome",
    "classify_upstream_outcome",
    "google_quota_spent",
    "google_retry_delay",
    "rate_limit_advice",
    "recording_context",
    "retry_after_seconds",
    "selection_scope",
    "upstream_model",
]
