"""Pool objects: `CredentialPool()` shares nothing with another object or with the class,
which stays the default object every class-level call already uses."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import requests
from flask import Flask

from cooldown import (
    CredentialPool,
    ModelCooldown,
    NanoGPTKeyPool,
    init_app,
    model_cooldown,
    status_blueprint,
)
from cooldown.pools.credential import BUILT_IN_PROVIDERS
from cooldown.pools.nanogpt.validation import ValidatedKeyPool
from cooldown.shared.observations import RedisObservations

from ..conftest import delete_prefix

P = "tenant-llm"
KEYS = ["sk-tenant-one-0123456789", "sk-tenant-two-0123456789"]
SECRET = b"pool-objects-secret-" + b"s" * 32
TOKEN = "pool-objects-token-" + "0123456789" * 3


class Answer:
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status_code, self.headers = status, headers or {}


@pytest.fixture
def tenants(enabled: None) -> tuple[CredentialPool, CredentialPool]:
    """Two tenants' pools over the same provider name and the same keys."""
    first, second = CredentialPool(), CredentialPool()
    first.register(P, keys=KEYS)
    second.register(P, keys=KEYS)
    return first, second


def states(pool: CredentialPool | type[CredentialPool], **scope: object) -> list[str]:
    return [key["state"] for key in pool.status(P, **scope)["keys"]]  # type: ignore[arg-type]


def test_a_new_pool_has_the_built_in_providers_and_nothing_registered_elsewhere() -> None:
    CredentialPool.register("only-on-the-class", keys=KEYS)
    try:
        pool = CredentialPool()
        assert pool.providers() == list(BUILT_IN_PROVIDERS)
        pool.register(P, keys=KEYS)
        assert pool.pooled(P)
        assert not CredentialPool.pooled(P)
        assert not CredentialPool().pooled(P)
        assert not pool.pooled("only-on-the-class")
    finally:
        CredentialPool._providers.pop("only-on-the-class")


def test_a_cooldown_in_one_object_leaves_the_other_and_the_class_alone(
    tenants: tuple[CredentialPool, CredentialPool],
) -> None:
    first, second = tenants
    CredentialPool.register(P, keys=KEYS)
    try:
        first.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
        assert first.available(P, model="m", now=1) == KEYS[1:]
        assert second.available(P, model="m", now=1) == KEYS
        assert CredentialPool.available(P, model="m", now=1) == KEYS
        assert first.store.entry_count == 1
        assert second.store.entry_count == 0
        assert model_cooldown.entry_count == 0
    finally:
        CredentialPool._providers.pop(P)


def test_a_budget_announced_to_one_object_holds_only_its_keys(
    tenants: tuple[CredentialPool, CredentialPool],
) -> None:
    first, second = tenants
    spent = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "30s"}
    answer = first.dispatch(P, lambda key: Answer(200, spent), model="m", order="configured")
    assert answer is not None
    assert answer.status_code == 200
    assert states(first, model="m") == ["cooling", "ready"]
    assert states(second, model="m") == ["ready", "ready"]


def test_a_legacy_rest_stays_in_its_own_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "false")
    first, second = CredentialPool(), CredentialPool()
    for pool in (first, second):
        pool.register(P, keys=KEYS)
    first.record(P, KEYS[0], 429, now=0)  # feature off: the provider-wide legacy rest
    assert first.select(P, now=1) == KEYS[1]
    assert second.select(P, now=1) == KEYS[0]


def test_accounts_registered_on_one_object_group_only_its_keys(enabled: None) -> None:
    grouped, single = CredentialPool(), CredentialPool()
    grouped.register(P, keys=KEYS, accounts={"team": [1, 2]})
    single.register(P, keys=KEYS)
    for pool in (grouped, single):
        pool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
    assert grouped.available(P, model="m", now=1) == []  # the sibling shares the quota
    assert single.available(P, model="m", now=1) == KEYS[1:]


def test_a_pool_records_into_the_store_it_was_given(enabled: None, store: ModelCooldown) -> None:
    pool = CredentialPool(store=store)
    pool.register(P, keys=KEYS)
    pool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
    assert pool.store is store
    assert store.available(P, KEYS, model="m", now=1) == KEYS[1:]


@pytest.mark.parametrize("store", ["redis://localhost", object(), model_cooldown.stats()])
def test_a_store_that_is_not_a_model_cooldown_is_a_type_error(store: object) -> None:
    with pytest.raises(TypeError, match="store must be a ModelCooldown"):
        CredentialPool(store=store)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store must be a ModelCooldown"):
        NanoGPTKeyPool(store=store)  # type: ignore[arg-type]


def test_the_class_is_the_default_object_over_the_process_store(enabled: None) -> None:
    assert CredentialPool.store is model_cooldown
    CredentialPool.register(P, keys=KEYS)
    try:
        CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
        assert model_cooldown.available(P, KEYS, model="m", now=1) == KEYS[1:]
    finally:
        CredentialPool._providers.pop(P)


def test_objects_shared_under_different_prefixes_see_only_their_own_fleet(
    tenants: tuple[CredentialPool, CredentialPool], redis_url: str, prefix: str
) -> None:
    first, second = tenants
    prefixes = {first: prefix + "-a", second: prefix + "-b"}
    peers = []
    try:
        for pool, name in prefixes.items():
            pool.store.attach_shared(RedisObservations(redis_url, prefix=name), secret=SECRET)
            peer = ModelCooldown()  # the same tenant in another process
            peer.attach_shared(RedisObservations(redis_url, prefix=name), secret=SECRET)
            peers.append(peer)
        first.record(P, KEYS[0], 429, model="m", retry_after_seconds=30)
        assert peers[0].available(P, KEYS, model="m") == KEYS[1:]
        assert peers[1].available(P, KEYS, model="m") == KEYS
        assert second.available(P, model="m") == KEYS
    finally:
        for store in [first.store, second.store, *peers]:
            backend = store.detach_shared()
            assert isinstance(backend, RedisObservations)
            backend.close()
        for name in prefixes.values():
            delete_prefix(redis_url, name)


def test_settings_give_each_objects_store_its_own_redis_client(
    tenants: tuple[CredentialPool, CredentialPool],
    redis_url: str,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", redis_url)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", SECRET.decode())
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_PREFIX", prefix)
    first, second = tenants
    by_hand = RedisObservations(redis_url, prefix=prefix + "-own")
    second.store.attach_shared(by_hand, secret=SECRET)
    try:
        first.record(P, KEYS[0], 429, model="m", retry_after_seconds=30)
        second.record(P, KEYS[1], 429, model="m", retry_after_seconds=30)
        assert isinstance(first.store.shared, RedisObservations)
        assert first.store.shared is not model_cooldown.shared
        assert second.store.shared is by_hand  # attached by hand: the settings leave it alone
        peer = ModelCooldown()
        peer.attach_shared(RedisObservations(redis_url, prefix=prefix), secret=SECRET)
        assert peer.available(P, KEYS, model="m") == KEYS[1:]  # only the first's cooldown
    finally:
        for store in (first.store, second.store, peer):
            backend = store.detach_shared()
            if isinstance(backend, RedisObservations):
                backend.close()
        delete_prefix(redis_url, prefix + "-own")


def test_nanogpt_pool_objects_keep_their_own_active_key_and_rejections(enabled: None) -> None:
    first, second = NanoGPTKeyPool(), NanoGPTKeyPool()
    first.record_result(KEYS[0], 401, now=0)  # the feature on, but no model: legacy
    assert first.select_available_key(KEYS, now=1) == KEYS[1]
    assert second.select_available_key(KEYS, now=1) == KEYS[0]
    assert NanoGPTKeyPool.select_available_key(KEYS, now=1) == KEYS[0]
    first.record_result(KEYS[1], 429, model="m", retry_after_seconds=30, now=0)
    assert first.store.entry_count == 1
    assert model_cooldown.entry_count == 0


def test_a_pool_class_without_a_namespace_makes_no_object() -> None:
    with pytest.raises(TypeError, match="names no namespace"):
        ValidatedKeyPool()


@pytest.fixture
def tenant_app(
    tenants: tuple[CredentialPool, CredentialPool], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Flask]:
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", TOKEN)

    def build(**surface: object) -> Flask:
        app = Flask("tenant")
        init_app(app, pools=tenants[0])
        app.register_blueprint(status_blueprint(**surface))  # type: ignore[arg-type]
        return app

    return build


@pytest.mark.parametrize("shown", ["init_app", "status_blueprint"])
def test_the_status_surface_shows_the_pool_object_it_was_given(
    tenants: tuple[CredentialPool, CredentialPool],
    tenant_app: Callable[..., Flask],
    serve_in_thread: Callable[[Flask], str],
    shown: str,
) -> None:
    first, second = tenants
    first.record(P, KEYS[0], 429, model="m", retry_after_seconds=30)
    pool = first if shown == "init_app" else second
    app = tenant_app() if shown == "init_app" else tenant_app(pools=second)
    assert app.extensions["cooldown"] is first.store
    base = serve_in_thread(app)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    answer = requests.get(f"{base}/cooldown/status/{P}", params={"model": "m"}, headers=auth)
    assert answer.status_code == 200
    assert [key["state"] for key in answer.json()["keys"]] == states(pool, model="m")
    summary = requests.get(f"{base}/cooldown/status", headers=auth).json()
    assert summary["providers"][P]["scoped_cooldowns"] == pool.store.entry_count
    assert not CredentialPool.pooled(P)  # the default object knows nothing of the tenant


@pytest.mark.parametrize("pools", ["default", object(), ModelCooldown()])
def test_pools_that_are_not_a_credential_pool_are_a_type_error(pools: object) -> None:
    with pytest.raises(TypeError, match="pools must be a CredentialPool"):
        init_app(Flask("bad"), pools=pools)
    with pytest.raises(TypeError, match="pools must be a CredentialPool"):
        status_blueprint(pools=pools)


def test_waiters_of_one_object_neither_count_nor_wake_in_another(
    tenants: tuple[CredentialPool, CredentialPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_WAITERS", "1")
    first, second = tenants
    for pool in tenants:
        for key in KEYS:
            pool.record(P, key, 429, model="m", retry_after_seconds=1)
    waiting = threading.Thread(
        target=first.dispatch, args=(P, lambda key: Answer(200)), kwargs={"model": "m", "wait": 3}
    )
    waiting.start()
    deadline = time.monotonic() + 10
    while first.store.stats()["waits_total"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    answer = second.dispatch(P, lambda key: Answer(200), model="m", wait=3)  # not over its cap
    waiting.join(10)
    assert answer is not None
    assert answer.status_code == 200
    assert second.store.stats()["waits_refused_total"] == 0
    assert first.store.stats()["waits_served_total"] == 1
    assert model_cooldown.stats()["waits_total"] == 0
