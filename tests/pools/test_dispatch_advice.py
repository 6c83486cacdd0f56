"""`dispatch(..., advice=...)`: advice a provider puts in the body of a throttle."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from cooldown import CredentialPool, google_retry_delay

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-one-0123456789", "sk-two-0123456789"]


class Answer:
    def __init__(self, status: int, headers: dict[str, str], content: bytes = b"") -> None:
        self.status_code = status
        self.headers = headers
        self.content = content


GEMINI_429 = json.dumps(
    {
        "error": {
            "code": 429,
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "45s"}],
        }
    }
).encode()


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch, enabled: None, fresh_warnings: None) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])


def throttle_first(headers: dict[str, str], content: bytes = GEMINI_429) -> Any:
    return lambda key: Answer(429, headers, content) if key == KEYS[0] else Answer(200, {})


def cooling_for() -> int | None:
    return CredentialPool.status(P, model="gemini-2.0")["keys"][0]["retry_after"]


def test_advice_from_a_gemini_body_cools_the_key(pool: None) -> None:
    CredentialPool.dispatch(
        P,
        throttle_first({}),
        model="gemini-2.0",
        advice=lambda answer: google_retry_delay(answer.content),
    )
    assert cooling_for() == 45


def test_the_later_of_body_and_header_advice_stands(pool: None) -> None:
    CredentialPool.dispatch(
        P, throttle_first({"Retry-After": "90"}), model="gemini-2.0", advice=lambda answer: 45
    )
    assert cooling_for() == 90


def test_advice_is_asked_only_about_throttles(pool: None) -> None:
    asked: list[int] = []

    def advice(answer: Answer) -> float:
        asked.append(answer.status_code)
        return 10.0

    CredentialPool.dispatch(P, throttle_first({}), model="gemini-2.0", advice=advice)
    assert asked == [429]


def test_advice_sees_an_exception_that_carried_the_throttle(pool: None) -> None:
    class Throttled(Exception):
        status_code = 429
        content = GEMINI_429

    def send(key: str) -> Answer:
        if key == KEYS[0]:
            raise Throttled
        return Answer(200, {})

    CredentialPool.dispatch(
        P, send, model="gemini-2.0", advice=lambda error: google_retry_delay(error.content)
    )
    assert cooling_for() == 45


@pytest.mark.parametrize("result", [float("nan"), float("inf"), -3, "30", True, [30]])
def test_unusable_advice_is_ignored_with_one_warning_per_provider(
    pool: None, result: object, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "cooldown"):
        for _ in range(2):
            CredentialPool.reset()
            CredentialPool.dispatch(
                P,
                throttle_first({"Retry-After": "12"}),
                model="gemini-2.0",
                advice=lambda a: result,
            )
    assert cooling_for() == 12  # the header's advice stands
    warned = [r for r in caplog.records if "advice" in r.getMessage()]
    assert len(warned) == 1
    assert P in warned[0].getMessage()
    assert str(result) not in warned[0].getMessage().replace(P, "")


def test_an_advice_that_raises_is_ignored_and_logged_once_without_its_text(
    pool: None, caplog: pytest.LogCaptureFixture
) -> None:
    def advice(answer: Answer) -> float:
        raise ValueError(f"cannot parse {KEYS[0]}")

    with caplog.at_level(logging.WARNING, "cooldown"):
        for _ in range(2):
            CredentialPool.dispatch(
                P, throttle_first({"Retry-After": "12"}), model="gemini-2.0", advice=advice
            )
    assert cooling_for() == 12
    warned = [r for r in caplog.records if "advice" in r.getMessage()]
    assert len(warned) == 1
    assert "sk-one" not in caplog.text
    assert warned[0].exc_info is None


def test_advice_must_be_callable(pool: None) -> None:
    with pytest.raises(TypeError, match="advice"):
        CredentialPool.dispatch(P, throttle_first({}), model="gemini-2.0", advice=30)  # type: ignore[arg-type]
