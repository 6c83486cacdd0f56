from __future__ import annotations

from datetime import datetime, timezone
from email.utils import format_datetime

import pytest
from werkzeug.datastructures import Headers

from cooldown import (
    UpstreamOutcome,
    classify_upstream_outcome,
    recording_context,
    retry_after_seconds,
    selection_scope,
)

NOW = 1_800_000_000.0  # wall clock for HTTP-dates
ON = {"MODEL_COOLDOWN_ENABLED": "true"}


def http_date(offset: float) -> str:
    return format_datetime(datetime.fromtimestamp(NOW + offset, tz=timezone.utc), usegmt=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        ("007", 7.0),
        ("-5", None),
        ("1.5", None),
        ("NaN", None),
        ("inf", None),
        ("soon", None),
        ("", None),
        ("9" * 400, None),
        ("١٢", None),
    ],
)
def test_delta_seconds(value: str, expected: float | None) -> None:
    assert retry_after_seconds({"Retry-After": value}, received_at=NOW) == expected


def test_future_http_date_is_relative_to_now() -> None:
    assert retry_after_seconds({"retry-after": http_date(90)}, received_at=NOW) == pytest.approx(90)


def test_past_http_date_is_zero() -> None:
    assert retry_after_seconds({"RETRY-AFTER": http_date(-300)}, received_at=NOW) == 0.0


def test_zoneless_date_is_not_trusted() -> None:
    assert (
        retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00"}, received_at=NOW) is None
    )


@pytest.mark.parametrize(
    "headers",
    [None, {}, {"X-Other": "5"}, {"Retry-After": 5}, {"Retry-After": b"5"}, [("Age", "3")]],
)
def test_missing_or_non_text_headers(headers: object) -> None:
    assert retry_after_seconds(headers, received_at=NOW) is None  # type: ignore[arg-type]


def test_werkzeug_headers_and_pairs_are_accepted() -> None:
    assert retry_after_seconds(Headers([("Retry-After", "3")])) == 3.0
    assert retry_after_seconds([("retry-after", "4")]) == 4.0


def test_helpers_return_nothing_when_disabled() -> None:
    assert selection_scope("p", "gpt-a", quota_buckets={"p": "tier"}, environ={}) == {}
    assert recording_context(429, {"Retry-After": "5"}, environ={}) == {}
    off = {"MODEL_COOLDOWN_ENABLED": "false"}
    assert selection_scope("p", "gpt-a", environ=off) == {}
    assert recording_context(401, environ={"MODEL_COOLDOWN_ENABLED": "garbage"}) == {}


def test_helpers_read_os_environ_by_default(enabled: None) -> None:
    assert selection_scope("p", "gpt-a") == {"model": "gpt-a", "quota_bucket": None}


@pytest.mark.parametrize(
    ("model", "buckets", "expected"),
    [
        ("gpt-a", None, {"model": "gpt-a", "quota_bucket": None}),
        ("gpt-a", {"p": "tier-1"}, {"model": "gpt-a", "quota_bucket": "tier-1"}),
        (None, {"p": "tier-1"}, {"model": None, "quota_bucket": "tier-1"}),
        ("gpt-a", {"p": {"gpt-a": "mini-pool"}}, {"model": "gpt-a", "quota_bucket": "mini-pool"}),
        ("gpt-b", {"p": {"gpt-a": "mini-pool"}}, {"model": "gpt-b", "quota_bucket": None}),
        ("gpt-a", {"other": "tier-1"}, {"model": "gpt-a", "quota_bucket": None}),
        ("gpt-a", {"p": ""}, {"model": "gpt-a", "quota_bucket": None}),
        ("gpt-a", {"p": 7}, {"model": "gpt-a", "quota_bucket": None}),
        ("gpt-a", {"p": {"gpt-a": 7}}, {"model": "gpt-a", "quota_bucket": None}),
        ("", None, {"model": None, "quota_bucket": None}),
        (42, None, {"model": None, "quota_bucket": None}),
    ],
)
def test_selection_scope(model: object, buckets: object, expected: dict[str, object]) -> None:
    assert selection_scope("p", model, quota_buckets=buckets, environ=ON) == expected  # type: ignore[arg-type]


def test_bucket_is_never_inferred_from_a_prefix() -> None:
    scope = selection_scope("p", "tier-1/gpt-a", quota_buckets={"q": "tier-1"}, environ=ON)
    assert scope["quota_bucket"] is None


def test_recording_context_classifies_and_reads_advice() -> None:
    context = recording_context(429, {"Retry-After": "12"}, environ=ON)
    assert context == {
        "outcome": classify_upstream_outcome(429),
        "credential_wide_auth": False,
        "retry_after_seconds": 12.0,
    }


def test_recording_context_401_is_wide_unless_cancelled() -> None:
    assert recording_context(401, environ=ON)["credential_wide_auth"] is True
    cancelled = recording_context(401, cancelled=True, environ=ON)
    assert cancelled["credential_wide_auth"] is False
    assert cancelled["outcome"].reason == "cancelled"
    assert recording_context(403, environ=ON)["credential_wide_auth"] is False


def test_recording_context_supplied_outcome_and_transport() -> None:
    quota = UpstreamOutcome(False, "neutral", "throttled", "quota_exhausted")
    assert recording_context(402, outcome=quota, environ=ON)["outcome"] is quota
    failed = recording_context(None, transport_failure="connect", environ=ON)
    assert failed["outcome"].reason == "transport_connect"
    assert failed["retry_after_seconds"] is None
