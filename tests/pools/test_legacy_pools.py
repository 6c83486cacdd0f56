"""Parity with the pools this package replaces, and their exact bounds."""

from __future__ import annotations

import pytest

from cooldown import (
    CredentialPool,
    rate_limit_advice,
    recording_context,
    upstream_model,
)
from cooldown.pools.legacy import MAX_LIVE_RESTS

P = "ce-gpt-plus"


def test_the_legacy_bound_holds_against_the_live_rests_at_each_write() -> None:
    for index in range(30_000):
        CredentialPool.record(P, f"sk-{index}", 401, now=0.0)
    assert len(CredentialPool._legacy) == MAX_LIVE_RESTS  # live rests are capped
    assert CredentialPool._legacy.dropped_total == 30_000 - MAX_LIVE_RESTS
    largest_after = 0
    for index in range(50):
        CredentialPool.record(P, f"sk-late-{index}", 401, now=10_000.0)
        largest_after = max(largest_after, len(CredentialPool._legacy))
    assert largest_after <= 1024
    assert len(CredentialPool._legacy) == 50


def test_the_first_write_after_the_rests_expire_drops_them() -> None:
    for index in range(30_000):
        CredentialPool.record(P, f"sk-{index}", 429, now=0.0)
    CredentialPool.record(P, "sk-late", 429, now=10_000.0)
    assert len(CredentialPool._legacy) == 1


def test_a_rest_read_at_an_earlier_now_still_rests() -> None:
    """Callers' clocks may disagree by a little: a rest from now=160 holds at now=101."""
    CredentialPool.record(P, "sk-early", 429, now=160.0)
    assert CredentialPool.available(P, ["sk-early", "sk-free"], now=101.0) == ["sk-free"]
    CredentialPool.record(P, "sk-other", 401, now=101.0)
    assert CredentialPool.available(P, ["sk-early"], now=101.0) == []


def test_replaced_rests_leave_the_heap_bounded() -> None:
    for round_number in range(200):
        for index in range(20):
            CredentialPool.record(P, f"sk-{index}", 429, now=float(round_number))
    assert len(CredentialPool._legacy) == 20
    assert len(CredentialPool._legacy._expiry) <= 2 * 20 + 64


ON = {"MODEL_COOLDOWN_ENABLED": "true"}
RECEIVED = 1_767_225_600.0  # 2026-01-01T00:00:00Z, wall clock


def test_a_short_retry_after_does_not_send_into_a_spent_hour_long_window() -> None:
    headers = {
        "Retry-After": "2",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "59m58s",
    }
    context = recording_context(429, headers, received_at=RECEIVED, environ=ON)
    assert context["retry_after_seconds"] == 3598.0


@pytest.mark.parametrize(
    "headers",
    [
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1767225645"},
        {"RateLimit-Remaining": "0", "RateLimit-Reset": "1767225645"},
        {"X-RateLimit-Remaining-Tokens": "0", "X-RateLimit-Reset-Tokens": "1767225645.5"},
    ],
)
def test_an_absolute_unix_reset_is_read_against_the_wall_clock(headers: dict[str, str]) -> None:
    seconds = rate_limit_advice(headers, received_at=RECEIVED)
    assert seconds is not None
    assert 45.0 <= seconds <= 45.5
    assert rate_limit_advice(headers, received_at=RECEIVED + 100) == 0.0  # already past


def test_a_reset_below_the_epoch_threshold_stays_a_duration() -> None:
    headers = {"RateLimit-Remaining": "0", "RateLimit-Reset": "999999999"}
    assert rate_limit_advice(headers, received_at=RECEIVED) == 999_999_999.0


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("/v1/models/gpt-4o", "gpt-4o"),
        ("/v1beta/models/gemini-2.0-flash:generateContent", "gemini-2.0-flash"),
        ("/models/claude-3-5-sonnet", "claude-3-5-sonnet"),
        ("/v1/models", None),
        ("/v1/chat/completions", None),
    ],
)
def test_upstream_model_takes_any_models_path(path: str, model: str | None) -> None:
    assert upstream_model(None, path) == model


def test_the_legacy_map_caps_live_rests_and_counts_the_dropped() -> None:
    for index in range(MAX_LIVE_RESTS + 500):
        CredentialPool.record("ce-gpt-plus", f"sk-junk-{index}", 429, now=0.0)
    assert len(CredentialPool._legacy) == MAX_LIVE_RESTS
    assert CredentialPool._legacy.dropped_total == 500
    CredentialPool.record(
        "ce-gpt-plus", "sk-junk-0", 401, now=1.0
    )  # a held key's rest still updates
    assert CredentialPool._legacy.snapshot()[("ce-gpt-plus", "sk-junk-0")] == 301.0
