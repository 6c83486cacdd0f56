"""Two processes with different `MODEL_COOLDOWN_REDIS_SECRET`s on one prefix share nothing;
the second to attach says so once, through `{prefix}:secret-check`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask

from cooldown import CredentialPool, ModelCooldown, init_app, model_cooldown, status_blueprint
from cooldown.shared.observations import RedisObservations

from ..conftest import free_port

SECRET = "s" * 32
OTHER = "o" * 32


def attached(redis_url: str, prefix: str, secret: str) -> RedisObservations:
    backend = RedisObservations(redis_url, prefix=prefix)
    ModelCooldown().attach_shared(backend, secret=secret.encode())
    return backend


def test_the_first_writer_wins_and_a_different_secret_is_told_once(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    first, second, third = (attached(redis_url, prefix, s) for s in (SECRET, OTHER, SECRET))
    with caplog.at_level(logging.WARNING, "cooldown"):
        assert first.check_secret(SECRET.encode()) is True
        assert second.check_secret(OTHER.encode()) is False
        assert second.check_secret(OTHER.encode()) is False
        assert third.check_secret(SECRET.encode()) is True
    split = [r for r in caplog.records if "split" in r.getMessage()]
    assert len(split) == 1
    assert "MODEL_COOLDOWN_REDIS_SECRET" in split[0].getMessage()
    assert SECRET not in caplog.text
    assert OTHER not in caplog.text
    for backend in (first, second, third):
        backend.close()


def test_the_check_value_is_an_hmac_not_the_secret(redis_url: str, prefix: str) -> None:
    import redis

    backend = attached(redis_url, prefix, SECRET)
    backend.check_secret(SECRET.encode())
    client = redis.Redis.from_url(redis_url)
    stored = client.get(f"{{{prefix}}}:secret-check")
    client.close()
    backend.close()
    assert stored is not None
    assert SECRET.encode() not in stored
    assert len(stored) == 64  # hex SHA-256


def test_a_pool_attaching_with_another_secret_warns(
    redis_url: str,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
) -> None:
    attached(redis_url, prefix, SECRET).check_secret(SECRET.encode())  # another host, first
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL", "sk-one")
    for name, value in {
        "MODEL_COOLDOWN_ENABLED": "true",
        "MODEL_COOLDOWN_REDIS_URL": redis_url,
        "MODEL_COOLDOWN_REDIS_SECRET": OTHER,
        "MODEL_COOLDOWN_REDIS_PREFIX": prefix,
    }.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, "cooldown"):
        assert CredentialPool.select("ce-gpt-plus", model="gpt-4o") == "sk-one"
    assert [r for r in caplog.records if "split" in r.getMessage()]
    assert model_cooldown.stats()["shared_split"] is True  # said in stats, not only logged
    app = Flask("split")
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", "split-status-token-0123456789abcdef")
    init_app(app)
    app.register_blueprint(status_blueprint())
    client = app.test_client()
    bearer = {"Authorization": "Bearer split-status-token-0123456789abcdef"}
    assert client.get("/cooldown/status", headers=bearer).get_json()["shared_split"] is True
    metrics = client.get("/cooldown/metrics", headers=bearer).get_data(as_text=True)
    assert "model_cooldown_shared_split 1.0" in metrics


def test_a_process_sharing_the_fleets_secret_is_not_split(redis_url: str, prefix: str) -> None:
    first, second = (attached(redis_url, prefix, s) for s in (SECRET, OTHER))
    first.check_secret(SECRET.encode())
    second.check_secret(OTHER.encode())
    assert first.stats()["shared_split"] is False
    assert second.stats()["shared_split"] is True
    first.close()
    second.close()


def test_an_unreachable_redis_at_attach_is_no_verdict_and_starts_the_backoff() -> None:
    backend = RedisObservations(f"redis://127.0.0.1:{free_port()}/0", prefix="unused")
    assert backend.check_secret(SECRET.encode()) is None
    assert backend.stats()["shared_degraded"] is True  # the first request waits no timeout
    backend.close()


def test_a_secret_check_redis_missed_runs_once_it_answers_again(
    redis_servers: Callable[..., Any],
) -> None:
    server = redis_servers()
    backend = RedisObservations(server.url, prefix="checked-later", socket_timeout=0.2)
    server.freeze()
    try:
        assert backend.check_secret(OTHER.encode()) is None
    finally:
        server.thaw()
    theirs = RedisObservations(server.url, prefix="checked-later")
    assert theirs.check_secret(SECRET.encode()) is True  # the first writer's secret stands
    after_the_backoff = time.monotonic() + 120
    assert backend.lookup(["00"], after_the_backoff, 60) is not None
    assert backend.stats()["shared_split"] is True  # the missed check ran with that call
    backend.close()
    theirs.close()
