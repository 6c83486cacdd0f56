"""Operator truth: per-model cooldowns in every summary, the catalog matrix, the
alerting metric, the CLI that reads where the state really is, and 404 everywhere."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
from flask import Blueprint, Flask
from flask.testing import FlaskClient

from cooldown import CredentialPool, init_app, model_cooldown, status_blueprint

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-truth-one", "sk-truth-two", "sk-truth-three"]
TOKEN = "truth-token-" + "0123456789" * 3
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def three_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])
    monkeypatch.setenv(f"{BASE}_2", KEYS[2])


@pytest.fixture
def app(three_keys: None, enabled: None, monkeypatch: pytest.MonkeyPatch) -> Flask:
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", TOKEN)
    app = Flask("truth")
    app.config["MODEL_COOLDOWN_STATUS_MODELS"] = ["gpt-4o", "gpt-4o-mini", "gpt-4.1"]
    app.config["MODEL_COOLDOWN_QUOTA_BUCKETS"] = {P: {"gpt-4o-mini": "mini-tier"}}
    init_app(app)
    app.register_blueprint(status_blueprint())
    return app


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not exposed")


def test_per_model_cooldowns_show_in_the_unscoped_summary(client: FlaskClient) -> None:
    for key in KEYS[:2]:
        CredentialPool.record(P, key, 429, model="gpt-4o", retry_after_seconds=60)
    CredentialPool.record(P, KEYS[0], 429, model="o1", retry_after_seconds=60)
    status = CredentialPool.status(P)
    assert (status["ready"], status["cooling"], status["cooling_some_models"]) == (3, 0, 2)
    assert [key["scoped_cooldowns"] for key in status["keys"]] == [2, 1, 0]
    assert [key["state"] for key in status["keys"]] == ["ready"] * 3  # unscoped: unchanged
    summary = client.get("/cooldown/status", headers=AUTH).json
    assert summary is not None
    assert summary["providers"][P]["cooling_some_models"] == 2
    assert summary["providers"][P]["scoped_cooldowns"] == 3


def test_the_alerting_metric_rises_with_only_per_model_cooldowns(client: FlaskClient) -> None:
    before = client.get("/cooldown/metrics", headers=AUTH).get_data(as_text=True)
    some = f'model_cooldown_keys{{provider="{P}",state="cooling_some_models"}}'
    scoped = f'model_cooldown_scoped_cooldowns{{provider="{P}"}}'
    assert metric(before, some) == 0
    CredentialPool.record(P, KEYS[1], 429, model="gpt-4o", retry_after_seconds=60)
    CredentialPool.record(P, KEYS[1], 429, model="gpt-4.1", retry_after_seconds=60)
    after = client.get("/cooldown/metrics", headers=AUTH).get_data(as_text=True)
    assert metric(after, some) == 1
    assert metric(after, scoped) == 2
    assert metric(after, f'model_cooldown_keys{{provider="{P}",state="cooling"}}') == 0


def test_providers_without_keys_are_left_out_everywhere(client: FlaskClient) -> None:
    summary = client.get("/cooldown/status", headers=AUTH).json
    assert summary is not None
    assert list(summary["providers"]) == [P]
    metrics = client.get("/cooldown/metrics", headers=AUTH).get_data(as_text=True)
    assert "ce-gpt-plus" not in metrics
    assert "ce-image" not in metrics


def test_metrics_send_one_content_type_with_one_charset(client: FlaskClient) -> None:
    answer = client.get("/cooldown/metrics", headers=AUTH)
    assert answer.headers.getlist("Content-Type") == ["text/plain; version=1.0.0; charset=utf-8"]


def test_the_catalog_matrix_in_catalog_order(client: FlaskClient) -> None:
    CredentialPool.record(P, KEYS[0], 429, model="gpt-4o", retry_after_seconds=60)
    CredentialPool.record(P, KEYS[2], 429, quota_bucket="mini-tier", retry_after_seconds=60)
    answer = client.get(f"/cooldown/status/{P}?all=1", headers=AUTH).json
    assert answer is not None
    assert answer["provider"] == P
    assert [row["model"] for row in answer["matrix"]] == ["gpt-4o", "gpt-4o-mini", "gpt-4.1"]
    assert [(row["ready"], row["cooling"]) for row in answer["matrix"]] == [
        (2, 1),
        (2, 1),  # gpt-4o-mini shares the mini-tier bucket the third key is cooling for
        (3, 0),
    ]
    assert [key["state"] for key in answer["matrix"][1]["keys"]] == ["ready", "ready", "cooling"]
    posted = client.post(f"/cooldown/status/{P}", json={"all": True}, headers=AUTH).json
    assert posted == answer


def test_the_catalog_from_the_environment(
    client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    del app.config["MODEL_COOLDOWN_STATUS_MODELS"]
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_MODELS", " o3 , gpt-4o,,o3")
    answer = client.get(f"/cooldown/status/{P}?all=1", headers=AUTH).json
    assert answer is not None
    assert [row["model"] for row in answer["matrix"]] == ["o3", "gpt-4o"]


def test_a_post_answers_exactly_as_the_get_does(client: FlaskClient) -> None:
    CredentialPool.record(P, KEYS[1], 429, model="gpt-4o", now=None)
    got = client.get(f"/cooldown/status/{P}?model=gpt-4o", headers=AUTH).json
    posted = client.post(f"/cooldown/status/{P}", json={"model": "gpt-4o"}, headers=AUTH).json
    assert got == posted
    assert posted is not None
    assert posted["keys"][1]["reason"] == "scope"
    bucket = client.post(f"/cooldown/status/{P}", json={"quota_bucket": "b"}, headers=AUTH)
    assert bucket.status_code == 200


EVERYWHERE = [
    ("GET", "/cooldown"),
    ("GET", "/cooldown/"),
    ("POST", "/cooldown/"),
    ("PUT", "/cooldown/status"),
    ("DELETE", f"/cooldown/status/{P}"),
    ("OPTIONS", "/cooldown/status"),
    ("PATCH", "/cooldown/metrics"),
    ("GET", "/cooldown/elsewhere/deep"),
    ("HEAD", "/cooldown/status"),
]


@pytest.mark.parametrize(("method", "path"), EVERYWHERE)
def test_no_token_means_404_for_every_method_and_path(
    three_keys: None, method: str, path: str
) -> None:
    app = Flask("no-token")
    init_app(app)
    app.register_blueprint(status_blueprint())
    answer = app.test_client().open(path, method=method)
    assert answer.status_code == 404
    assert "Allow" not in answer.headers
    assert "Location" not in answer.headers
    assert answer.headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(("method", "path"), EVERYWHERE[3:])
def test_with_a_token_wrong_methods_are_not_found_and_never_cached(
    client: FlaskClient, method: str, path: str
) -> None:
    answer = client.open(path, method=method, headers=AUTH)
    assert answer.status_code == 404 or (method == "HEAD" and answer.status_code == 200)
    assert answer.headers["Cache-Control"] == "no-store"
    assert "Allow" not in answer.headers


@pytest.mark.parametrize("nested", [False, True])
def test_a_renamed_or_nested_blueprint_still_opens_its_page(
    three_keys: None, monkeypatch: pytest.MonkeyPatch, nested: bool
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", TOKEN)
    app = Flask("nested")
    if nested:
        parent = Blueprint("ops", __name__, url_prefix="/ops")
        parent.register_blueprint(status_blueprint(url_prefix="/cooldown"))
        app.register_blueprint(parent)
        prefix = "/ops/cooldown"
    else:
        app.register_blueprint(status_blueprint(url_prefix="/status-x"), name="renamed")
        prefix = "/status-x"
    client = app.test_client()
    assert client.get(prefix + "/").status_code == 200
    assert client.get(prefix + "/status").status_code == 401
    assert client.get(prefix + "/status", headers=AUTH).status_code == 200


def test_the_cli_needs_shared_state_or_a_gateway(app: Flask) -> None:
    result = app.test_cli_runner().invoke(args=["cooldown", "status", P])
    assert result.exit_code != 0
    assert "Cooldowns live in each server process" in result.output
    assert "--url" in result.output


def test_the_cli_reads_a_running_gateway(
    app: Flask, serve_in_thread: Callable[[Flask], str]
) -> None:
    CredentialPool.record(P, KEYS[0], 429, model="gpt-4o", retry_after_seconds=60)
    url = serve_in_thread(app) + "/cooldown"
    runner = app.test_cli_runner()
    model_cooldown.reset()  # what the CLI prints can only come from the server now
    CredentialPool.record(P, KEYS[2], 429, model="gpt-4o", retry_after_seconds=60)
    keys = runner.invoke(
        args=["cooldown", "status", P, "--model", "gpt-4o", "--url", url, "--token", TOKEN]
    )
    assert keys.exit_code == 0, keys.output
    assert [key["state"] for key in json.loads(keys.output)["keys"]] == [
        "ready",
        "ready",
        "cooling",
    ]
    summary = runner.invoke(
        args=["cooldown", "status", "--url", url], env={"MODEL_COOLDOWN_STATUS_TOKEN": TOKEN}
    )
    assert summary.exit_code == 0, summary.output
    assert json.loads(summary.output)["providers"][P]["cooling_some_models"] == 1
    refused = runner.invoke(args=["cooldown", "status", "--url", url, "--token", "x" * 40])
    assert refused.exit_code != 0
    assert "401" in refused.output
    first = list(json.loads(summary.output)["providers"][P])
    assert first[:2] == ["all_cooling_scopes", "clients_get_429_for"]  # what clients meet
    assert next(iter(json.loads(summary.output))) == "providers"


def test_the_cli_prints_the_gateways_own_words_and_a_refused_connection(
    app: Flask, serve_in_thread: Callable[[Flask], str]
) -> None:
    url = serve_in_thread(app) + "/cooldown"
    runner = app.test_cli_runner()
    unknown = runner.invoke(
        args=["cooldown", "drain", P, "k-00000000", "--url", url, "--token", TOKEN]
    )
    assert unknown.exit_code != 0
    assert "HTTP 404: No key of this provider has that label." in unknown.output
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/cooldown"
    refused = runner.invoke(args=["cooldown", "status", "--url", closed, "--token", TOKEN])
    assert refused.exit_code != 0
    assert "could not be reached (Connection refused)" in refused.output


@pytest.fixture
def server_sharing_redis(
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    prefix: str,
    worker_processes: Callable[..., list],  # type: ignore[type-arg]
) -> Any:
    """A gateway process holding the three keys, sharing its state through Redis with this
    process (whose settings now name the same Redis)."""
    shared = {
        "MODEL_COOLDOWN_ENABLED": "true",
        "MODEL_COOLDOWN_REDIS_URL": redis_url,
        "MODEL_COOLDOWN_REDIS_SECRET": "cli-secret-" + "x" * 30,
        "MODEL_COOLDOWN_REDIS_PREFIX": prefix,
    }
    keys = {BASE: KEYS[0], f"{BASE}_1": KEYS[1], f"{BASE}_2": KEYS[2]}
    (server,) = worker_processes(1, {**shared, **keys})
    for name, value in shared.items():
        monkeypatch.setenv(name, value)
    return server


def test_the_cli_reads_the_shared_state(app: Flask, server_sharing_redis: Any) -> None:
    server_sharing_redis(
        "record", provider=P, key=KEYS[1], status=429, scope={"model": "gpt-4o"}, now=None
    )
    result = app.test_cli_runner().invoke(args=["cooldown", "status", P, "--model", "gpt-4o"])
    assert result.exit_code == 0, result.output
    assert [key["state"] for key in json.loads(result.output)["keys"]] == [
        "ready",
        "cooling",
        "ready",
    ]
    unscoped = app.test_cli_runner().invoke(args=["cooldown", "status", P])
    assert [key["scoped_cooldowns"] for key in json.loads(unscoped.output)["keys"]] == [
        0,
        1,
        0,
    ]


def test_the_cli_names_a_quota_another_process_saw_spent(
    app: Flask, server_sharing_redis: Any
) -> None:
    server_sharing_redis(
        "record",
        provider=P,
        key=KEYS[2],
        status=402,
        quota_spent=True,
        scope={"model": "gpt-4o"},
        now=None,
    )
    result = app.test_cli_runner().invoke(args=["cooldown", "status", P, "--model", "o3"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["keys"]
    assert [key["reason"] for key in rows] == [None, None, "quota"]  # every model
    assert rows[2]["note"] == (
        "out of quota (credit or a daily limit): add credit, or clear it after topping up"
    )
    assert not any(key in result.output for key in KEYS)


# -- odd methods, odd bodies, odd tokens, redirects ---------------------------------------------

ODD_METHODS = [
    ("TRACE", "/cooldown/status"),
    ("PROPFIND", "/cooldown/status"),
    ("CONNECT", "/cooldown/metrics"),
    ("MKCOL", f"/cooldown/status/{P}"),
    ("GET", "/cooldown//status"),
    ("GET", "/cooldown//metrics"),
]


@pytest.mark.parametrize(("method", "path"), ODD_METHODS)
@pytest.mark.parametrize("token", [False, True])
def test_odd_methods_and_doubled_slashes_are_404_never_405_or_308_and_never_cached(
    three_keys: None, monkeypatch: pytest.MonkeyPatch, method: str, path: str, token: bool
) -> None:
    if token:
        monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", TOKEN)
    app = Flask("odd")
    init_app(app)
    app.register_blueprint(status_blueprint())

    @app.route("/elsewhere", methods=["GET"])
    def elsewhere() -> str:
        return "the app's own"

    answer = app.test_client().open(path, method=method, headers=AUTH if token else {})
    assert answer.status_code == 404
    assert "Allow" not in answer.headers
    assert "Location" not in answer.headers
    assert answer.headers["Cache-Control"] == "no-store"
    assert app.test_client().open("/elsewhere", method="TRACE").status_code == 405  # not ours


def test_deeply_nested_json_is_no_500(client: FlaskClient) -> None:
    answer = client.post(
        f"/cooldown/status/{P}",
        data="[" * 100_000 + "]" * 100_000,
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert answer.status_code == 200  # an unusable body is no lookup: the unscoped status


def test_a_non_ascii_token_is_refused_at_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", "é" * 40)
    with pytest.raises(ValueError, match="ASCII"):
        Flask("non-ascii").register_blueprint(status_blueprint())


def test_the_cli_never_follows_a_redirect_with_the_token(
    app: Flask, serve_in_thread: Callable[[Flask], str]
) -> None:
    seen: list[str] = []
    elsewhere = Flask("elsewhere")

    @elsewhere.route("/cooldown/status", methods=["GET", "POST"])
    def collect() -> dict[str, str]:
        from flask import request

        seen.append(request.headers.get("Authorization", ""))
        return {"providers": "not the gateway's"}

    target = serve_in_thread(elsewhere)
    redirector = Flask("redirector")

    @redirector.route("/cooldown/status")
    def moved() -> tuple[str, int, dict[str, str]]:
        return "", 302, {"Location": target + "/cooldown/status"}

    url = serve_in_thread(redirector) + "/cooldown"
    result = app.test_cli_runner().invoke(
        args=["cooldown", "status", "--url", url, "--token", TOKEN]
    )
    assert result.exit_code != 0
    assert "redirect" in result.output
    assert seen == []  # the token went nowhere else


# -- what clients meet first, one set of counts ---------------------------------------


def test_the_summary_leads_with_the_scopes_where_every_key_cools(client: FlaskClient) -> None:
    for key in KEYS:
        CredentialPool.record(P, key, 429, model="gpt-4o", retry_after_seconds=60)
    CredentialPool.record(P, KEYS[0], 429, model="gpt-4.1", retry_after_seconds=60)  # one key of 3
    summary = client.get("/cooldown/status", headers=AUTH).json
    assert summary is not None
    counts = summary["providers"][P]
    assert counts["all_cooling_scopes"] == 1
    assert counts["clients_get_429_for"] == ["gpt-4o"]  # in catalog order, gpt-4.1 still served
    assert summary["fleet"] is None  # no sharing: no fleet


def test_a_key_cooling_everywhere_counts_in_every_scope(client: FlaskClient) -> None:
    CredentialPool.record(P, KEYS[0], 401, model="gpt-4o")  # credential-wide
    for key in KEYS[1:]:
        CredentialPool.record(P, key, 429, model="gpt-4.1", retry_after_seconds=60)
    counts = client.get("/cooldown/status", headers=AUTH).json["providers"][P]  # type: ignore[index]
    assert counts["all_cooling_scopes"] == 1  # gpt-4.1: keys 2 and 3 for it, key 1 everywhere
    assert counts["clients_get_429_for"] == ["gpt-4.1"]
    for key in KEYS[1:]:
        CredentialPool.record(P, key, 401, model="gpt-4.1")
    counts = client.get("/cooldown/status", headers=AUTH).json["providers"][P]  # type: ignore[index]
    assert counts["all_cooling_scopes"] >= 1
    assert counts["clients_get_429_for"] == [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4.1",
    ]  # every key, everywhere


@pytest.mark.parametrize("model", [None, "gpt-4o", "gpt-4.1"])
def test_one_consistent_set_of_counts(client: FlaskClient, model: str | None) -> None:
    CredentialPool.record(P, KEYS[0], 401, model="gpt-4o")
    CredentialPool.record(P, KEYS[1], 429, model="gpt-4o", retry_after_seconds=60)
    CredentialPool.record(P, KEYS[2], 429, model="gpt-4.1", retry_after_seconds=60)
    status = CredentialPool.status(P, model=model)
    ready = [key for key in status["keys"] if key["state"] == "ready"]
    assert status["ready"] + status["cooling"] == len(status["keys"])
    assert status["cooling_some_models"] == sum(1 for key in ready if key["scoped_cooldowns"])
