"""`register(usage=reader)`: a key out of credit sits out for every model until a reading
shows credit again; readers run off the request path and their failures change nothing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cooldown import CredentialPool, ModelCooldown, ModelCooldownExhausted, Usage
from cooldown.pools import usage_readings

P = "openrouter"
KEYS = ["sk-or-one-0123456789", "sk-or-two-0123456789"]


class Answer:
    status_code, headers = 200, {}


class Reader:
    """A usage API: what it says of each key, as a test sets it; the keys it was asked."""

    def __init__(self, **readings: Usage | None) -> None:
        self.readings: dict[str, Usage | None] = {KEYS[0]: readings.get("first")}
        self.asked: list[str] = []
        self.read = threading.Event()

    def __call__(self, key: str) -> Usage | None:
        self.asked.append(key)
        self.read.set()
        return self.readings.get(key)


@pytest.fixture
def pools() -> Iterator[list[CredentialPool]]:
    made: list[CredentialPool] = []
    yield made
    for pool in made:
        pool.reset()  # stops its thread


@pytest.fixture(autouse=True)
def by_hand(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Readings taken by `read_usage(now=...)` on the test's clock: no background thread
    reads on the real one meanwhile (except in the test of that thread)."""
    if "background" not in request.node.name:
        monkeypatch.setattr(usage_readings.UsageReadings, "start", lambda self, pool: None)


def pool_with(pools: list[CredentialPool], usage: Any, **register: Any) -> CredentialPool:
    pool = CredentialPool()
    pool.register(P, keys=KEYS, usage=usage, **register)
    pools.append(pool)
    return pool


def sent_to(pool: CredentialPool, now: float, model: str = "m") -> str:
    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        return Answer()

    pool.dispatch(P, send, model=model, now=now, order="configured")
    return sent[0]


def test_a_spent_reading_cools_the_key_for_every_model_until_credit_is_back(
    enabled: None, pools: list[CredentialPool]
) -> None:
    reader = Reader(first=Usage(remaining=0, limit=10, resets_in=3600))
    pool = pool_with(pools, reader)
    assert pool.read_usage(now=100.0) == 2
    assert sent_to(pool, 101.0, model="a") == KEYS[1]
    assert sent_to(pool, 101.0, model="b") == KEYS[1]
    first = pool.status(P, model="a", now=101.0)["keys"][0]
    assert first["reason"] == "quota"
    assert first["usage"] == {"remaining": 0, "limit": 10, "resets_in": 3599, "read_ago": 1}
    reader.readings[KEYS[0]] = Usage(remaining=5, limit=10)  # topped up
    assert pool.read_usage(now=130.0) == 0  # not due again within its period
    assert pool.read_usage(now=160.0) == 2
    assert sent_to(pool, 161.0, model="a") == KEYS[0]  # back without a clear


def test_a_spent_reading_cools_the_keys_account_and_its_resets_in_bounds_it(
    enabled: None, pools: list[CredentialPool]
) -> None:
    reader = Reader(first=Usage(spent=True, resets_in=90))
    pool = pool_with(pools, reader, accounts={"team": [1, 2]})
    pool.read_usage(now=100.0)
    with pytest.raises(ModelCooldownExhausted) as refused:
        sent_to(pool, 101.0)
    assert refused.value.reason == "quota"
    assert "out of quota" in refused.value.message
    assert refused.value.retry_after == 89
    assert sent_to(pool, 191.0) == KEYS[0]


def test_without_resets_in_a_spent_key_sits_out_the_quota_setting(
    enabled: None, pools: list[CredentialPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_QUOTA_SECONDS", "600")
    pool = pool_with(pools, Reader(first=Usage(remaining=0)))
    pool.read_usage(now=100.0)
    assert pool.status(P, model="m", now=100.0)["keys"][0]["retry_after"] == 600


def test_the_background_thread_reads_off_the_request_path(
    enabled: None, pools: list[CredentialPool]
) -> None:
    reader = Reader(first=Usage(remaining=3, limit=10))
    pool = pool_with(pools, reader)
    assert not reader.read.is_set()  # nothing reads before the pool is used
    sent_to(pool, None)  # type: ignore[arg-type]
    assert reader.read.wait(5)
    assert threading.current_thread().name not in ("cooldown-usage", "cooldown-usage-read")
    thread = pool._usage._thread
    assert thread is not None
    assert thread.is_alive()
    pool.reset()
    assert not thread.is_alive()


@pytest.mark.parametrize(
    "failing",
    [
        lambda key: (_ for _ in ()).throw(RuntimeError(f"bad key {key}")),
        lambda key: {"remaining": 0},
        lambda key: 0,
    ],
    ids=["raises", "returns a dict", "returns a number"],
)
def test_a_failing_reader_changes_nothing_and_is_said_once_without_the_key(
    failing: Callable[[str], Any],
    enabled: None,
    pools: list[CredentialPool],
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
) -> None:
    pool = pool_with(pools, failing)
    with caplog.at_level(logging.WARNING, "cooldown"):
        pool.read_usage(now=100.0)
        pool.read_usage(now=200.0)
    assert sent_to(pool, 201.0) == KEYS[0]
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 1
    assert P in said[0]
    assert not any(key in said[0] or key[:8] in said[0] for key in KEYS)


def test_a_hung_reader_is_abandoned_and_not_called_again_while_it_hangs(
    enabled: None,
    pools: list[CredentialPool],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
) -> None:
    monkeypatch.setattr(usage_readings, "READ_TIMEOUT_SECONDS", 0.05)
    release = threading.Event()
    calls: list[str] = []

    def hangs(key: str) -> Usage:
        calls.append(key)
        release.wait(10)
        return Usage(remaining=0)

    pool = pool_with(pools, hangs)
    with caplog.at_level(logging.WARNING, "cooldown"):
        pool.read_usage(now=100.0)
        pool.read_usage(now=200.0)  # due again, but both calls are still out
    assert calls == KEYS
    assert len(caplog.records) == 1
    release.set()
    assert sent_to(pool, 201.0) == KEYS[0]  # the abandoned answer changed nothing


def test_the_period_comes_from_the_setting_and_a_malformed_one_is_its_default(
    enabled: None,
    pools: list[CredentialPool],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
) -> None:
    pool = pool_with(pools, Reader())
    monkeypatch.setenv("MODEL_COOLDOWN_USAGE_SECONDS", "10")
    assert pool.read_usage(now=100.0) == 2
    assert pool.read_usage(now=110.0) == 2
    monkeypatch.setenv("MODEL_COOLDOWN_USAGE_SECONDS", "9")
    with caplog.at_level(logging.WARNING, "cooldown"):
        assert pool.read_usage(now=120.0) == 2
        assert pool.read_usage(now=130.0) == 0  # the default: 60 s
    assert any("MODEL_COOLDOWN_USAGE_SECONDS" in r.getMessage() for r in caplog.records)


def test_with_the_feature_off_no_reader_is_called(pools: list[CredentialPool]) -> None:
    reader = Reader(first=Usage(remaining=0))
    pool = pool_with(pools, reader)
    assert pool.read_usage(now=100.0) == 0
    assert reader.asked == []


def test_one_worker_of_the_fleet_reads_each_key_per_period_and_its_reading_holds_everywhere(
    enabled: None, pools: list[CredentialPool], process: Callable[[], ModelCooldown]
) -> None:
    readers = [Reader(first=Usage(remaining=0)), Reader(first=Usage(remaining=0))]
    workers = []
    for reader in readers:
        worker = CredentialPool(store=process())
        worker.register(P, keys=KEYS, usage=reader)
        pools.append(worker)
        workers.append(worker)
    assert workers[0].read_usage() == 2
    assert workers[1].read_usage() == 0  # the first holds both keys' leases
    assert readers[1].asked == []
    assert sent_to(workers[1], None) == KEYS[1]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"remaining": -1}, ValueError),
        ({"limit": float("inf")}, ValueError),
        ({"resets_in": float("nan")}, ValueError),
        ({"remaining": "5"}, TypeError),
        ({"remaining": True}, TypeError),
        ({"spent": "yes"}, TypeError),
    ],
)
def test_a_usage_refuses_what_no_api_means(fields: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        Usage(**fields)


def test_register_refuses_a_reader_that_cannot_be_called() -> None:
    with pytest.raises(TypeError):
        CredentialPool().register(P, keys=KEYS, usage="https://openrouter.ai")  # type: ignore[arg-type]


def test_every_worker_shows_the_fleets_last_reading(
    enabled: None, pools: list[CredentialPool], process: Callable[[], ModelCooldown]
) -> None:
    workers = []
    for _ in range(2):
        worker = CredentialPool(store=process())
        worker.register(P, keys=KEYS, usage=Reader(first=Usage(remaining=0, limit=10)))
        pools.append(worker)
        workers.append(worker)
    assert workers[0].read_usage() == 2
    rows = workers[1].status(P, model="m")["keys"]  # it read nothing itself
    assert rows[0]["usage"] is not None
    assert rows[0]["usage"]["remaining"] == 0
    assert rows[0]["usage"]["limit"] == 10
    assert rows[0]["reason"] == "quota"
    assert rows[1]["usage"] is None  # the reader knew nothing of the second key
