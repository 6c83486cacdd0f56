"""`init_app` on a Quart app: the 429/503 handlers answer with Quart responses."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import quart

from cooldown import (
    APIError,
    CredentialPool,
    ModelCooldownCapacity,
    init_app,
    status_blueprint,
)

P = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"
KEYS = ["sk-quart-one-0123456789", "sk-quart-two-0123456789"]


class Throttle:
    status_code = 429
    headers = {"Retry-After": "30"}  # noqa: RUF012


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> quart.Quart:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])
    app = quart.Quart("gateway")
    app.config["MODEL_COOLDOWN_ENABLED"] = True

    @app.post("/v1/chat/completions")
    async def chat() -> Any:
        body = await quart.request.get_json()

        async def send(key: str) -> Throttle:
            return Throttle()  # every key throttled upstream

        await CredentialPool.adispatch(P, send, model=body["model"])
        return {"never": "reached"}

    @app.get("/capacity")
    async def capacity() -> Any:
        raise ModelCooldownCapacity(3)

    @app.get("/api-error")
    async def api_error() -> Any:
        raise APIError("internal detail", status_code=500, code="boom")

    @app.after_request
    async def cors(response: quart.Response) -> quart.Response:
        response.headers["Access-Control-Allow-Origin"] = "*"
        response.headers["Access-Control-Expose-Headers"] = "X-Request-Id"
        return response

    return app


def post(app: quart.Quart, path: str, **kwargs: Any) -> quart.Response:
    async def call() -> quart.Response:
        return await app.test_client().post(path, **kwargs)  # type: ignore[no-any-return]

    return asyncio.run(call())


def get(app: quart.Quart, path: str) -> quart.Response:
    async def call() -> quart.Response:
        return await app.test_client().get(path)  # type: ignore[no-any-return]

    return asyncio.run(call())


def body(response: quart.Response) -> Any:
    return asyncio.run(response.get_json())


def test_every_key_cooling_is_a_429_with_retry_after_through_the_test_client(
    gateway: quart.Quart,
) -> None:
    init_app(gateway)
    answer = post(gateway, "/v1/chat/completions", json={"model": "gpt-4o"})
    assert answer.status_code == 429
    assert 29 <= int(answer.headers["Retry-After"]) <= 30
    assert body(answer)["error"] == "model_cooldown"
    again = post(gateway, "/v1/chat/completions", json={"model": "gpt-4o"})
    assert again.status_code == 429  # refused before any send
    text = asyncio.run(answer.get_data(as_text=True))
    assert not any(key[:10] in text for key in KEYS)


def test_the_openai_shape_when_asked(gateway: quart.Quart) -> None:
    init_app(gateway, error_format="openai")
    answer = post(gateway, "/v1/chat/completions", json={"model": "gpt-4o"})
    assert answer.status_code == 429
    assert body(answer)["error"]["code"] == "model_cooldown"
    assert isinstance(answer, quart.Response)


def test_capacity_is_a_503_with_retry_after(gateway: quart.Quart) -> None:
    init_app(gateway)
    answer = get(gateway, "/capacity")
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "3"


def test_cors_exposure_is_merged_with_the_apps_own(gateway: quart.Quart) -> None:
    init_app(gateway)
    answer = post(gateway, "/v1/chat/completions", json={"model": "gpt-4o"})
    exposed = {
        n.strip().lower() for n in answer.headers["Access-Control-Expose-Headers"].split(",")
    }
    assert exposed == {"x-request-id", "retry-after"}


def test_api_errors_keep_internals_out_of_5xx(gateway: quart.Quart) -> None:
    init_app(gateway)
    answer = get(gateway, "/api-error")
    assert answer.status_code == 500
    assert "internal detail" not in asyncio.run(answer.get_data(as_text=True))


def test_app_config_applies_on_quart_too(gateway: quart.Quart) -> None:
    from cooldown import settings

    init_app(gateway)
    assert settings().enabled


def test_the_status_blueprint_says_it_is_flask_only(gateway: quart.Quart) -> None:
    init_app(gateway)
    with pytest.raises(TypeError, match="Flask"):
        gateway.register_blueprint(status_blueprint())  # type: ignore[arg-type]


def test_init_app_refuses_what_is_not_an_app() -> None:
    with pytest.raises(TypeError, match="Flask or Quart"):
        init_app(object())
