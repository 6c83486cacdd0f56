from __future__ import annotations

import dataclasses

import pytest

from cooldown import UpstreamOutcome, classify_upstream_outcome


def test_field_order_is_fixed() -> None:
    assert [f.name for f in dataclasses.fields(UpstreamOutcome)] == [
        "replay_permission",
        "provider_health",
        "credential_health",
        "reason",
    ]


@pytest.mark.parametrize(
    ("status", "provider", "credential", "reason"),
    [
        (200, "success", "accepted", "http_success"),
        (204, "success", "accepted", "http_success"),
        (299, "success", "accepted", "http_success"),
        (408, "failure", "unknown", "http_provider_failure"),
        (500, "failure", "unknown", "http_provider_failure"),
        (502, "failure", "unknown", "http_provider_failure"),
        (503, "failure", "unknown", "http_provider_failure"),
        (504, "failure", "unknown", "http_provider_failure"),
        (401, "neutral", "rejected", "http_credential_rejected"),
        (403, "neutral", "rejected", "http_credential_rejected"),
        (429, "neutral", "throttled", "http_throttled"),
        (400, "neutral", "unknown", "http_caller_error"),
        (402, "neutral", "unknown", "http_caller_error"),
        (404, "neutral", "unknown", "http_caller_error"),
        (499, "neutral", "unknown", "http_caller_error"),
        (301, "neutral", "unknown", "http_neutral"),
        (501, "neutral", "unknown", "http_neutral"),
        (100, "neutral", "unknown", "http_neutral"),
        (None, "neutral", "unknown", "unknown"),
    ],
)
@pytest.mark.parametrize("replay", [False, True])
def test_status_rows(
    status: int | None, provider: str, credential: str, reason: str, replay: bool
) -> None:
    assert classify_upstream_outcome(status, replay_permission=replay) == UpstreamOutcome(
        replay, provider, credential, reason
    )


@pytest.mark.parametrize("kind", ["connect", "timeout", "interrupted"])
@pytest.mark.parametrize("replay", [False, True])
def test_transport_failure_beats_status(kind: str, replay: bool) -> None:
    outcome = classify_upstream_outcome(200, transport_failure=kind, replay_permission=replay)
    assert outcome == UpstreamOutcome(replay, "failure", "unknown", f"transport_{kind}")


@pytest.mark.parametrize("status", [None, 200, 401, 429, 503])
def test_cancellation_wins_and_turns_replay_off(status: int | None) -> None:
    outcome = classify_upstream_outcome(
        status, transport_failure="timeout", cancelled=True, replay_permission=True
    )
    assert outcome == UpstreamOutcome(False, "neutral", "unknown", "cancelled")


def test_unknown_transport_failure_is_a_value_error_even_when_cancelled() -> None:
    with pytest.raises(ValueError, match="transport_failure"):
        classify_upstream_outcome(transport_failure="dns", cancelled=True)


def test_classification_never_grants_replay() -> None:
    assert all(
        classify_upstream_outcome(status).replay_permission is False
        for status in (200, 401, 429, 500, None)
    )


@pytest.mark.parametrize("status", ["429", 429.0, True, b"429"])
def test_non_int_status_is_a_type_error(status: object) -> None:
    with pytest.raises(TypeError):
        classify_upstream_outcome(status)  # type: ignore[arg-type]


def test_outcome_rejects_unknown_health_values() -> None:
    with pytest.raises(ValueError, match="credential_health"):
        UpstreamOutcome(False, "neutral", "exhausted", "x")
    with pytest.raises(ValueError, match="provider_health"):
        UpstreamOutcome(False, "ok", "unknown", "x")
    with pytest.raises(TypeError):
        UpstreamOutcome(1, "neutral", "unknown", "x")  # type: ignore[arg-type]


def test_caller_built_quota_exhaustion() -> None:
    outcome = UpstreamOutcome(False, "neutral", "throttled", "quota_exhausted")
    assert outcome.credential_health == "throttled"
