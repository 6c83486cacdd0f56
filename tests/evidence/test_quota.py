"""Reading a spent quota from an answer: OpenAI's `insufficient_quota` in the SDKs' exceptions,
and Google's per-day `RESOURCE_EXHAUSTED`."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from cooldown import QuotaSpent, google_quota_spent
from cooldown.evidence.quota import sdk_quota_spent

REQUEST = httpx.Request("POST", "https://api.example.test/v1/chat/completions")


def openai_error(status: int, error: dict[str, Any]) -> openai.APIStatusError:
    response = httpx.Response(status, json={"error": error}, request=REQUEST)
    return openai.APIStatusError("upstream", response=response, body=error)


def google(
    status: str = "RESOURCE_EXHAUSTED", quota_id: str = "RequestsPerDay", **extra: Any
) -> Any:
    details: list[Any] = [
        {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{"quotaId": quota_id, "quotaValue": "50"}],
        },
        *extra.get("more", []),
    ]
    return {"error": {"code": 429, "status": status, "details": details}}


def test_openai_insufficient_quota_is_read_from_the_sdk_exception() -> None:
    spent = openai_error(429, {"code": "insufficient_quota", "type": "insufficient_quota"})
    assert spent.code == "insufficient_quota"  # the SDK parsed it already
    assert sdk_quota_spent(spent)


def test_a_rate_limit_429_from_the_sdk_is_no_spent_quota() -> None:
    throttled = openai_error(429, {"code": "rate_limit_exceeded", "type": "requests"})
    assert not sdk_quota_spent(throttled)


@pytest.mark.parametrize(
    "body",
    [
        {"type": "insufficient_quota"},
        {"error": {"code": "insufficient_quota"}},
        {"error": {"type": "insufficient_quota"}},
    ],
)
def test_the_parsed_body_of_any_exception_says_it_too(body: dict[str, Any]) -> None:
    class Raised(Exception):
        pass

    error = Raised()
    error.body = body  # type: ignore[attr-defined]
    assert sdk_quota_spent(error)


@pytest.mark.parametrize(
    "body", [None, "insufficient_quota", {"code": 429}, {"error": "insufficient_quota"}, []]
)
def test_junk_bodies_and_codes_say_nothing(body: object) -> None:
    class Raised(Exception):
        code = 429

    error = Raised()
    error.body = body  # type: ignore[attr-defined]
    assert not sdk_quota_spent(error)


def test_a_raising_property_is_no_evidence() -> None:
    class Odd(Exception):
        @property
        def code(self) -> str:
            raise RuntimeError("boom")

    assert not sdk_quota_spent(Odd())


def test_an_anthropic_rate_limit_is_no_spent_quota() -> None:
    error = {"type": "rate_limit_error", "message": "slow down"}
    response = httpx.Response(429, json={"type": "error", "error": error}, request=REQUEST)
    raised = anthropic.RateLimitError("upstream", response=response, body={"error": error})
    assert not sdk_quota_spent(raised)


def test_google_per_day_quota_is_spent_with_its_retry_delay() -> None:
    delay = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "43.5s"}
    assert google_quota_spent(google(more=[delay])) == QuotaSpent(43.5)
    assert google_quota_spent(json.dumps(google()).encode()) == QuotaSpent(None)
    assert google_quota_spent([google()]) == QuotaSpent(None)  # the list some endpoints send


def test_a_zero_retry_delay_is_no_seconds() -> None:
    delay = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0s"}
    assert google_quota_spent(google(more=[delay])) == QuotaSpent(None)


@pytest.mark.parametrize(
    "body",
    [
        google(quota_id="RequestsPerMinute"),
        google(status="UNAVAILABLE"),
        {"error": {"status": "RESOURCE_EXHAUSTED"}},
        {"error": {"status": "RESOURCE_EXHAUSTED", "details": [{"violations": "PerDay"}]}},
        b"\xff not json",
        "[" * 100000,
        None,
        42,
    ],
)
def test_anything_but_a_per_day_quota_is_none(body: object) -> None:
    assert google_quota_spent(body) is None
