from __future__ import annotations

from collections.abc import Callable
from unittest.mock import Mock

import pytest
from flask import Flask, Response, jsonify

from cooldown import (
    APIError,
    CooldownError,
    CredentialPool,
    ModelCooldownCapacity,
    ModelCooldownExhausted,
    api_error_response,
    cooldown_error_response,
    init_app,
    model_cooldown,
)

P = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"


@pytest.fixture
def dispatch() -> Mock:
    return Mock(return_value={"ok": True})


@pytest.fixture
def app(dispatch: Mock, monkeypatch: pytest.MonkeyPatch) -> Flask:
    """A gateway-shaped app: select, dispatch with a fake upstream, answer."""
    monkeypatch.setenv(BASE, "sk-web-one")
    monkeypatch.setenv(f"{BASE}_1", "sk-web-two")
    app = Flask(__name__)
    init_app(app)

    @app.post("/chat/<model>")
    def chat(model: str) -> Response:
        key = CredentialPool.select(P, model=model)
        return jsonify(dispatch(key))

    return app


@pytest.mark.usefixtures("enabled")
def test_all_cooling_answers_429_without_dispatch(app: Flask, dispatch: Mock) -> None:
    for key in ("sk-web-one", "sk-web-two"):
        CredentialPool.record(P, key, 429, model="gpt-a", retry_after_seconds=42.5)
    response = app.test_client().post("/chat/gpt-a")
    dispatch.assert_not_called()
    assert response.status_code == 429
    assert response.json is not None
    assert response.json["error"] == "model_cooldown"
    assert response.json["retry_after"] in (42, 43)
    assert response.headers["Retry-After"] == str(response.json["retry_after"])
    assert response.headers["Access-Control-Expose-Headers"] == "Retry-After"
    for secret in ("sk-web-one", "sk-web-two", "gpt-a"):
        assert secret not in response.get_data(as_text=True)
        assert secret not in str(response.headers)


@pytest.mark.usefixtures("enabled")
def test_other_model_still_dispatches(app: Flask, dispatch: Mock) -> None:
    for key in ("sk-web-one", "sk-web-two"):
        CredentialPool.record(P, key, 429, model="gpt-a")
    assert app.test_client().post("/chat/gpt-b").status_code == 200
    dispatch.assert_called_once_with("sk-web-one")


@pytest.mark.usefixtures("enabled")
def test_capacity_answers_503(dispatch: Mock, mocker: Mock) -> None:
    app = Flask(__name__)
    init_app(app)

    @app.get("/")
    def index() -> Response:
        raise ModelCooldownCapacity(7)

    response = app.test_client().get("/")
    assert response.status_code == 503
    assert response.json == {
        "error": "model_cooldown_capacity",
        "message": "Cooldown tracking is at capacity; retry after 7 seconds.",
        "retry_after": 7,
    }
    assert response.headers["Retry-After"] == "7"


def test_adapters_work_without_an_application_context() -> None:
    response = cooldown_error_response(ModelCooldownExhausted(5))
    assert (response.status_code, response.headers["Retry-After"]) == (429, "5")
    generic = api_error_response(APIError("bad input", 400, {"error": "invalid"}))
    assert generic.status_code == 400
    assert generic.get_json() == {"error": "invalid", "message": "bad input"}
    assert "Retry-After" not in generic.headers


def test_generic_handler_hides_5xx_messages_but_not_cooldown_ones() -> None:
    hidden = api_error_response(APIError("db password wrong at 10.0.0.3", 500))
    assert "password" not in hidden.get_data(as_text=True)
    shown = api_error_response(ModelCooldownCapacity(3))
    assert "capacity" in shown.get_data(as_text=True)
    assert "Retry-After" not in shown.headers


def test_generic_api_error_through_the_app_has_no_retry_after() -> None:
    app = Flask(__name__)
    init_app(app)

    @app.get("/")
    def index() -> Response:
        raise APIError("teapot", 418)

    response = app.test_client().get("/")
    assert response.status_code == 418
    assert response.json == {"message": "teapot"}
    assert "Retry-After" not in response.headers


def make_app_raising(error: Exception, *, expose: str | None = None) -> Flask:
    app = Flask(__name__)

    @app.get("/")
    def index() -> Response:
        raise error

    if expose is not None:

        @app.after_request
        def add_expose(response: Response) -> Response:
            response.headers["Access-Control-Expose-Headers"] = expose
            return response

    init_app(app)
    return app


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        ("X-Request-Id", "X-Request-Id, Retry-After"),
        ("retry-after, X-Trace", "retry-after, X-Trace"),
        ("", "Retry-After"),
    ],
)
def test_expose_header_is_merged_never_duplicated(existing: str, expected: str) -> None:
    response = make_app_raising(ModelCooldownExhausted(2), expose=existing).test_client().get("/")
    assert response.headers["Access-Control-Expose-Headers"] == expected


def test_any_response_carrying_retry_after_is_exposed() -> None:
    app = Flask(__name__)
    init_app(app)

    @app.get("/")
    def index() -> Response:
        return Response("slow down", status=503, headers={"Retry-After": "9"})

    @app.get("/plain")
    def plain() -> str:
        return "ok"

    client = app.test_client()
    assert client.get("/").headers["Access-Control-Expose-Headers"] == "Retry-After"
    assert "Access-Control-Expose-Headers" not in client.get("/plain").headers
    assert "Access-Control-Allow-Origin" not in client.get("/").headers


def test_existing_api_error_handler_is_kept() -> None:
    app = Flask(__name__)

    @app.errorhandler(APIError)
    def own_handler(error: APIError) -> tuple[str, int]:
        return "house style", error.status_code

    @app.get("/api")
    def api() -> Response:
        raise APIError("nope", 409)

    @app.get("/cool")
    def cool() -> Response:
        raise ModelCooldownExhausted(4)

    init_app(app)
    client = app.test_client()
    assert client.get("/api").get_data(as_text=True) == "house style"
    cooled = client.get("/cool")
    assert (cooled.status_code, cooled.headers["Retry-After"]) == (429, "4")


def test_init_app_twice_is_harmless() -> None:
    app = make_app_raising(ModelCooldownExhausted(3))
    init_app(app)
    response = app.test_client().get("/")
    assert response.headers["Access-Control-Expose-Headers"] == "Retry-After"
    assert app.extensions["cooldown"] is model_cooldown
    assert len(app.after_request_funcs[None]) == 1


def with_candidate_fallback(
    candidates: list[str], call: Callable[[str], Response]
) -> Callable[[], Response]:
    """A route wrapper that tries the next candidate on a failure, as gateways do."""

    def wrapped() -> Response:
        for candidate in candidates:
            try:
                return call(candidate)
            except CooldownError:
                raise  # a cooldown is an answer, never a reason to try another candidate
            except Exception:
                continue
        raise APIError("All candidates failed.", 503)

    return wrapped


@pytest.mark.usefixtures("enabled")
def test_route_wrapper_lets_cooldown_errors_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE, "sk-web-one")
    CredentialPool.record(P, "sk-web-one", 429, model="gpt-a", retry_after_seconds=30)
    second_candidate = Mock(return_value=Response("other"))

    def call(candidate: str) -> Response:
        if candidate == "primary":
            CredentialPool.select(P, model="gpt-a")
        return second_candidate(candidate)  # type: ignore[no-any-return]

    app = Flask(__name__)
    init_app(app)
    app.add_url_rule("/", view_func=with_candidate_fallback(["primary", "secondary"], call))
    response = app.test_client().get("/")
    assert response.status_code == 429
    assert response.headers["Retry-After"] in ("29", "30")
    second_candidate.assert_not_called()
