"""One set of counts, fleet-wide: a key another worker saw rejected credential-wide is
cooling in this worker's unscoped status, summary and metrics too, not only per model."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask

from cooldown import (
    CredentialPool,
    ModelCooldown,
    classify_upstream_outcome,
    init_app,
    status_blueprint,
)

from ..conftest import SHARED_SECRET

P = "fleet-status"
KEYS = ["sk-fleet-status-one-0123", "sk-fleet-status-two-0123"]
TOKEN = "fleet-status-token-0123456789abcdef"


def test_a_rejection_in_another_worker_is_cooling_in_every_view(
    monkeypatch: pytest.MonkeyPatch,
    enabled: None,
    redis_url: str,
    prefix: str,
    process: Callable[[], ModelCooldown],
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", redis_url)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", SHARED_SECRET)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_PREFIX", prefix)
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", TOKEN)
    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))
    CredentialPool.register(P, keys=KEYS)
    CredentialPool.select(P, model="m")  # this worker attaches to the fleet's Redis
    other_worker = process()
    rejected = classify_upstream_outcome(401)
    other_worker.record(P, KEYS[1], rejected, model="m", credential_wide_auth=True)

    unscoped = CredentialPool.status(P)
    assert [key["state"] for key in unscoped["keys"]] == ["ready", "cooling"]
    assert (unscoped["ready"], unscoped["cooling"]) == (1, 1)
    assert CredentialPool.status(P, model="m")["cooling"] == 1  # the same answer per model

    app = Flask("fleet-status")
    init_app(app)
    app.register_blueprint(status_blueprint())
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    metrics = app.test_client().get("/cooldown/metrics", headers=bearer).get_data(as_text=True)
    assert f'model_cooldown_keys{{provider="{P}",state="cooling"}} 1.0' in metrics
