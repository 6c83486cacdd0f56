"""The official `anthropic` SDK, over loopback, reads our 429 and 503 in Anthropic's shape."""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import pytest
from flask import Flask

from cooldown import CooldownError, ModelCooldownCapacity, ModelCooldownExhausted, init_app


def gateway(error: CooldownError, **init: str) -> Flask:
    app = Flask("anthropic-gateway")
    init_app(app, **init)  # type: ignore[arg-type]

    @app.post("/v1/messages")
    def messages() -> str:
        raise error

    return app


def ask(base_url: str) -> None:
    client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-client", max_retries=0)
    client.messages.create(
        model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )


def test_sdk_raises_rate_limit_error_with_retry_after(
    serve_in_thread: Callable[[Flask], str],
) -> None:
    error = ModelCooldownExhausted(12)
    with pytest.raises(anthropic.RateLimitError) as raised:
        ask(serve_in_thread(gateway(error, error_format="anthropic")))
    assert raised.value.status_code == 429
    assert raised.value.body == {  # type: ignore[comparison-overlap]
        "type": "error",
        "error": {"type": "rate_limit_error", "message": error.message},
    }
    assert raised.value.response.headers["retry-after"] == "12"


def test_sdk_reads_capacity_as_overloaded(serve_in_thread: Callable[[Flask], str]) -> None:
    with pytest.raises(anthropic.InternalServerError) as raised:
        ask(serve_in_thread(gateway(ModelCooldownCapacity(3), error_format="anthropic")))
    assert raised.value.status_code == 503
    assert raised.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


def test_the_sdk_honours_our_retry_after_when_it_retries(
    serve_in_thread: Callable[[Flask], str], mocker: object
) -> None:
    slept: list[float] = []
    import time

    mocker.patch.object(time, "sleep", slept.append)  # type: ignore[attr-defined]
    client = anthropic.Anthropic(
        base_url=serve_in_thread(gateway(ModelCooldownExhausted(7), error_format="anthropic")),
        api_key="sk-ant-client",
        max_retries=1,
    )
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(
            model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert slept == [7.0]
