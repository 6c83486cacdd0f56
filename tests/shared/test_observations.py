"""Shared observations across real processes, against the Redis the suite is pointed at.

That is `MODEL_COOLDOWN_TEST_REDIS_URL` (default `redis://127.0.0.1:6379/0`); every test
writes under a prefix of its own and deletes it afterwards.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cooldown import (
    CredentialPool,
    ModelCooldown,
    ModelCooldownExhausted,
    classify_upstream_outcome,
    model_cooldown,
)

try:
    import redis
except ImportError:
    if os.environ.get("MODEL_COOLDOWN_REQUIRE_REDIS") == "1":
        raise
    pytest.skip("the [redis] extra is not installed", allow_module_level=True)

from cooldown.shared.observations import RedisObservations

Worker = Callable[..., Any]  # conftest.Worker: a worker process that answers JSON commands

SECRET = "s3cret-" + "x" * 40
PROVIDER = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"
K1, K2 = "sk-shared-SECRET-one", "sk-shared-SECRET-two"
THROTTLED = classify_upstream_outcome(429)
T = 5000.0  # a monotonic `now` every process agrees on (same host, same clock)


@pytest.fixture
def workers(
    redis_url: str, prefix: str, worker_processes: Callable[..., list[Worker]]
) -> Callable[..., list[Worker]]:
    def start(count: int, *args: str, secret: str = SECRET) -> list[Worker]:
        env = {
            "MODEL_COOLDOWN_ENABLED": "true",
            "MODEL_COOLDOWN_REDIS_URL": redis_url,
            "MODEL_COOLDOWN_REDIS_SECRET": secret,
            "MODEL_COOLDOWN_REDIS_PREFIX": prefix,
            BASE: K1,
            f"{BASE}_1": K2,
        }
        return worker_processes(count, env, *args)

    return start


def select(worker: Worker, now: float, **scope: str | None) -> Any:
    return worker("select", provider=PROVIDER, scope=scope, now=now)


def record(
    worker: Worker,
    key: str,
    status: int,
    now: float,
    retry_after: float | None = None,
    **scope: str | None,
) -> None:
    worker(
        "record",
        provider=PROVIDER,
        key=key,
        status=status,
        scope=scope,
        now=now,
        retry_after=retry_after,
    )


# -- across processes -------------------------------------------------------------------------


def test_a_429_in_one_process_is_honoured_by_every_other(
    workers: Callable[..., list[Worker]],
) -> None:
    first, second, third = workers(3)
    record(first, K1, 429, T, model="gpt-a")
    for other in (second, third):
        assert select(other, T + 1, model="gpt-a") == {"value": K2}
        assert select(other, T + 1, model="gpt-b") == {"value": K1}


def test_nanogpt_select_key_honours_another_process(
    workers: Callable[..., list[Worker]],
) -> None:
    first, second = workers(2)
    first("nano_record", key=K1, status=429, model="gpt-a", now=T)
    answer = second(
        "nano_select", keys=[K1, K2], statuses={K1: 200, K2: 200}, model="gpt-a", now=T + 1
    )
    assert answer == {"value": K2}  # K1 was filtered out before probing
    first("nano_record", key=K2, status=429, model="gpt-a", now=T)
    refused = second(
        "nano_select", keys=[K1, K2], statuses={K1: 200, K2: 200}, model="gpt-a", now=T + 1
    )
    assert refused == {"error": "ModelCooldownExhausted", "retry_after": 59}


def test_all_cooling_is_the_same_429_everywhere(workers: Callable[..., list[Worker]]) -> None:
    group = workers(3)
    record(group[0], K1, 429, T, retry_after=30, model="gpt-a")
    record(group[1], K2, 429, T, retry_after=30, model="gpt-a")
    answers = [select(worker, T + 1, model="gpt-a") for worker in group]
    assert all(a["error"] == "ModelCooldownExhausted" for a in answers)
    assert {a["retry_after"] for a in answers} <= {29, 30}


def test_success_clears_only_its_model_everywhere(workers: Callable[..., list[Worker]]) -> None:
    first, second, third = workers(3)
    record(first, K1, 429, T, model="gpt-a")
    record(first, K1, 429, T, model="gpt-b")
    record(second, K1, 200, T + 1, model="gpt-a")
    assert select(third, T + 2, model="gpt-a") == {"value": K1}
    assert select(third, T + 2, model="gpt-b") == {"value": K2}
    assert select(first, T + 2, model="gpt-b") == {"value": K2}


def test_wide_401_cools_every_model_everywhere(workers: Callable[..., list[Worker]]) -> None:
    first, second = workers(2)
    record(first, K1, 401, T, model="gpt-a")
    assert select(second, T + 1, model="gpt-z") == {"value": K2}
    assert select(second, T + 1, quota_bucket="tier") == {"value": K2}
    assert select(second, T + 301, model="gpt-z") == {"value": K1}


def test_a_later_shorter_cooldown_never_shortens_a_longer_one(
    workers: Callable[..., list[Worker]],
) -> None:
    first, second, third = workers(3)
    record(first, K1, 429, T, retry_after=100, model="gpt-a")
    record(second, K1, 429, T + 1, retry_after=5, model="gpt-a")
    for worker in (first, second, third):
        assert select(worker, T + 50, model="gpt-a") == {"value": K2}
    for worker in (first, second, third):
        assert select(worker, T + 100.5, model="gpt-a") == {"value": K1}


def test_global_cap_without_eviction_and_503_everywhere(
    workers: Callable[..., list[Worker]],
) -> None:
    group = workers(3, "--shared-cap", "4")
    for index in range(4):
        group[index % 3]("store_record", key=f"k{index}", model="m", retry_after=60, now=T)
    group[2]("store_record", key="k-over", model="m", retry_after=30, now=T)  # the fifth
    for worker in group:
        refused = worker("store_select", keys=["fresh"], model="m", now=T + 1)
        assert refused == {"error": "ModelCooldownCapacity", "retry_after": 29}
        for index in range(4):  # nothing was evicted: each filler still cools everywhere
            cooled = worker("store_select", keys=[f"k{index}"], model="m", now=T + 1)
            assert cooled == {"error": "ModelCooldownExhausted", "retry_after": 59}
    for worker in group:
        assert worker("store_select", keys=["fresh"], model="m", now=T + 31) == {"value": "fresh"}


def test_an_escalated_throttle_is_shared_as_the_credential_wide_cooldown(
    redis_url: str, prefix: str
) -> None:
    """Over its scope budget a key cools everywhere, in every process too."""
    store = ModelCooldown(scopes_per_credential=1)
    peer = ModelCooldown()
    for each in (store, peer):
        each.attach_shared(RedisObservations(redis_url, prefix=prefix), secret=SECRET.encode())
    store.record("p", K1, THROTTLED, model="a", retry_after_seconds=30, now=T)
    store.record("p", K1, THROTTLED, model="b", retry_after_seconds=30, now=T)
    assert store.stats()["escalated_total"] == 1
    assert peer.select("p", [K1, K2], model="c", now=T + 1) == K2
    assert peer.explain("p", [K1], model="c", now=T + 1)[0][0] == "credential"


def test_different_secrets_give_different_ids(
    workers: Callable[..., list[Worker]], redis_url: str, prefix: str
) -> None:
    (first,) = workers(1)
    (same,) = workers(1)
    (other,) = workers(1, secret="another-" + "y" * 40)
    record(first, K1, 429, T, model="gpt-a")
    assert select(same, T + 1, model="gpt-a") == {"value": K2}
    assert select(other, T + 1, model="gpt-a") == {"value": K1}
    members = redis.Redis.from_url(redis_url).zrange(f"{{{prefix}}}:deadlines", 0, -1)
    assert len(members) == 1


# -- what Redis holds -------------------------------------------------------------------------


def test_redis_holds_only_hex_ids_and_numbers(
    workers: Callable[..., list[Worker]], redis_url: str, prefix: str
) -> None:
    first, second = workers(2)
    record(first, K1, 429, T, model="gpt-SECRET-model")
    record(first, K2, 429, T, quota_bucket="SECRET-bucket")
    record(second, K1, 401, T, model="gpt-SECRET-model")
    client = redis.Redis.from_url(redis_url)
    dump = []
    for key in client.scan_iter(f"{{{prefix}}}:*"):
        dump.append(key)
        if client.type(key) == b"zset":
            for member, score in client.zrange(key, 0, -1, withscores=True):
                assert len(member) in (64, 128)
                int(member, 16)
                assert score > 0
                dump.append(member)
        else:
            dump.append(client.get(key) or b"")
    blob = b" ".join(dump)
    for secret in (K1, K2, "gpt-SECRET-model", "SECRET-bucket", SECRET, "SECRET"):
        assert secret.encode() not in blob
    assert client.zcard(f"{{{prefix}}}:deadlines") == 3


# -- failure and recovery ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_redis(port: int, tmp_path: Path) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_timeout=0.2)
    for _ in range(100):
        try:
            client.ping()
            return server
        except redis.RedisError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


@pytest.fixture
def own_redis(
    redis_url: str, tmp_path: Path
) -> Iterator[tuple[int, Callable[[], None], Callable[[], None]]]:
    if shutil.which("redis-server") is None:
        if os.environ.get("MODEL_COOLDOWN_REQUIRE_REDIS") == "1":
            pytest.fail("MODEL_COOLDOWN_REQUIRE_REDIS=1 but redis-server is not installed")
        pytest.skip("redis-server is not installed")
    port = free_port()
    servers = [start_redis(port, tmp_path)]

    def stop() -> None:
        servers[-1].terminate()
        servers[-1].wait(timeout=10)

    def restart() -> None:
        servers.append(start_redis(port, tmp_path))

    yield port, stop, restart
    for server in servers:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=10)


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    try:
        result = call()
    except ModelCooldownExhausted as error:
        result = error
    return result, time.perf_counter() - started


def test_redis_down_falls_back_locally_and_recovers(
    own_redis: tuple[int, Callable[[], None], Callable[[], None]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    port, stop, restart = own_redis
    store = ModelCooldown()
    store.attach_shared(RedisObservations(f"redis://127.0.0.1:{port}/0"), secret=SECRET.encode())
    peer = ModelCooldown()
    peer.attach_shared(RedisObservations(f"redis://127.0.0.1:{port}/0"), secret=SECRET.encode())
    store.record("p", K1, THROTTLED, model="m", now=T)
    assert peer.select("p", [K1, K2], model="m", now=T + 1) == K2  # shared while up

    stop()
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        durations = []
        for step in range(5):  # no exception reaches the caller, each call stays bounded
            now = T + 2 + step * 0.1
            _, took = timed(lambda: store.record("p", K2, THROTTLED, model="m", now=now))  # noqa: B023
            durations.append(took)
            chosen, took = timed(lambda: store.select("p", [K1, K2], model="m", now=now))  # noqa: B023
            durations.append(took)
            assert isinstance(chosen, ModelCooldownExhausted)  # local cooldowns still hold
        assert max(durations) < 0.5  # bounded by the 100 ms socket timeout, not hanging
        stats = store.stats()
        assert stats["shared_degraded"] is True
        assert stats["shared_errors_total"] == 1  # backoff: no retry on every call
        assert store.select("p", [K1, K2], model="other", now=T + 3) == K1
        unavailable = [r for r in caplog.records if "unavailable" in r.getMessage()]
        assert len(unavailable) == 1
        assert str(port) not in caplog.text

        restart()
        assert peer.select("p", [K1, K2], model="m", now=T + 10) == K1  # peer retries too
        store.record("p", K2, THROTTLED, model="z", now=T + 10)
        assert store.stats()["shared_degraded"] is False
        assert peer.select("p", [K2, K1], model="z", now=T + 11) == K1  # shared again
        assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_a_hanging_redis_is_cut_off_by_the_socket_timeout() -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        store = ModelCooldown()
        store.attach_shared(
            RedisObservations(f"redis://127.0.0.1:{port}/0"), secret=SECRET.encode()
        )
        store.record("p", K1, THROTTLED, model="m", now=T)
        chosen, took = timed(lambda: store.select("p", [K1, K2], model="m", now=T + 0.5))
        assert chosen == K2
        assert took < 0.5  # one 100 ms timeout at most, then the backoff skips Redis
        assert store.stats()["shared_errors_total"] == 1


def test_closed_port_degrades_without_raising() -> None:
    store = ModelCooldown()
    store.attach_shared(
        RedisObservations(f"redis://127.0.0.1:{free_port()}/0"), secret=SECRET.encode()
    )
    store.record("p", K1, THROTTLED, model="m", now=T)
    assert store.select("p", [K1, K2], model="m", now=T + 1) == K2
    assert store.stats()["shared_degraded"] is True


# -- configuration ----------------------------------------------------------------------------


def test_settings_attach_the_process_store(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cooldown import CooldownSettings
    from cooldown.shared import share_when_configured

    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", redis_url)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", SECRET)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_PREFIX", prefix)
    monkeypatch.setenv(BASE, K1)
    try:
        CredentialPool.record(PROVIDER, K1, 429, model="gpt-a", now=T)
        assert model_cooldown.stats()["shared"] is True
        assert redis.Redis.from_url(redis_url).zcard(f"{{{prefix}}}:deadlines") == 1
        monkeypatch.delenv("MODEL_COOLDOWN_REDIS_URL")
        CredentialPool.select(PROVIDER, model="gpt-b", now=T)
        assert model_cooldown.stats()["shared"] is False
    finally:
        share_when_configured(model_cooldown, CooldownSettings())


def test_foreign_data_under_the_prefix_degrades_instead_of_raising(
    redis_url: str, prefix: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set(f"{{{prefix}}}:overflow", "not-a-number")
    store = ModelCooldown()
    store.attach_shared(RedisObservations(redis_url, prefix=prefix), secret=SECRET.encode())
    store.record("p", K1, THROTTLED, model="m", now=T)
    assert store.select("p", [K1, K2], model="m", now=T + 1) == K2
    assert store.stats()["shared_degraded"] is True
    client.set(f"{{{prefix}}}:deadlines", "wrong type")
    assert store.select("p", [K1, K2], model="m", now=T + 5) == K2


def test_one_read_of_the_live_ids_serves_every_status_for_a_second(
    redis_url: str, prefix: str
) -> None:
    backend = RedisObservations(redis_url, prefix=prefix)
    client = backend._connected()
    reads: list[object] = []
    original = client.zrangebyscore
    client.zrangebyscore = lambda *args, **kwargs: reads.append(args) or original(*args, **kwargs)
    now = time.monotonic()
    for _ in range(5):  # /status and /metrics ask once per provider
        assert backend.live_entries(now) == []
    assert backend.live_entries(now + 0.5) == []
    assert len(reads) == 1
    backend.live_entries(now + 1.5)
    assert len(reads) == 2
    backend.close()


class FailingCommand:
    """A Redis call that takes `seconds` and then fails, as a frozen server does."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self) -> Any:
        time.sleep(self.seconds)
        raise ConnectionError("timed out")


def test_the_backoff_counts_from_the_failure_not_the_start_of_the_call() -> None:
    from cooldown.shared.calls import FIRST_BACKOFF_SECONDS
    from cooldown.shared.observations import RedisObservations

    backend = RedisObservations("redis://127.0.0.1:1/0")
    assert backend._call_with(100.0, FailingCommand(0.2), lambda answer: answer) is None
    assert backend._retry_at == pytest.approx(100.2 + FIRST_BACKOFF_SECONDS, abs=0.05)


def test_concurrent_failures_of_one_outage_do_not_double_the_backoff() -> None:
    from cooldown.shared.calls import FIRST_BACKOFF_SECONDS
    from cooldown.shared.observations import RedisObservations

    backend = RedisObservations("redis://127.0.0.1:1/0")
    threads = [
        threading.Thread(target=backend._call_with, args=(100.0, FailingCommand(0.1), repr))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert backend._backoff == FIRST_BACKOFF_SECONDS
    assert backend.stats()["shared_errors_total"] == 8
    retry_at = backend._retry_at
    backend._call_with(retry_at, FailingCommand(0.0), repr)  # the retry after it fails
    assert backend._backoff == 2 * FIRST_BACKOFF_SECONDS
