"""The demo gateway in-process, against the simulated upstream with an injected clock."""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from cooldown import (
    model_cooldown,
)
from cooldown.demo import DemoConfig, SimulatedUpstream, create_app
from cooldown.demo.__main__ import main
from cooldown.demo.gateway import simulated_dispatch
from cooldown.demo.upstream import UpstreamReply, UpstreamUnreachable

KEYS = ("sk-demo-1", "sk-demo-2", "sk-demo-3")
ENV = "TEST_DEMO_KEY"


@pytest.fixture
def clock() -> list[float]:
    return [100.0]


@pytest.fixture
def upstream(clock: list[float]) -> SimulatedUpstream:
    return SimulatedUpstream(
        quota=1, window=30, revoked=frozenset({KEYS[0]}), clock=lambda: clock[0]
    )


@pytest.fixture
def app(upstream: SimulatedUpstream, monkeypatch: pytest.MonkeyPatch) -> Flask:
    monkeypatch.setenv(ENV, KEYS[0])
    monkeypatch.setenv(f"{ENV}_1", KEYS[1])
    monkeypatch.setenv(f"{ENV}_2", KEYS[2])
    config = DemoConfig(
        dispatch=simulated_dispatch(upstream),
        keys_env=ENV,
        cors_origins=frozenset({"http://app.example"}),
    )
    return create_app(config)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def chat(client: FlaskClient, model: object = "gpt-demo", **headers: str) -> TestResponse:
    return client.post("/v1/chat/completions", json={"model": model}, headers=headers)


def chat_over_http(url: str) -> int:
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps({"model": "gpt-demo"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


@pytest.mark.usefixtures("enabled")
def test_revoked_key_rotates_and_is_cooled_for_every_model(client: FlaskClient) -> None:
    served = chat(client)  # key 1 answers 401, key 2 serves
    assert (served.status_code, served.headers["X-Upstream-Key-Index"]) == (200, "2")
    other = chat(client, "gpt-other")  # key 1 is skipped for every model
    assert (other.status_code, other.headers["X-Upstream-Key-Index"]) == (200, "2")
    assert model_cooldown.stats()["live_observations"] == 1


@pytest.mark.usefixtures("enabled")
def test_all_keys_cooling_gives_429_with_retry_after(client: FlaskClient) -> None:
    assert chat(client).status_code == 200  # key 2
    assert chat(client).status_code == 200  # key 2 throttled -> key 3
    passed_on = chat(client)  # key 3 throttled: no key left, the upstream's 429 is the answer
    assert (passed_on.status_code, passed_on.headers["Retry-After"]) == (429, "30")
    response = chat(client)  # every key cools: refused without a dispatch
    assert response.status_code == 429
    assert response.json is not None
    assert response.json["error"]["code"] == "model_cooldown"  # the OpenAI-style body
    assert response.headers["Retry-After"] == "30"
    assert chat(client, "gpt-other").status_code == 200


def test_flag_off_keeps_the_legacy_first_key_fallback(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    monkeypatch.setenv(ENV, KEYS[0])
    monkeypatch.setenv(f"{ENV}_1", KEYS[1])
    upstream = SimulatedUpstream(quota=1, window=30, clock=lambda: clock[0])
    client = create_app(DemoConfig(simulated_dispatch(upstream), keys_env=ENV)).test_client()
    assert [chat(client).status_code for _ in range(2)] == [200, 200]
    response = chat(client)  # both keys rest: the legacy pool hands back the first key
    assert response.status_code == 429
    assert response.json == {"error": {"message": "Rate limit reached for this model."}}
    assert response.headers["Retry-After"] == "30"


@pytest.mark.parametrize("model", [None, "", 5])
def test_a_model_is_required(client: FlaskClient, model: object) -> None:
    response = chat(client, model)
    assert response.status_code == 400
    assert response.json == {"error": "invalid_request", "message": "The JSON body needs a model."}


def test_no_configured_key_is_a_503(upstream: SimulatedUpstream) -> None:
    app = create_app(DemoConfig(dispatch=simulated_dispatch(upstream), keys_env="UNSET_KEYS"))
    response = chat(app.test_client())
    assert response.status_code == 503
    assert response.json is not None
    assert response.json["error"] == "no_upstream_key"


def test_unreachable_upstream_is_a_502(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, KEYS[1])

    def unreachable(*_: object) -> UpstreamReply:
        raise UpstreamUnreachable("ConnectionRefusedError")

    app = create_app(DemoConfig(dispatch=unreachable, keys_env=ENV))
    response = chat(app.test_client())
    assert response.status_code == 502
    assert response.json is not None
    assert response.json["message"] == "The server could not complete the request."


def test_cors_only_for_configured_origins(client: FlaskClient) -> None:
    allowed = client.options(
        "/v1/chat/completions",
        headers={"Origin": "http://app.example", "Access-Control-Request-Method": "POST"},
    )
    assert allowed.headers["Access-Control-Allow-Origin"] == "http://app.example"
    assert "POST" in allowed.headers["Access-Control-Allow-Methods"]
    other = chat(client, Origin="http://evil.example")
    assert "Access-Control-Allow-Origin" not in other.headers


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for flag in (
        "--host",
        "--port",
        "--upstream",
        "--keys-env",
        "--timeout",
        "--quota",
        "--window",
        "--revoked-key",
        "--cors-origin",
        "--bucket",
        "--error-format",
        "--rate-limit-headers",
        "--status-token",
    ):
        assert flag in text


def test_demo_starts_on_loopback(spawn: Callable[..., str]) -> None:
    url = spawn("cooldown.demo")
    assert url.startswith("http://127.0.0.1:")
    assert chat_over_http(url) == 200


@pytest.mark.usefixtures("enabled")
def test_a_stream_is_relayed_as_server_sent_events(client: FlaskClient) -> None:
    response = client.post("/v1/chat/completions", json={"model": "gpt-demo", "stream": True})
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    events = response.get_data(as_text=True).split("\n\n")
    assert events[0].startswith("data: {")
    assert "data: [DONE]" in events
    assert response.headers["X-Upstream-Key-Index"] == "2"  # key 1 is revoked


@pytest.mark.usefixtures("enabled")
def test_prompt_cache_key_keeps_a_conversation_on_one_key(
    upstream: SimulatedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.quota = 100
    upstream.revoked = frozenset()
    monkeypatch.setenv(ENV, KEYS[0])
    monkeypatch.setenv(f"{ENV}_1", KEYS[1])
    monkeypatch.setenv(f"{ENV}_2", KEYS[2])
    client = create_app(DemoConfig(simulated_dispatch(upstream), keys_env=ENV)).test_client()
    positions = {
        conversation: {
            client.post(
                "/v1/chat/completions",
                json={"model": "gpt-demo", "prompt_cache_key": conversation},
            ).headers["X-Upstream-Key-Index"]
            for _ in range(3)
        }
        for conversation in ("alpha", "beta", "gamma", "delta", "epsilon")
    }
    assert all(len(used) == 1 for used in positions.values())  # each sticks to one key
    assert len(set().union(*positions.values())) > 1  # and they are spread


def test_the_status_page_is_mounted_with_a_token(
    upstream: SimulatedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEYS[0])  # a provider without keys is left out of the summary
    token = "demo-status-token-" + "x" * 20
    app = create_app(DemoConfig(simulated_dispatch(upstream), keys_env=ENV, status_token=token))
    client = app.test_client()
    assert client.get("/cooldown/").status_code == 200
    summary = client.get("/cooldown/status", headers={"Authorization": f"Bearer {token}"})
    assert summary.status_code == 200
    assert "demo" in summary.json["providers"]  # type: ignore[index]
    closed = create_app(DemoConfig(simulated_dispatch(upstream), keys_env=ENV)).test_client()
    assert closed.get("/cooldown/status").status_code == 404


def test_the_demo_survives_a_key_rotated_away_mid_request(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from cooldown.demo import DemoConfig, create_app
    from cooldown.demo.upstream import SimulatedUpstream

    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv("ROTATE_DEMO_KEY", "sk-ROTATED-AWAY-0001")
    upstream = SimulatedUpstream(quota=5, window=30)

    def rotating_dispatch(key: str, model: str, body: Any) -> Any:
        monkeypatch.setenv("ROTATE_DEMO_KEY", "sk-the-new-key-0002")  # rotated mid-request
        return upstream.answer(key, model)

    app = create_app(DemoConfig(rotating_dispatch, keys_env="ROTATE_DEMO_KEY"))
    with caplog.at_level(logging.DEBUG):
        answer = app.test_client().post("/v1/chat/completions", json={"model": "gpt-demo"})
    assert answer.status_code == 200
    assert "X-Upstream-Key-Index" not in answer.headers
    assert "sk-ROTATED-AWAY-0001" not in caplog.text


def test_the_demo_answers_400_to_json_nested_too_deeply(monkeypatch: pytest.MonkeyPatch) -> None:
    from cooldown.demo import DemoConfig, SimulatedUpstream, create_app
    from cooldown.demo.gateway import simulated_dispatch

    app = create_app(DemoConfig(simulated_dispatch(SimulatedUpstream()), keys_env="NO_KEYS_HERE"))
    answer = app.test_client().post(
        "/v1/chat/completions", data=b"[" * 5000, content_type="application/json"
    )
    assert answer.status_code == 400
