"""An operator's drain, undrain and clear, by a key's stable label, in one process and
across processes sharing one Redis."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cooldown import CredentialPool, ModelCooldown, ModelCooldownExhausted, model_cooldown

P = "operated"
KEYS = ["sk-operated-one-0123456789", "sk-operated-two-0123456789", "sk-operated-three-012345"]


class Answer:
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status_code, self.headers = status, headers or {}


@pytest.fixture(autouse=True)
def pool() -> Iterator[None]:
    CredentialPool.register(P, keys=KEYS)
    yield
    CredentialPool._providers.pop(P, None)


def labels() -> list[str]:
    return [key["label"] for key in CredentialPool.status(P)["keys"]]


def test_labels_are_stable_short_and_name_no_key() -> None:
    first = labels()
    assert first == labels()
    assert all(re.fullmatch(r"k-[0-9a-f]{8}", label) for label in first)
    assert len(set(first)) == 3
    for label in first:
        assert not any(
            label[2:] in key or label[2:] in model_cooldown.credential_id(P, key) for key in KEYS
        )


def test_a_drained_key_gets_no_new_attempt_for_any_model(enabled: None) -> None:
    row = CredentialPool.drain(P, labels()[0])
    assert row["state"] == "drained"
    assert CredentialPool.available(P, model="m") == KEYS[1:]
    assert CredentialPool.select(P, model="other") == KEYS[1]
    sent: list[str] = []
    CredentialPool.dispatch(P, lambda key: sent.append(key) or Answer(200), model="m")
    assert KEYS[0] not in sent
    status = CredentialPool.status(P, model="m")
    assert (status["ready"], status["cooling"], status["drained"]) == (2, 0, 1)


def test_a_drain_holds_on_the_legacy_path_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "false")
    CredentialPool.drain(P, labels()[0])
    assert CredentialPool.select(P) == KEYS[1]


def test_undrain_puts_the_key_back(enabled: None) -> None:
    label = labels()[0]
    CredentialPool.drain(P, label)
    row = CredentialPool.undrain(P, label)
    assert row["state"] == "ready"
    assert CredentialPool.available(P, model="m") == KEYS


def test_every_key_drained_leaves_no_key_to_dispatch_with(enabled: None) -> None:
    for label in labels():
        CredentialPool.drain(P, label)
    assert CredentialPool.dispatch(P, lambda key: Answer(200), model="m") is None


def test_clear_forgets_throttles_and_auth_rests_and_they_are_recorded_again(
    enabled: None,
) -> None:
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=300)
    CredentialPool.record(P, KEYS[0], 401, model="m")
    row = CredentialPool.clear(P, labels()[0])
    assert row["state"] == "ready"
    assert CredentialPool.available(P, model="m") == KEYS
    assert CredentialPool.status(P)["keys"][0]["reason"] is None  # the legacy mirror too
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30)
    assert CredentialPool.available(P, model="m") == KEYS[1:]


def test_clear_with_a_model_forgets_that_scope_only(enabled: None) -> None:
    for model in ("m", "n"):
        CredentialPool.record(P, KEYS[0], 429, model=model, retry_after_seconds=300)
    row = CredentialPool.clear(P, labels()[0], model="m")
    assert row["state"] == "ready"
    assert CredentialPool.available(P, model="m") == KEYS
    assert CredentialPool.available(P, model="n") == KEYS[1:]


@pytest.mark.parametrize(
    "spent",
    [
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "60s"},
        {"x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "60s"},
    ],
    ids=["requests", "tokens"],
)
def test_clear_forgets_a_spent_budget(enabled: None, spent: dict[str, str]) -> None:
    CredentialPool.dispatch(P, lambda key: Answer(200, spent), model="m", order="configured")
    assert CredentialPool.available(P, model="m", cost=5000) == KEYS[1:]
    CredentialPool.clear(P, labels()[0])
    assert CredentialPool.available(P, model="m", cost=5000) == KEYS


@pytest.mark.parametrize("action", ["drain", "undrain", "clear"])
def test_an_unknown_label_or_provider_is_a_key_error_naming_what_is_unknown(action: str) -> None:
    with pytest.raises(KeyError, match="k-00000000"):
        getattr(CredentialPool, action)(P, "k-00000000")
    with pytest.raises(KeyError, match="no provider 'no-such-provider'"):
        getattr(CredentialPool, action)("no-such-provider", labels()[0])
    with pytest.raises(TypeError):
        getattr(CredentialPool, action)(P, 1)


def test_each_action_logs_one_info_record_without_key_or_model(
    enabled: None, caplog: pytest.LogCaptureFixture
) -> None:
    label = labels()[1]
    with caplog.at_level(logging.INFO, logger="cooldown"):
        CredentialPool.drain(P, label)
        CredentialPool.undrain(P, label)
        CredentialPool.clear(P, label, model="secret-model-name")
    records = [r.getMessage() for r in caplog.records if "operator" in r.getMessage()]
    assert len(records) == 3
    for action, message in zip(("drain", "undrain", "clear"), records, strict=True):
        assert action in message
        assert label in message
        assert P in message
    text = caplog.text
    assert "secret-model-name" not in text
    assert not any(key in text for key in KEYS)


def test_a_drain_in_one_pool_object_leaves_another_alone(enabled: None) -> None:
    other = CredentialPool()
    other.register(P, keys=KEYS)
    CredentialPool.drain(P, labels()[0])
    assert other.available(P, model="m") == KEYS


# -- fleet-wide --------------------------------------------------------------------------------


def pool_over(store: ModelCooldown) -> CredentialPool:
    pool = CredentialPool(store=store)
    pool.register(P, keys=KEYS)
    return pool


def test_a_drain_holds_in_every_process_and_survives_a_restart(
    enabled: None, process: Callable[[], ModelCooldown]
) -> None:
    first, second = (pool_over(process()) for _ in range(2))
    label = first.status(P)["keys"][0]["label"]
    assert second.status(P)["keys"][0]["label"] == label  # one secret: one label fleet-wide
    first.drain(P, label)
    later = time.monotonic() + 1  # past the quarter second a read of the fleet's drains holds
    assert second.available(P, model="m", now=later) == KEYS[1:]
    restarted = process()  # a worker that started after the drain
    assert pool_over(restarted).available(P, model="m") == KEYS[1:]
    second.undrain(P, label)
    assert first.available(P, model="m", now=later + 1) == KEYS


def test_a_clear_in_one_process_reopens_the_key_in_another(
    enabled: None, process: Callable[[], ModelCooldown]
) -> None:
    first, second = (pool_over(process()) for _ in range(2))
    first.record(P, KEYS[0], 429, model="m", retry_after_seconds=300)
    first.record(P, KEYS[1], 429, model="m", retry_after_seconds=300)
    first.record(P, KEYS[2], 401, model="m")
    with pytest.raises(ModelCooldownExhausted):
        second.select(P, model="m")
    second.clear(P, second.status(P)["keys"][1]["label"])
    assert second.select(P, model="m") == KEYS[1]
    later = time.monotonic() + 1  # past the quarter second a read of the fleet's marks holds
    assert first.available(P, model="m", now=later) == [KEYS[1]]  # its own entry followed


@pytest.mark.parametrize("action", ["clear", "undrain"])
def test_clear_and_undrain_wake_the_waiters_of_their_provider(enabled: None, action: str) -> None:
    CredentialPool.register(P, keys=KEYS[:2])
    label = labels()[0]
    CredentialPool.record(P, KEYS[1], 429, model="m", retry_after_seconds=3)
    if action == "clear":
        CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=3)
    else:
        CredentialPool.drain(P, label)
    sent_at: list[float] = []

    def send(key: str) -> Answer:
        sent_at.append(time.monotonic())
        return Answer(200)

    waiter = threading.Thread(
        target=CredentialPool.dispatch, args=(P, send), kwargs={"model": "m", "wait": 5}
    )
    waiter.start()
    deadline = time.monotonic() + 5
    while model_cooldown.waiters.waiting == 0:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    acted_at = time.monotonic()
    getattr(CredentialPool, action)(P, label)
    waiter.join(10)
    assert sent_at, "the waiter was never served"
    assert sent_at[0] - acted_at < 0.5  # woken by the action, not at its 3 s re-check


def test_another_processs_clear_reaches_every_provider_it_names(
    enabled: None, process: Callable[[], ModelCooldown]
) -> None:
    first, second = (pool_over(process()) for _ in range(2))
    for pool in (first, second):
        pool.register("operated-b", keys=KEYS[:1])
    first.record("operated-b", KEYS[0], 429, model="m", retry_after_seconds=600)
    label = second.status("operated-b")["keys"][0]["label"]
    second.clear("operated-b", label)
    for window in range(1, 4):  # provider A is asked first in each read of the marks
        later = time.monotonic() + window
        first.available(P, model="m", now=later)
        assert first.available("operated-b", model="m", now=later) == KEYS[:1]


@pytest.mark.parametrize("action", ["drain", "undrain", "clear"])
def test_an_action_taken_while_redis_is_out_reaches_the_fleet_once_it_answers(
    enabled: None, redis_servers: Callable[..., Any], action: str
) -> None:
    from cooldown.shared.observations import RedisObservations

    server = redis_servers()
    stores = []
    for _ in range(2):  # two gateway processes' stores, on a Redis of this test's own
        store = ModelCooldown()
        store.attach_shared(
            RedisObservations(server.url, prefix="pending", socket_timeout=0.2),
            secret=b"pending-actions-secret-" + b"x" * 16,
        )
        stores.append(store)
    first, second = (pool_over(store) for store in stores)
    label = first.status(P)["keys"][0]["label"]
    if action == "undrain":
        first.drain(P, label)
    if action == "clear":
        first.record(P, KEYS[0], 429, model="m", retry_after_seconds=600)
    try:
        server.freeze()
        first.available(P, model="m")  # a timeout: this worker backs off from Redis
        row = getattr(first, action)(P, label)
        assert row.get("fleet") == "pending"  # done here, not yet in the fleet
        assert first.status(P)["keys"][0]["fleet"] == "pending"
        expected = KEYS if action != "drain" else KEYS[1:]
        assert first.available(P, model="m") == expected  # it acts in this process at once
    finally:
        server.thaw()
    deadline = time.monotonic() + 15
    while second.available(P, model="m") != expected or "fleet" in first.status(P)["keys"][0]:
        assert time.monotonic() < deadline, "the action never reached the fleet"
        time.sleep(0.1)
    for store in stores:
        backend = store.detach_shared()
        assert backend is not None
        backend.close()  # type: ignore[attr-defined]
