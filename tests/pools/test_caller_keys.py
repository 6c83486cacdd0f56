"""Keys the caller hands in are the pool's keys: `record` takes the key the caller used,
`available(provider, keys)` filters the caller's list and `select` reads `keys(provider)`, so
a key never configured is recorded and honoured. Such foreign keys are bounded apart: they
never fill the table the pool's own keys need."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

import pytest

from cooldown import (
    MAX_ENTRIES,
    CredentialPool,
    ModelCooldown,
    ModelCooldownExhausted,
    classify_upstream_outcome,
    model_cooldown,
)
from cooldown.store.foreign import FOREIGN_PER_PROVIDER

P = "ce-gpt-plus"  # registered by default, from CODEX_EVERYWHERE_API_KEY_GPT_PLUS*
CALLERS = ["sk-callers-own-first-0123456", "sk-callers-own-second-012345"]
HELD = ["sk-held-by-the-pool-01234567", "sk-held-by-the-pool-76543210"]


@pytest.fixture(autouse=True)
def _enabled(monkeypatch: pytest.MonkeyPatch, enabled: None) -> None:
    """Every test here is on the scoped path; what a test registers goes with it."""
    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))


def patch_keys(monkeypatch: pytest.MonkeyPatch, keys: list[str]) -> None:
    """What gateways and the seed's own tests do: `keys(provider)` answers their list."""
    monkeypatch.setattr(CredentialPool, "keys", classmethod(lambda cls, provider: list(keys)))


def test_a_key_never_configured_is_recorded_and_honoured_by_available() -> None:
    assert CredentialPool.keys(P) == []
    CredentialPool.record(P, CALLERS[0], 429, model="m", retry_after_seconds=30, now=0.0)
    assert CredentialPool.available(P, CALLERS, model="m", now=1.0) == CALLERS[1:]
    assert CredentialPool.available(P, CALLERS, model="other", now=1.0) == CALLERS
    assert CredentialPool.available(P, CALLERS, model="m", now=30.0) == CALLERS


def test_a_genuine_auth_rejection_of_a_callers_key_is_seen_unscoped_too() -> None:
    CredentialPool.record(P, CALLERS[1], 401, model="m", now=0.0)
    assert CredentialPool.available(P, CALLERS, model="another", now=1.0) == CALLERS[:1]
    assert CredentialPool.available(P, CALLERS, now=1.0) == CALLERS[:1]  # the legacy mirror


def test_record_headers_takes_the_callers_bearer_token() -> None:
    headers = {"Authorization": f"Bearer {CALLERS[0]}"}
    CredentialPool.record_headers(P, headers, 429, model="m", retry_after_seconds=30, now=0.0)
    assert CredentialPool.available(P, CALLERS, model="m", now=1.0) == CALLERS[1:]


def test_select_over_patched_keys_honours_their_cooldowns(monkeypatch: pytest.MonkeyPatch) -> None:
    CredentialPool.record(P, CALLERS[0], 429, model="m", retry_after_seconds=30, now=0.0)
    patch_keys(monkeypatch, CALLERS)
    assert CredentialPool.select(P, model="m", now=1.0) == CALLERS[1]
    CredentialPool.record(P, CALLERS[1], 429, model="m", retry_after_seconds=10, now=1.0)
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.select(P, model="m", now=2.0)
    assert raised.value.retry_after == 9  # the earliest of the two releases


def test_a_flood_of_foreign_keys_leaves_every_provider_served(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    CredentialPool.register("flooded", keys=HELD)
    CredentialPool.register("neighbour", keys=HELD[:1])
    tokens = [f"sk-client-{secrets.token_hex(8)}" for _ in range(MAX_ENTRIES + 1)]
    with caplog.at_level(logging.WARNING, "cooldown"):
        for token in tokens:  # clients' own bearer tokens, each answered 401
            CredentialPool.record_headers(
                "flooded", {"Authorization": f"Bearer {token}"}, 401, model="m", now=0.0
            )
    assert model_cooldown.entry_count == FOREIGN_PER_PROVIDER
    assert CredentialPool.available("flooded", tokens[-3:], model="m", now=1.0) == []
    assert CredentialPool.select("flooded", model="m", now=1.0) == HELD[0]
    assert CredentialPool.select("neighbour", model="m", now=1.0) == HELD[0]
    assert CredentialPool.available("flooded", tokens[:1], model="m", now=1.0) == tokens[:1]
    dropped = [r for r in caplog.records if "does not hold" in r.getMessage()]
    assert len(dropped) == 1
    assert not any(token[:12] in caplog.text for token in tokens)
    CredentialPool.record("flooded", HELD[1], 429, model="m", retry_after_seconds=60, now=1.0)
    assert CredentialPool.select("flooded", model="m", now=2.0) == HELD[0]


def test_recording_a_foreign_key_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, "cooldown"):
        CredentialPool.record(P, CALLERS[0], 429, model="m", now=0.0)
    assert caplog.records == []


# -- the store's table --------------------------------------------------------------------------

THROTTLED = classify_upstream_outcome(429)


def test_foreign_entries_never_arm_the_capacity_guard() -> None:
    store = ModelCooldown(max_entries=4)
    for index in range(6):
        store.record("p", f"foreign-{index}", THROTTLED, model="m", now=0.0, foreign=True)
    assert store.entry_count == 4
    assert store.select("p", ["held"], model="m", now=1.0) == "held"  # no 503


def test_a_held_keys_entry_takes_the_place_of_the_oldest_foreign_one() -> None:
    store = ModelCooldown(max_entries=3)
    for index in range(3):
        store.record("p", f"foreign-{index}", THROTTLED, model="m", now=0.0, foreign=True)
    store.record("p", "held", THROTTLED, model="m", retry_after_seconds=30, now=1.0)
    assert store.available("p", ["held", "foreign-0", "foreign-1"], model="m", now=2.0) == [
        "foreign-0"
    ]
    stats = store.stats()
    assert (stats["overflow_active"], stats["dropped_at_capacity_total"]) == (False, 0)


def test_foreign_entries_are_bounded_per_provider_oldest_dropped() -> None:
    store = ModelCooldown()
    for index in range(FOREIGN_PER_PROVIDER + 2):
        store.record("p", f"foreign-{index}", THROTTLED, model="m", now=0.0, foreign=True)
    store.record("q", "foreign-0", THROTTLED, model="m", now=0.0, foreign=True)
    assert store.entry_count == FOREIGN_PER_PROVIDER + 1
    keys = ["foreign-0", "foreign-1", "foreign-2", f"foreign-{FOREIGN_PER_PROVIDER + 1}"]
    assert store.available("p", keys, model="m", now=1.0) == keys[:2]
    assert store.available("q", keys[:1], model="m", now=1.0) == []


# -- through Redis ------------------------------------------------------------------------------


@pytest.fixture
def fleet(process: Callable[[], ModelCooldown]) -> list[CredentialPool]:
    """Two gateway processes' pools, sharing one Redis, neither holding the caller's keys."""
    pools = [CredentialPool(store=process()) for _ in range(2)]
    for pool in pools:
        pool.register(P, keys=HELD)
    return pools


def test_a_callers_key_recorded_in_one_process_is_honoured_in_another(
    fleet: list[CredentialPool],
) -> None:
    first, second = fleet
    first.record(P, CALLERS[0], 429, model="m", retry_after_seconds=30)
    assert second.available(P, CALLERS, model="m") == CALLERS[1:]
    assert second.available(P, CALLERS, model="other") == CALLERS


def test_foreign_entries_in_redis_are_bounded_per_provider(
    fleet: list[CredentialPool], process: Callable[[], ModelCooldown], redis_url: str, prefix: str
) -> None:
    import redis

    first = fleet[0]
    tokens = [f"sk-client-{index:05d}" for index in range(FOREIGN_PER_PROVIDER + 1)]
    for token in tokens:
        first.record(P, token, 429, model="m", retry_after_seconds=600)
    first.record(P, HELD[0], 429, model="m", retry_after_seconds=600)
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.zcard(f"{{{prefix}}}:deadlines") == FOREIGN_PER_PROVIDER + 1
    finally:
        client.close()
    fresh = CredentialPool(store=process())  # no local entries: Redis alone answers
    fresh.register(P, keys=HELD)
    assert fresh.available(P, tokens[:2], model="m") == tokens[:1]  # the oldest was dropped
    assert fresh.available(P, tokens[-1:], model="m") == []
    assert fresh.select(P, model="m") == HELD[1]
