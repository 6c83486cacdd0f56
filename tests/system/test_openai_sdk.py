"""The official `openai` SDK, over loopback, reads our 429 and 503 as its own errors."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest
from flask import Flask

from cooldown import CooldownError, ModelCooldownCapacity, ModelCooldownExhausted, init_app


@pytest.fixture
def serve(serve_in_thread: Callable[[Flask], str]) -> Callable[[Flask], str]:
    """The app's OpenAI-style base URL over loopback."""
    return lambda app: serve_in_thread(app) + "/v1"


def gateway(error: CooldownError, **init: str) -> Flask:
    app = Flask("sdk")
    init_app(app, **init)  # type: ignore[arg-type]

    @app.post("/v1/chat/completions")
    def chat() -> str:
        raise error

    return app


def ask(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="sk-client", max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def test_sdk_raises_rate_limit_error_with_our_code_and_message(
    serve: Callable[[Flask], str],
) -> None:
    error = ModelCooldownExhausted(12)
    with pytest.raises(openai.RateLimitError) as raised:
        ask(serve(gateway(error, error_format="openai")))
    assert raised.value.status_code == 429
    assert raised.value.code == "model_cooldown"
    assert raised.value.type == "model_cooldown"
    assert error.message in str(raised.value)
    assert raised.value.response.headers["Retry-After"] == "12"


def test_sdk_raises_internal_server_error_at_capacity(serve: Callable[[Flask], str]) -> None:
    error = ModelCooldownCapacity(3)
    with pytest.raises(openai.InternalServerError) as raised:
        ask(serve(gateway(error, error_format="openai")))
    assert raised.value.status_code == 503
    assert raised.value.code == "model_cooldown_capacity"
    assert error.message in str(raised.value)


def test_format_from_app_config(serve: Callable[[Flask], str]) -> None:
    app = Flask("configured")
    app.config["MODEL_COOLDOWN_ERROR_FORMAT"] = "openai"
    init_app(app)

    @app.post("/v1/chat/completions")
    def chat() -> str:
        raise ModelCooldownExhausted(5)

    with pytest.raises(openai.RateLimitError) as raised:
        ask(serve(app))
    assert raised.value.code == "model_cooldown"


def test_the_default_body_is_what_the_sdk_cannot_parse(serve: Callable[[Flask], str]) -> None:
    with pytest.raises(openai.RateLimitError) as raised:
        ask(serve(gateway(ModelCooldownExhausted(5))))
    assert raised.value.code is None  # why "openai" exists: the flat body has no nested error


def test_an_unknown_format_is_refused_at_init() -> None:
    with pytest.raises(ValueError, match="error_format"):
        init_app(Flask("bad"), error_format="xml")
    app = Flask("bad-config")
    app.config["MODEL_COOLDOWN_ERROR_FORMAT"] = "OpenAI"
    with pytest.raises(ValueError, match="error_format"):
        init_app(app)
