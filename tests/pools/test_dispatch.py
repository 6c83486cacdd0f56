"""`CredentialPool.dispatch` over the real responses of requests, httpx, urllib3, http.client."""

from __future__ import annotations

import http.client
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any
from unittest.mock import Mock

import httpx
import pytest
import requests
import urllib3
from flask import Flask, Response, request
from werkzeug.serving import make_server

from cooldown import (
    CredentialPool,
    ModelCooldownExhausted,
    init_app,
    model_cooldown,
    upstream_model,
)

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-one", "sk-two", "sk-three"]


class Upstream:
    """A loopback provider whose answer per key is set by the test; it counts each call."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, dict[str, str]]] = {}
        self.calls: list[str] = []
        app = Flask("upstream")

        @app.post("/v1/chat/completions")
        def chat() -> Response:
            key = request.headers.get("Authorization", "").removeprefix("Bearer ")
            self.calls.append(key)
            status, headers = self.answers.get(key, (200, {}))
            body = json.dumps({"served_by": key, "chunks": ["x" * 1000] * 50})
            return Response(body, status=status, headers=headers, mimetype="application/json")

        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}/v1/chat/completions"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    served = Upstream()
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    for number, key in enumerate(KEYS[1:], start=1):
        monkeypatch.setenv(f"{BASE}_{number}", key)


BODY = {"model": "gpt-4o", "messages": []}


def with_requests(upstream: Upstream) -> Callable[[str], Any]:
    return lambda key: requests.post(
        upstream.url, json=BODY, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )


def with_httpx(upstream: Upstream) -> Callable[[str], Any]:
    return lambda key: httpx.post(
        upstream.url, json=BODY, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )


def with_urllib3(upstream: Upstream) -> Callable[[str], Any]:
    manager = urllib3.PoolManager()
    return lambda key: manager.request(
        "POST",
        upstream.url,
        body=json.dumps(BODY),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )


def with_http_client(upstream: Upstream) -> Callable[[str], Any]:
    def send(key: str) -> http.client.HTTPResponse:
        connection = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=10)
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(BODY),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        return connection.getresponse()

    return send


def body_of(response: Any) -> dict[str, Any]:
    if isinstance(response, http.client.HTTPResponse):
        return json.loads(response.read())  # type: ignore[no-any-return]
    if isinstance(response, urllib3.BaseHTTPResponse):
        return json.loads(response.data)  # type: ignore[no-any-return]
    return response.json()  # type: ignore[no-any-return]


CLIENTS = [with_requests, with_httpx, with_urllib3, with_http_client]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_throttled_key_rotates_to_the_next(
    enabled: None, pool: None, upstream: Upstream, client: Callable[[Upstream], Any]
) -> None:
    upstream.answers[KEYS[0]] = (429, {"Retry-After": "30"})
    response = CredentialPool.dispatch(P, client(upstream), model="gpt-4o")
    assert response is not None
    assert response_status(response) == 200
    assert body_of(response)["served_by"] == KEYS[1]
    assert upstream.calls == KEYS[:2]
    assert CredentialPool.select(P, model="gpt-4o") == KEYS[1]  # the first key cools
    assert CredentialPool.select(P, model="gpt-4o-mini") == KEYS[0]  # for that model only


def response_status(response: Any) -> int:
    return getattr(response, "status_code", None) or response.status  # type: ignore[no-any-return]


@pytest.mark.parametrize("client", CLIENTS)
def test_every_key_at_most_once_then_the_last_answer(
    enabled: None, pool: None, upstream: Upstream, client: Callable[[Upstream], Any]
) -> None:
    for key in KEYS:
        upstream.answers[key] = (403, {})  # a 403 without wide auth cools nothing
    response = CredentialPool.dispatch(P, client(upstream), model="gpt-4o")
    assert response_status(response) == 403
    assert upstream.calls == KEYS


def test_the_legacy_path_rotates_with_the_legacy_rules(pool: None, upstream: Upstream) -> None:
    upstream.answers[KEYS[0]] = (401, {})
    upstream.answers[KEYS[1]] = (429, {})
    response = CredentialPool.dispatch(P, with_requests(upstream), model="gpt-4o")
    assert response is not None
    assert response.json()["served_by"] == KEYS[2]
    assert set(CredentialPool._legacy.snapshot()) == {(P, KEYS[0]), (P, KEYS[1])}
    assert model_cooldown.entry_count == 0  # flag off: the store is untouched
    for key in KEYS:
        upstream.answers[key] = (429, {})
    upstream.calls.clear()
    response = CredentialPool.dispatch(P, with_requests(upstream))
    assert upstream.calls == [KEYS[2]]  # the only key not resting; then none is left
    upstream.calls.clear()
    response = CredentialPool.dispatch(P, with_requests(upstream))
    assert upstream.calls == [KEYS[0]]  # every key rests: the legacy fallback, once
    assert response is not None
    assert response.status_code == 429


def test_a_cooldown_before_any_attempt_propagates_and_sends_nothing(
    enabled: None, pool: None
) -> None:
    for key in KEYS:
        CredentialPool.record(P, key, 429, model="gpt-4o")
    send = Mock()
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.dispatch(P, send, model="gpt-4o")
    send.assert_not_called()


def test_after_a_throttle_every_key_cooling_is_our_429_not_the_upstreams(
    enabled: None, pool: None, upstream: Upstream
) -> None:
    for key in KEYS[1:]:
        CredentialPool.record(P, key, 429, model="gpt-4o", retry_after_seconds=40)
    upstream.answers[KEYS[0]] = (429, {"Retry-After": "90"})
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.dispatch(P, with_requests(upstream), model="gpt-4o")
    assert raised.value.retry_after in (39, 40)  # the soonest release, not the last 429's
    assert upstream.calls == [KEYS[0]]


def test_no_configured_key_returns_none_without_sending(enabled: None) -> None:
    send = Mock()
    assert CredentialPool.dispatch(P, send, model="gpt-4o") is None
    send.assert_not_called()


def test_a_transport_error_cools_nothing_and_is_reraised(enabled: None, pool: None) -> None:
    def refused(key: str) -> Any:
        return requests.post("http://127.0.0.1:9/", timeout=1)

    with pytest.raises(requests.ConnectionError):
        CredentialPool.dispatch(P, refused, model="gpt-4o")
    assert model_cooldown.entry_count == 0
    assert CredentialPool._legacy.snapshot() == {}


def test_a_served_response_with_a_spent_window_is_returned_and_cools_its_key(
    enabled: None, pool: None, upstream: Upstream
) -> None:
    spent = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20s"}
    upstream.answers[KEYS[0]] = (200, spent)
    response = CredentialPool.dispatch(P, with_httpx(upstream), model="gpt-4o")
    assert response is not None
    assert response.status_code == 200
    assert upstream.calls == [KEYS[0]]  # served: never sent again
    assert CredentialPool.select(P, model="gpt-4o") == KEYS[1]


def test_a_streaming_body_is_left_unread(enabled: None, pool: None, upstream: Upstream) -> None:
    def stream(key: str) -> requests.Response:
        return requests.post(
            upstream.url,
            json=BODY,
            headers={"Authorization": f"Bearer {key}"},
            stream=True,
            timeout=10,
        )

    response = CredentialPool.dispatch(P, stream, model="gpt-4o")
    assert response is not None
    assert response._content_consumed is False  # type: ignore[attr-defined]
    assert json.loads(b"".join(response.iter_content(1024)))["served_by"] == KEYS[0]


def test_quota_buckets_from_app_config(enabled: None, pool: None, upstream: Upstream) -> None:
    app = Flask("buckets")
    app.config["MODEL_COOLDOWN_QUOTA_BUCKETS"] = {P: {"gpt-4o": "tier", "gpt-4o-mini": "tier"}}
    upstream.answers[KEYS[0]] = (429, {})
    with app.app_context():
        CredentialPool.dispatch(P, with_requests(upstream), model="gpt-4o")
        # The bucket is shared: the sibling model skips the first key too.
        assert CredentialPool.select(P, model="gpt-4o-mini", quota_bucket="tier") == KEYS[1]
    assert CredentialPool.select(P, model="gpt-4o-mini") == KEYS[0]  # outside: no bucket


@pytest.mark.parametrize("buckets", ["tier", ["x"], {P: 5}, {P: {"gpt-4o": 5}}, {5: "tier"}])
def test_malformed_app_config_buckets_warn_at_init_app_and_never_fail_a_request(
    enabled: None,
    pool: None,
    upstream: Upstream,
    buckets: object,
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
) -> None:
    app = Flask("bad-buckets")
    app.config["MODEL_COOLDOWN_QUOTA_BUCKETS"] = buckets
    with caplog.at_level(logging.WARNING, "cooldown"):
        init_app(app)
        warned_at_init = [r for r in caplog.records if "QUOTA_BUCKETS" in r.getMessage()]
        with app.app_context():
            answer = CredentialPool.dispatch(P, with_requests(upstream), model="gpt-4o")
    assert answer is not None
    assert answer.status_code == 200
    assert len(warned_at_init) == 1
    assert "tier" not in caplog.text


def test_a_wrong_quota_buckets_argument_is_a_type_error(enabled: None, pool: None) -> None:
    with pytest.raises(TypeError, match="quota_buckets"):
        CredentialPool.dispatch(P, Mock(), model="gpt-4o", quota_buckets="tier")  # type: ignore[arg-type]


def test_send_returning_none_is_a_type_error_naming_send(pool: None) -> None:
    with pytest.raises(TypeError, match=r"send\(\) returned None"):
        CredentialPool.dispatch(P, lambda key: None)


@pytest.mark.parametrize(
    ("body", "path", "model"),
    [
        ({"model": "gpt-4o"}, None, "gpt-4o"),
        ({"model": ""}, "/v1beta/models/gemini-2.0-flash:generateContent", "gemini-2.0-flash"),
        (None, "/v1beta/models/gemini-1.5-pro:streamGenerateContent", "gemini-1.5-pro"),
        ({"model": 5}, "/v1/chat/completions", None),
        (["gpt-4o"], "models/x", "x"),
        (None, "/v1/models/gpt-4o", "gpt-4o"),
        (None, "/v1/models/gpt-4o/", "gpt-4o"),
        (None, "/v1/models/", None),
        (None, "/v1/models/a:b:c", None),
        (None, "/v1beta/models/:generateContent", None),
        (None, None, None),
    ],
)
def test_upstream_model(body: object, path: object, model: str | None) -> None:
    assert upstream_model(body, path) == model


def test_adispatch_with_a_plain_send_says_to_use_dispatch(pool: None) -> None:
    import asyncio

    class Resp:
        status_code = 200
        headers: dict[str, str] = {}  # noqa: RUF012

    with pytest.raises(TypeError, match="use dispatch"):
        asyncio.run(CredentialPool.adispatch(P, lambda key: Resp(), model="gpt-4o"))  # type: ignore[arg-type, return-value]
