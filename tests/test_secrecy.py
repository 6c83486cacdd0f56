"""A full scenario, with every logger at DEBUG: no key, model or bucket name leaks anywhere."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from flask import Flask, Response

from cooldown import (
    CredentialPool,
    ModelCooldown,
    ModelCooldownCapacity,
    ModelCooldownExhausted,
    NanoGPTKeyPool,
    NanoGPTKeyPoolExhausted,
    NanoGPTUnifiedKeyPool,
    classify_upstream_outcome,
    init_app,
    model_cooldown,
    recording_context,
    selection_scope,
)
from cooldown.pools.provider import Provider

P = "ce-claude-max"
BASE = "CODEX_EVERYWHERE_API_KEY_CLAUDE_MAX"
CRED_KEYS = ["sk-ant-SECRET-cred-one", "sk-ant-SECRET-cred-two"]
NANO_KEYS = ["nano-SECRET-key-one", "nano-SECRET-key-two"]
MODEL = "claude-SECRET-model"
BUCKET = "SECRET-bucket-name"
THROTTLED = classify_upstream_outcome(429)
SECRETS = [*CRED_KEYS, *NANO_KEYS, MODEL, BUCKET]


def test_nothing_leaks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, enabled: None
) -> None:
    monkeypatch.setenv(BASE, CRED_KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", CRED_KEYS[1])
    texts: list[str] = []
    app = Flask(__name__)
    init_app(app)

    @app.post("/chat")
    def chat() -> Response:
        scope = selection_scope(P, MODEL, quota_buckets={P: {MODEL: BUCKET}})
        CredentialPool.select(P, **scope)
        return Response("ok")

    def failing_probe(key: str) -> int:
        raise RuntimeError(f"probe of {key} for {MODEL} failed")

    with caplog.at_level(logging.DEBUG):
        for pool in (NanoGPTKeyPool, NanoGPTUnifiedKeyPool):  # probes that fail, then 401
            with pytest.raises(NanoGPTKeyPoolExhausted) as raised:
                pool.select_key(NANO_KEYS, failing_probe, model=MODEL)
            texts.append(str(raised.value))
            with pytest.raises(ModelCooldownExhausted) as refused:
                pool.select_key(NANO_KEYS, lambda key: 401, model=MODEL)
            texts.append(str(refused.value))
        # Legacy and scoped recording, both pools, every interesting status.
        for status in (429, 401, 403, 402, 500, 200):
            CredentialPool.record(P, CRED_KEYS[0], status)
            context = recording_context(status, {"Retry-After": "30"})
            CredentialPool.record(P, CRED_KEYS[1], status, model=MODEL, **context)
            for pool in (NanoGPTKeyPool, NanoGPTUnifiedKeyPool):
                pool.record_result(NANO_KEYS[0], status, model=MODEL, quota_bucket=BUCKET)
                pool.invalidate(NANO_KEYS[1], status)
        for key in CRED_KEYS:
            CredentialPool.record(P, key, 429, quota_bucket=BUCKET)
        client = app.test_client()
        exhausted = client.post("/chat")
        assert exhausted.status_code == 429
        # Fill the shared store to overflow, then see the 503.
        for index in range(model_cooldown.capacity):
            model_cooldown.record("filler", f"{index}", THROTTLED, model=MODEL)
        CredentialPool.record(P, CRED_KEYS[0], 429, model="other-SECRET-model")
        with pytest.raises(ModelCooldownCapacity) as capacity:
            CredentialPool.select(P, model=MODEL + "-fresh")
        texts.append(str(capacity.value))
        unavailable = client.post("/chat")  # the bucket is all-cooling: still a 429
        monkeypatch.setitem(CredentialPool._providers, "fresh", Provider("fresh", BASE))
        with pytest.raises(ModelCooldownExhausted) as cooled:
            CredentialPool.select(P, quota_bucket=BUCKET)
        texts.append(str(cooled.value))

    for response in (exhausted, unavailable):
        texts.append(response.get_data(as_text=True))
        texts.append(str(response.headers))
    texts += [record.getMessage() for record in caplog.records]
    texts += [str(record.args) for record in caplog.records]
    texts += [repr(model_cooldown), repr(vars(model_cooldown)), str(model_cooldown.stats())]
    table = b"".join(model_cooldown._state.deadlines)
    dump = "\n".join(texts)
    assert caplog.records, "the scenario should have logged the probe failures"
    for secret in [*SECRETS, "other-SECRET-model"]:
        assert secret not in dump
        assert secret.encode() not in table


def test_store_state_holds_only_digests_and_numbers() -> None:
    store = ModelCooldown(max_entries=5)
    throttled = recording_context(429, environ={"MODEL_COOLDOWN_ENABLED": "1"})["outcome"]
    for model in ("a", "b"):
        store.record("p", "sk-SECRET", throttled, model=model, now=0)
    assert all(len(entry) == 64 for entry in store._state.deadlines)
    assert all(isinstance(deadline, float) for deadline in store._state.deadlines.values())
    assert all(isinstance(deadline, float) for deadline in store._state.schedule._expiry)


def test_declared_windows_and_readings_hold_no_key_or_model(
    enabled: None,
    caplog: pytest.LogCaptureFixture,
    process: Callable[[], ModelCooldown],
    redis_url: str,
    prefix: str,
) -> None:
    import redis

    from cooldown import Usage

    pool = CredentialPool(store=process())
    readings = {CRED_KEYS[0]: Usage(remaining=0, limit=5)}
    pool.register(P, keys=CRED_KEYS, limits={"requests": {"minute": 1}}, usage=readings.get)
    with caplog.at_level(logging.DEBUG):
        pool.read_usage()
        pool.dispatch(P, lambda key: Response("ok"), model=MODEL)
        with pytest.raises(ModelCooldownExhausted) as refused:
            pool.dispatch(P, lambda key: Response("ok"), model=MODEL)
        status = pool.status(P, model=MODEL)
    stored = redis.Redis.from_url(redis_url)
    dump = "\n".join(
        [
            str(refused.value),
            str(status),
            repr(vars(pool.store._state.admission.declared)),
            repr(vars(pool._usage)),
            *(record.getMessage() for record in caplog.records),
            *(repr(stored.dump(name)) for name in stored.scan_iter(f"{{{prefix}}}:*")),
        ]
    )
    assert '"limits"' in dump.replace("'", '"')  # the windows were shown
    for secret in [*CRED_KEYS, MODEL]:
        assert secret not in dump
        assert secret[:12] not in dump
