"""Drain, undrain and clear over the status surface (real HTTP on loopback) and the CLI."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
import requests
from flask import Flask

from cooldown import CredentialPool, ModelCooldown, init_app, status_blueprint
from cooldown.shared.observations import RedisObservations

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-actions-one-0123456", "sk-actions-two-0123456", "sk-actions-three-01234"]
TOKEN = "actions-token-" + "0123456789" * 3
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "key-actions-secret-" + "s" * 32


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch, enabled: None) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])
    monkeypatch.setenv(f"{BASE}_2", KEYS[2])


def build_app() -> Flask:
    app = Flask("actions")
    init_app(app)
    app.register_blueprint(status_blueprint())
    return app


@pytest.fixture
def gateway(
    keys: None, monkeypatch: pytest.MonkeyPatch, serve_in_thread: Callable[[Flask], str]
) -> str:
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", TOKEN)
    return serve_in_thread(build_app()) + "/cooldown"


def label(position: int) -> str:
    return CredentialPool.status(P)["keys"][position - 1]["label"]


def test_drain_and_undrain_answer_the_new_key_row(gateway: str) -> None:
    answer = requests.post(f"{gateway}/keys/{P}/{label(1)}/drain", headers=AUTH, timeout=10)
    assert answer.status_code == 200
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.json()["state"] == "drained"
    assert answer.json()["label"] == label(1)
    assert CredentialPool.available(P, model="m") == KEYS[1:]
    answer = requests.post(f"{gateway}/keys/{P}/{label(1)}/undrain", headers=AUTH, timeout=10)
    assert answer.json()["state"] == "ready"
    assert CredentialPool.available(P, model="m") == KEYS


def test_clear_takes_an_optional_scope_in_its_json_body(gateway: str) -> None:
    for model in ("m", "n"):
        CredentialPool.record(P, KEYS[0], 429, model=model, retry_after_seconds=300)
    url = f"{gateway}/keys/{P}/{label(1)}/clear"
    answer = requests.post(url, headers=AUTH, json={"model": "m"}, timeout=10)
    assert answer.status_code == 200
    assert answer.json()["state"] == "ready"
    assert CredentialPool.available(P, model="n") == KEYS[1:]
    assert requests.post(url, headers=AUTH, timeout=10).status_code == 200  # no body: all
    assert CredentialPool.available(P, model="n") == KEYS


@pytest.mark.parametrize("body", ['{"model": 5}', '["m"]', "not json", '{"quota_bucket": ""}'])
def test_a_malformed_clear_scope_is_a_400_and_clears_nothing(gateway: str, body: str) -> None:
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=300)
    answer = requests.post(
        f"{gateway}/keys/{P}/{label(1)}/clear",
        headers={**AUTH, "Content-Type": "application/json"},
        data=body,
        timeout=10,
    )
    assert answer.status_code == 400
    assert CredentialPool.available(P, model="m") == KEYS[1:]


def test_unknown_labels_providers_and_actions_are_404(gateway: str) -> None:
    for path in (
        f"/keys/{P}/k-00000000/drain",
        f"/keys/no-such-provider/{label(1)}/drain",
        f"/keys/{P}/{label(1)}/delete",
    ):
        answer = requests.post(gateway + path, headers=AUTH, timeout=10)
        assert answer.status_code == 404, path
    assert CredentialPool.status(P)["drained"] == 0


def test_a_wrong_or_missing_token_is_401_and_get_changes_nothing(gateway: str) -> None:
    url = f"{gateway}/keys/{P}/{label(1)}/drain"
    wrong = {"Authorization": "Bearer " + "x" * 40}
    assert requests.post(url, headers=wrong, timeout=10).status_code == 401
    assert requests.post(url, timeout=10).status_code == 401
    assert requests.post(url, cookies={"token": TOKEN}, timeout=10).status_code == 401
    assert requests.post(f"{url}?token={TOKEN}", timeout=10).status_code == 401
    assert requests.get(url, headers=AUTH, timeout=10).status_code == 404
    assert CredentialPool.status(P)["drained"] == 0


def test_without_a_token_the_action_routes_do_not_exist(
    keys: None, serve_in_thread: Callable[[Flask], str]
) -> None:
    gateway = serve_in_thread(build_app()) + "/cooldown"
    answer = requests.post(f"{gateway}/keys/{P}/{label(1)}/drain", headers=AUTH, timeout=10)
    assert answer.status_code == 404
    assert CredentialPool.status(P)["drained"] == 0


def test_the_cli_drains_through_a_running_gateway(gateway: str) -> None:
    runner = build_app().test_cli_runner()
    result = runner.invoke(
        args=["cooldown", "drain", P, label(2), "--url", gateway],
        env={"MODEL_COOLDOWN_STATUS_TOKEN": TOKEN},
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["state"] == "drained"
    assert CredentialPool.available(P, model="m") == [KEYS[0], KEYS[2]]
    result = runner.invoke(
        args=["cooldown", "undrain", P, label(2), "--url", gateway, "--token", TOKEN]
    )
    assert json.loads(result.output)["state"] == "ready"


def test_the_cli_acts_on_the_shared_state_with_redis(
    keys: None, monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    for name, value in (
        ("MODEL_COOLDOWN_REDIS_URL", redis_url),
        ("MODEL_COOLDOWN_REDIS_SECRET", SECRET),
        ("MODEL_COOLDOWN_REDIS_PREFIX", prefix),
    ):
        monkeypatch.setenv(name, value)
    serving = ModelCooldown()  # a gateway worker: the CLI process has never served
    serving.attach_shared(RedisObservations(redis_url, prefix=prefix), secret=SECRET.encode())
    try:
        worker = CredentialPool(store=serving)
        worker.register(P, keys=KEYS)
        worker.record(P, KEYS[0], 429, model="m", retry_after_seconds=300)
        runner = build_app().test_cli_runner()
        result = runner.invoke(args=["cooldown", "clear", P, serving.operators.label(P, KEYS[0])])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["state"] == "ready"
        assert worker.available(P, model="m", now=time.monotonic() + 1) == KEYS
        result = runner.invoke(args=["cooldown", "drain", P, "k-00000000"])
        assert result.exit_code != 0
        assert "no key of this provider has that label" in result.output
    finally:
        backend = serving.detach_shared()
        assert isinstance(backend, RedisObservations)
        backend.close()


def test_the_cli_refuses_to_act_on_a_process_of_its_own(keys: None) -> None:
    result = build_app().test_cli_runner().invoke(args=["cooldown", "drain", P, label(1)])
    assert result.exit_code != 0
    assert "MODEL_COOLDOWN_REDIS_URL" in result.output
