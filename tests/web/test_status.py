"""Operator status: which key cools for which model, why and until when, and nothing secret."""

from __future__ import annotations

import hmac
import re

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families
from pytest_mock import MockerFixture

from cooldown import (
    CredentialPool,
    NanoGPTKeyPool,
    NanoGPTUnifiedKeyPool,
    init_app,
    model_cooldown,
    status_blueprint,
)

P = "ce-claude-max"
BASE = "CODEX_EVERYWHERE_API_KEY_CLAUDE_MAX"
KEYS = ["sk-ant-STATUS-key-one-0001", "sk-ant-STATUS-key-two-0002", "sk-ant-STATUS-key-three-03"]
MODEL = "claude-STATUS-model"
BUCKET = "STATUS-bucket"
TOKEN = "t" * 20 + "-status-token-0123456789"


@pytest.fixture
def three_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])
    monkeypatch.setenv(f"{BASE}_2", KEYS[2])


@pytest.fixture
def app(three_keys: None, monkeypatch: pytest.MonkeyPatch) -> Flask:
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", TOKEN)
    app = Flask("status")
    init_app(app)
    app.register_blueprint(status_blueprint())
    return app


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_scoped_status_names_positions_reasons_and_seconds(enabled: None, three_keys: None) -> None:
    CredentialPool.record(P, KEYS[0], 429, model=MODEL, retry_after_seconds=40, now=100)
    CredentialPool.record(P, KEYS[2], 401, model=MODEL, now=100)
    assert CredentialPool.status(P, model=MODEL, now=110) == {
        "provider": P,
        "keys": [
            {
                "index": 1,
                "label": model_cooldown.operators.label(P, KEYS[0]),
                "state": "cooling",
                "reason": "scope",
                "retry_after": 30,
                "scoped_cooldowns": 1,
                "account": None,
            },
            {
                "index": 2,
                "label": model_cooldown.operators.label(P, KEYS[1]),
                "state": "ready",
                "reason": None,
                "retry_after": None,
                "scoped_cooldowns": 0,
                "account": None,
            },
            {
                "index": 3,
                "label": model_cooldown.operators.label(P, KEYS[2]),
                "state": "cooling",
                "reason": "credential",
                "retry_after": 290,
                "scoped_cooldowns": 0,
                "account": None,
            },
        ],
        "ready": 1,
        "cooling": 2,
        "drained": 0,
        "cooling_some_models": 0,  # ready keys only: key 1 is cooling, not ready
        "accounts_cooling": 0,
        "refill": "unknown",
    }
    other_model = CredentialPool.status(P, model="another", now=110)
    assert [key["reason"] for key in other_model["keys"]] == [None, None, "credential"]
    unscoped = CredentialPool.status(P, now=110)  # the wide auth was mirrored for legacy
    assert [key["reason"] for key in unscoped["keys"]] == [None, None, "legacy"]


def test_legacy_status(three_keys: None) -> None:
    CredentialPool.record(P, KEYS[1], 429, now=0)
    status = CredentialPool.status(P, model=MODEL, now=10)  # flag off: legacy path
    assert status["keys"][1] == {
        "index": 2,
        "label": model_cooldown.operators.label(P, KEYS[1]),
        "state": "cooling",
        "reason": "legacy",
        "retry_after": 50,
        "scoped_cooldowns": 0,
        "account": None,
    }
    assert (status["ready"], status["cooling"]) == (2, 1)


def test_capacity_shows_on_keys_that_are_otherwise_ready(enabled: None, three_keys: None) -> None:
    for index in range(model_cooldown.capacity + 1):
        model_cooldown.record("filler", f"f{index}", _throttled(), model="m", now=0)
    status = CredentialPool.status(P, model=MODEL, now=1)
    assert {key["reason"] for key in status["keys"]} == {"capacity"}


def _throttled():  # type: ignore[no-untyped-def]
    from cooldown import classify_upstream_outcome

    return classify_upstream_outcome(429)


@pytest.mark.parametrize("pool", [NanoGPTKeyPool, NanoGPTUnifiedKeyPool])
def test_nanogpt_status_both_paths(enabled: None, pool: type[NanoGPTKeyPool]) -> None:
    keys = ["nano-STATUS-one-000", "nano-STATUS-two-000"]
    pool.record_result(keys[0], 429, model=MODEL, retry_after_seconds=20, now=0)
    pool.invalidate(keys[1], 401, now=0)  # unscoped: the legacy rejection map
    status = pool.status(keys, model=MODEL, now=5)
    assert status["provider"] == pool.namespace
    assert [(key["reason"], key["retry_after"]) for key in status["keys"]] == [
        ("scope", 15),
        ("legacy", 295),
    ]
    assert [key["reason"] for key in pool.status(keys, now=5)["keys"]] == [None, "legacy"]


def test_status_stores_nothing_and_counts_nothing(enabled: None, three_keys: None) -> None:
    CredentialPool.record(P, KEYS[0], 429, model=MODEL, now=0)
    before = (model_cooldown.stats(), CredentialPool._legacy.snapshot())
    for _ in range(3):
        CredentialPool.status(P, model=MODEL, now=1)
    assert (model_cooldown.stats(), CredentialPool._legacy.snapshot()) == before


# -- the HTTP surface ------------------------------------------------------------------------


ROUTES = ["/cooldown/", "/cooldown/status", f"/cooldown/status/{P}", "/cooldown/metrics"]
DATA_ROUTES = ROUTES[1:]


@pytest.mark.parametrize("route", ROUTES)
def test_no_token_configured_means_404_everywhere(three_keys: None, route: str) -> None:
    app = Flask("no-token")
    init_app(app)
    app.register_blueprint(status_blueprint())
    assert app.test_client().get(route, headers=AUTH).status_code == 404


def test_a_short_token_fails_at_registration(
    three_keys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", "short")
    with pytest.raises(ValueError, match="32 characters"):
        Flask("short-token").register_blueprint(status_blueprint())
    monkeypatch.delenv("MODEL_COOLDOWN_STATUS_TOKEN")
    app = Flask("short-config")
    app.config["MODEL_COOLDOWN_STATUS_TOKEN"] = "x" * 31
    with pytest.raises(ValueError, match="32 characters"):
        app.register_blueprint(status_blueprint())


@pytest.mark.parametrize("route", DATA_ROUTES)
@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-token-" + "x" * 30,
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN.lower()}X",
        f"Basic {TOKEN}",
        TOKEN,
    ],
)
def test_a_wrong_token_is_401_with_a_bearer_challenge(
    client: FlaskClient, route: str, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = client.get(route, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.headers["Cache-Control"] == "no-store"


def test_the_token_is_compared_in_constant_time(client: FlaskClient, mocker: MockerFixture) -> None:
    compare = mocker.spy(hmac, "compare_digest")
    assert client.get("/cooldown/status", headers=AUTH).status_code == 200
    assert compare.call_count == 1


def test_token_from_app_config(three_keys: None) -> None:
    app = Flask("configured")
    app.config["MODEL_COOLDOWN_STATUS_TOKEN"] = TOKEN
    app.register_blueprint(status_blueprint(url_prefix="/ops"))
    assert app.test_client().get("/ops/status", headers=AUTH).status_code == 200


def test_status_endpoints(client: FlaskClient, enabled: None) -> None:
    CredentialPool.record(P, KEYS[1], 429, model=MODEL, now=None)
    summary = client.get("/cooldown/status", headers=AUTH)
    assert summary.status_code == 200
    assert summary.headers["Cache-Control"] == "no-store"
    assert summary.json is not None
    assert summary.json["live_observations"] == 1
    assert summary.json["providers"] == {  # built-in providers without keys are left out
        P: {
            "all_cooling_scopes": 0,
            "clients_get_429_for": [],
            "keys": 3,
            "ready": 3,
            "cooling": 0,
            "cooling_some_models": 1,
            "scoped_cooldowns": 1,
        }
    }
    keys = client.get(f"/cooldown/status/{P}?model={MODEL}", headers=AUTH).json
    assert keys is not None
    assert [key["state"] for key in keys["keys"]] == ["ready", "cooling", "ready"]
    assert client.get("/cooldown/status/nope", headers=AUTH).status_code == 404


def test_the_page_holds_no_data_and_a_strict_policy(client: FlaskClient) -> None:
    page = client.get("/cooldown/")
    assert page.status_code == 200
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "unsafe-inline" not in policy
    assert "connect-src 'self'" in policy
    text = page.get_data(as_text=True)
    assert not re.search(r"(src|href)=\"?(https?:)?//", text)  # no external assets
    assert page.headers["Cache-Control"] == "no-store"


def test_metrics_parse_as_prometheus_text(client: FlaskClient, enabled: None) -> None:
    CredentialPool.record(P, KEYS[0], 429, model=MODEL)
    response = client.get("/cooldown/metrics", headers=AUTH)
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.get_data(as_text=True))}
    assert families["model_cooldown_recorded"].type == "counter"
    assert families["model_cooldown_recorded"].samples[0].value == 1
    assert families["model_cooldown_live_observations"].samples[0].value == 1
    ready = [
        s
        for s in families["model_cooldown_keys"].samples
        if s.labels == {"provider": P, "state": "ready"}
    ]
    assert ready[0].value == 3


def test_metrics_without_prometheus_client_explain_the_extra(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    response = client.get("/cooldown/metrics", headers=AUTH)
    assert response.status_code == 501
    assert "model-cooldown[metrics]" in response.get_data(as_text=True)


def test_flask_cooldown_status_cli_refuses_to_guess(app: Flask, enabled: None) -> None:
    CredentialPool.record(P, KEYS[2], 429, model=MODEL)
    result = app.test_cli_runner().invoke(args=["cooldown", "status"])
    assert result.exit_code != 0
    assert "Cooldowns live in each server process" in result.output


def test_nothing_secret_in_any_status_response(
    client: FlaskClient, app: Flask, enabled: None
) -> None:
    CredentialPool.record(P, KEYS[0], 429, model=MODEL)
    CredentialPool.record(P, KEYS[1], 429, quota_bucket=BUCKET)
    CredentialPool.record(P, KEYS[2], 401, model=MODEL)
    bodies = [
        client.get(route, headers=AUTH).get_data(as_text=True)
        for route in [*ROUTES, f"/cooldown/status/{P}?model={MODEL}&quota_bucket={BUCKET}"]
    ]
    digests = [model_cooldown.credential_id(P, key) for key in KEYS]
    dump = "\n".join(bodies)
    fragments = {key[i : i + 8] for key in KEYS for i in range(len(key) - 7)}
    assert not [fragment for fragment in fragments if fragment in dump]
    for secret in [MODEL, BUCKET, *digests, *(digest[:16] for digest in digests)]:
        assert secret not in dump
