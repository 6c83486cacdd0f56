"""Shared state you can trust: tampered, frozen, clustered and sentinel-managed Redis.

Every server here is a redis-server this test run starts on a free loopback port and stops
by PID (see `redis_servers` in conftest.py); the 6379 server is not touched.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cooldown import (
    CooldownSettings,
    CredentialPool,
    ModelCooldown,
    ModelCooldownCapacity,
    ModelCooldownExhausted,
    NanoGPTKeyPool,
    classify_upstream_outcome,
    model_cooldown,
    settings,
)

from ..conftest import (
    ServedWithoutHeaders,
    free_port,
    longest_loop_gap,
    two_processes_share_one_probe,
)

try:
    import redis
except ImportError:
    if os.environ.get("MODEL_COOLDOWN_REQUIRE_REDIS") == "1":
        raise
    pytest.skip("the [redis] extra is not installed", allow_module_level=True)

from cooldown.shared import share_when_configured
from cooldown.shared.calls import CLOCK_SKEW_SECONDS
from cooldown.shared.observations import RedisObservations

SECRET = "trust-secret-" + "z" * 40
PREFIX = "trust"
DEADLINES, OVERFLOW = "{trust}:deadlines", "{trust}:overflow"
K1, K2 = "sk-trust-SECRET-one", "sk-trust-SECRET-two"
THROTTLED = classify_upstream_outcome(429)
TEN_YEARS_MS = 10 * 365 * 24 * 3600 * 1000
P = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"
Server = Any  # conftest.RedisServer
Worker = Callable[..., Any]  # conftest.Worker


def attached(url: str, *, timeout: float = 0.1, max_entries: int = 10000) -> ModelCooldown:
    store = ModelCooldown()
    backend = RedisObservations(url, prefix=PREFIX, socket_timeout=timeout, max_entries=max_entries)
    store.attach_shared(backend, secret=SECRET.encode())
    return store


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    try:
        result = call()
    except (ModelCooldownExhausted, ModelCooldownCapacity) as error:
        result = error
    return result, time.perf_counter() - started


def wall_ms(store_now: float) -> int:
    """What a process-wide offset maps a monotonic `now` to (as RedisObservations does)."""
    return int((store_now + time.time() - time.monotonic()) * 1000)


# -- 1, 2. distrust of shared numbers -----------------------------------------------------------


def test_an_overflow_set_ten_years_ahead_lives_at_most_max_seconds(
    redis_servers: Callable[..., Server],
) -> None:
    server = redis_servers()
    client = redis.Redis(port=server.port)
    now = time.monotonic()
    client.set(OVERFLOW, wall_ms(now) + TEN_YEARS_MS)
    store = attached(server.url)
    with pytest.raises(ModelCooldownCapacity) as refused:
        store.select("p", [K1], model="m", max_seconds=60, now=now)
    assert refused.value.retry_after == 60  # capped, not ten years
    assert float(client.get(OVERFLOW)) <= wall_ms(now + 60) + 1  # and rewritten in Redis
    assert attached(server.url).select("p", [K1], model="m", max_seconds=60, now=now + 61) == K1


def test_entries_scored_far_ahead_or_at_infinity_are_capped(
    redis_servers: Callable[..., Server],
) -> None:
    server = redis_servers()
    client = redis.Redis(port=server.port)
    now = time.monotonic()
    writer = attached(server.url)
    writer.record("p", K1, THROTTLED, model="m", retry_after_seconds=30, now=now)
    writer.record("p", K2, THROTTLED, model="m", retry_after_seconds=30, now=now)
    members = client.zrange(DEADLINES, 0, -1)
    client.zadd(DEADLINES, {members[0]: wall_ms(now) + TEN_YEARS_MS, members[1]: math.inf})
    reader = attached(server.url)  # a fresh process: nothing local
    with pytest.raises(ModelCooldownExhausted) as refused:
        reader.select("p", [K1, K2], model="m", max_seconds=60, now=now + 1)
    assert refused.value.retry_after == 60
    scores = [score for _, score in client.zrange(DEADLINES, 0, -1, withscores=True)]
    assert all(math.isfinite(score) and score <= wall_ms(now + 61) + 1 for score in scores)
    assert reader.select("p", [K1, K2], model="m", max_seconds=60, now=now + 62) == K1
    assert reader.stats()["shared_errors_total"] == 0  # capping is not an error


def test_a_deadline_within_the_skew_allowance_is_trusted(
    redis_servers: Callable[..., Server],
) -> None:
    server = redis_servers()
    now = time.monotonic()
    writer = attached(server.url)  # a host whose clock runs a few seconds ahead
    writer.record("p", K1, THROTTLED, model="m", retry_after_seconds=60, now=now + 5)
    reader = attached(server.url)
    with pytest.raises(ModelCooldownExhausted) as refused:
        reader.select("p", [K1], model="m", max_seconds=60, now=now)
    assert refused.value.retry_after == 60  # 65 s left, within 60 + skew: kept, shown capped
    assert CLOCK_SKEW_SECONDS >= 5


@pytest.mark.parametrize("garbage", ["not-a-number", "nan"])
def test_an_unreadable_overflow_degrades_that_call(
    redis_servers: Callable[..., Server], garbage: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_servers()
    redis.Redis(port=server.port).set(OVERFLOW, garbage)
    store = attached(server.url)
    store.record("p", K1, THROTTLED, model="m", now=1000)
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert store.select("p", [K1, K2], model="m", now=1001) == K2  # the local answer
    assert store.stats()["shared_errors_total"] >= 1
    assert garbage not in caplog.text


@pytest.mark.parametrize("overflow", ["inf", "1e400"])
def test_an_infinite_overflow_is_capped_not_raised(
    redis_servers: Callable[..., Server], overflow: str
) -> None:
    server = redis_servers()
    redis.Redis(port=server.port).set(OVERFLOW, overflow)
    with pytest.raises(ModelCooldownCapacity) as refused:
        attached(server.url).select("p", [K1], model="m", max_seconds=30, now=1000)
    assert refused.value.retry_after == 30


def test_a_lowered_maximum_shortens_shared_cooldowns(redis_servers: Callable[..., Server]) -> None:
    server = redis_servers()
    now = time.monotonic()
    attached(server.url).record("p", K1, THROTTLED, model="m", retry_after_seconds=3000, now=now)
    reader = attached(server.url)
    with pytest.raises(ModelCooldownExhausted):
        reader.select("p", [K1], model="m", max_seconds=10, now=now + 1)
    fresh = attached(server.url)
    assert fresh.select("p", [K1], model="m", max_seconds=3600, now=now + 12) == K1


# -- 5. timeouts: the URL never loosens them ----------------------------------------------------


def test_a_frozen_server_costs_one_timeout_even_if_the_url_asks_for_more(
    redis_servers: Callable[..., Server],
) -> None:
    server = redis_servers()
    store = attached(server.url + "?socket_timeout=2&socket_connect_timeout=2")
    store.record("p", K1, THROTTLED, model="m", now=1000)  # connected and working
    server.freeze()
    chosen, took = timed(lambda: store.select("p", [K1, K2], model="m", now=1001))
    assert chosen == K2
    assert took < 0.5  # the 100 ms default, not the URL's 2 s
    assert store.stats()["shared_degraded"] is True


@pytest.fixture
def process_shares(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Server, str], None]]:
    """Point this process's pools at `server` through the environment, as a deployment does."""

    def configure(server: Server, timeout_ms: str) -> None:
        monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
        monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", server.url)
        monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", SECRET)
        monkeypatch.setenv("MODEL_COOLDOWN_REDIS_TIMEOUT_MS", timeout_ms)
        monkeypatch.setenv(BASE, K1)
        monkeypatch.setenv(f"{BASE}_1", K2)

    yield configure
    share_when_configured(model_cooldown, CooldownSettings())  # detach


def test_the_timeout_setting_applies(
    redis_servers: Callable[..., Server], process_shares: Callable[[Server, str], None]
) -> None:
    server = redis_servers()
    process_shares(server, "400")
    CredentialPool.record(P, K1, 429, model="m")
    server.freeze()
    _, took = timed(lambda: CredentialPool.select(P, model="other"))
    assert 0.3 <= took < 1.5


def test_an_option_the_client_cannot_use_turns_sharing_off_not_cooldowns(
    monkeypatch: pytest.MonkeyPatch, fresh_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", "redis://127.0.0.1:6379/0?cache_config=1")
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", SECRET)
    monkeypatch.setenv(BASE, K1)
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert settings() == CooldownSettings(enabled=True)
        CredentialPool.record(P, K1, 429, model="m")
        with pytest.raises(ModelCooldownExhausted):
            CredentialPool.select(P, model="m")
    assert model_cooldown.stats()["shared"] is False
    assert [r.getMessage() for r in caplog.records] == [
        "MODEL_COOLDOWN_REDIS_URL is malformed; cooldowns stay on, but are not shared"
    ]


@pytest.mark.parametrize("junk", ["junk", str(2**63 - 1), "a string key"])
def test_a_broken_fleet_counter_never_stops_sharing_cooldowns(
    redis_servers: Callable[..., Server], junk: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_servers()
    if junk == "a string key":
        server.cli("set", "{trust}:fleet", "not a hash")
    else:
        server.cli("hset", "{trust}:fleet", "exhausted_total", junk)
    one, two = attached(server.url), attached(server.url)
    one.record(P, K1, THROTTLED, model="m", retry_after_seconds=30, now=0)
    with caplog.at_level(logging.WARNING, "cooldown"):
        for now in (1, 2, 3):  # each refusal adds to the broken counter
            with pytest.raises(ModelCooldownExhausted):
                one.select(P, [K1], model="m", now=now)
    two.record(P, K2, THROTTLED, model="m", retry_after_seconds=30, now=4)
    assert one.available(P, [K1, K2], model="m", now=5) == []  # the other's cooldown arrived
    assert two.available(P, [K1, K2], model="m", now=5) == []
    assert one.stats()["shared_degraded"] is False
    assert one.stats()["shared_errors_total"] == 0
    assert len([r for r in caplog.records if "fleet counter" in r.getMessage()]) <= 1


# -- 6. no lock across I/O ---------------------------------------------------------------------


def test_a_frozen_redis_never_stalls_unscoped_calls_or_other_pools(
    redis_servers: Callable[..., Server], process_shares: Callable[[Server, str], None]
) -> None:
    server = redis_servers()
    process_shares(server, "3000")
    try:
        CredentialPool.select(P, model="m")  # connected
        server.freeze()
        blocked = threading.Thread(target=lambda: CredentialPool.select(P, model="m"))
        blocked.start()
        time.sleep(0.2)  # the scoped call is now waiting on the frozen server
        started = time.perf_counter()
        assert CredentialPool.select(P) == K1
        CredentialPool.record(P, K2, 429)
        assert CredentialPool.available(P) == [K1]
        NanoGPTKeyPool.record_result("nano", 429)
        assert NanoGPTKeyPool.select_available_key(["nano", "nano-2"]) == "nano-2"
        took = time.perf_counter() - started
        assert blocked.is_alive()  # still inside its round trip
        assert took < 0.5
        server.thaw()
        blocked.join(10)
    finally:
        server.thaw()


def test_the_first_scoped_call_against_a_frozen_redis_costs_one_timeout(
    redis_servers: Callable[..., Server], process_shares: Callable[[Server, str], None]
) -> None:
    server = redis_servers()
    process_shares(server, "1500")
    server.freeze()  # accepts connections, answers nothing: attach, check and call all wait

    def send(key: str) -> ServedWithoutHeaders:
        return ServedWithoutHeaders()

    try:
        answer, took = timed(lambda: CredentialPool.dispatch(P, send, model="m"))
        assert isinstance(answer, ServedWithoutHeaders)  # served from the local table
        assert took < 1.5 + 0.5  # one timeout, then the backoff
        _, again = timed(lambda: CredentialPool.dispatch(P, send, model="m"))
        assert again < 0.2
    finally:
        server.thaw()


def test_the_first_adispatch_attaches_to_a_frozen_redis_off_the_event_loop(
    redis_servers: Callable[..., Server], process_shares: Callable[[Server, str], None]
) -> None:
    server = redis_servers()
    process_shares(server, "1000")
    server.freeze()  # connect is accepted by the kernel; INFO and the secret check time out

    async def send(key: str) -> ServedWithoutHeaders:
        return ServedWithoutHeaders()

    try:
        stall, _ = longest_loop_gap(lambda: CredentialPool.adispatch(P, send, model="m"))
        assert stall < 0.2  # the 1 s timeouts were waited in a worker thread
    finally:
        server.thaw()


# -- 3, 4. Cluster, Sentinel, unix sockets ------------------------------------------------------


@pytest.fixture
def cluster(redis_servers: Callable[..., Server]) -> list[Server]:
    nodes = [
        redis_servers("--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
        for _ in range(3)
    ]
    subprocess.run(
        [
            "redis-cli",
            "--cluster",
            "create",
            *(f"127.0.0.1:{node.port}" for node in nodes),
            "--cluster-replicas",
            "0",
            "--cluster-yes",
        ],
        capture_output=True,
        timeout=60,
        check=True,
    )
    deadline = time.monotonic() + 30
    while not all("cluster_state:ok" in node.cli("cluster", "info") for node in nodes):
        assert time.monotonic() < deadline, "the cluster did not come up"
        time.sleep(0.1)
    return nodes


def worker_env(url: str) -> dict[str, str]:
    return {
        "MODEL_COOLDOWN_ENABLED": "true",
        "MODEL_COOLDOWN_REDIS_URL": url,
        "MODEL_COOLDOWN_REDIS_SECRET": SECRET,
        "MODEL_COOLDOWN_REDIS_PREFIX": PREFIX,
        BASE: K1,
        f"{BASE}_1": K2,
    }


def shared_between_two_processes(workers: list[Worker]) -> None:
    first, second = workers
    now = 5000.0
    scope = {"model": "gpt-a"}
    first("record", provider=P, key=K1, status=429, scope=scope, retry_after=60, now=now)
    assert second("select", provider=P, scope=scope, now=now + 1) == {"value": K2}
    two_processes_share_one_probe(workers, P, (K1, K2), "gpt-probe", now + 1000)
    stats = second("stats")["value"]
    assert (stats["shared"], stats["shared_errors_total"]) == (True, 0)


@pytest.mark.parametrize("scheme", ["redis+cluster", "redis"])
def test_cluster_shares_observations_between_processes(
    cluster: list[Server], worker_processes: Callable[..., list[Worker]], scheme: str
) -> None:
    hosts = ",".join(f"127.0.0.1:{node.port}" for node in cluster[:2])
    url = f"redis+cluster://{hosts}" if scheme == "redis+cluster" else cluster[1].url
    shared_between_two_processes(worker_processes(2, worker_env(url), "--stats-of-pool"))
    client = redis.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    assert client.zcard(DEADLINES) == 1  # one slot for every key of the prefix
    assert client.keyslot(DEADLINES) == client.keyslot(OVERFLOW)


def test_sentinel_finds_the_primary(
    redis_servers: Callable[..., Server], worker_processes: Callable[..., list[Worker]]
) -> None:
    primary = redis_servers()
    sentinel = redis_servers(sentinel_of=primary)
    deadline = time.monotonic() + 30
    while str(primary.port) not in sentinel.cli(
        "sentinel", "get-master-addr-by-name", "cooldown-primary"
    ):
        assert time.monotonic() < deadline, "the sentinel did not find the primary"
        time.sleep(0.1)
    url = f"redis+sentinel://127.0.0.1:{sentinel.port}/cooldown-primary"
    shared_between_two_processes(worker_processes(2, worker_env(url), "--stats-of-pool"))
    assert redis.Redis(port=primary.port).zcard(DEADLINES) == 1


def test_unix_socket(
    redis_servers: Callable[..., Server], worker_processes: Callable[..., list[Worker]]
) -> None:
    server = redis_servers(unix=True)
    shared_between_two_processes(worker_processes(2, worker_env(server.url), "--stats-of-pool"))
    assert redis.Redis(unix_socket_path=server.unix_path).zcard(DEADLINES) == 1


# -- frozen and far-away servers, a caller passing zero -------------------------------------


def test_a_frozen_cluster_costs_a_bounded_wait_once_per_backoff(cluster: list[Server]) -> None:
    """redis-py re-reads the topology from every node after a timeout: with every node frozen
    a call waits (1 + nodes) timeouts, and the backoff spares the calls after it."""
    hosts = ",".join(f"127.0.0.1:{node.port}" for node in cluster)
    store = attached(f"redis+cluster://{hosts}", timeout=0.5)
    store.record("p", K1, THROTTLED, model="m", now=5000.0)  # connected, topology known
    assert store.stats()["shared_errors_total"] == 0
    for node in cluster:
        node.freeze()
    try:
        _, first = timed(lambda: store.record("p", K2, THROTTLED, model="m", now=5001.0))
        _, second = timed(lambda: store.record("p", K2, THROTTLED, model="m", now=5001.5))
    finally:
        for node in cluster:
            node.thaw()
    assert first < (1 + len(cluster)) * 0.5 + 0.4  # no retry on top (was 2 attempts)
    assert second < 0.05  # inside the backoff: Redis is not asked
    assert store.stats()["shared_errors_total"] == 1


def test_a_caller_passing_zero_cuts_no_shared_cooldown(
    redis_servers: Callable[..., Server],
) -> None:
    server = redis_servers()
    writer, other = attached(server.url), attached(server.url)
    writer.record("p", K1, THROTTLED, model="m", retry_after_seconds=3000, now=5000.0)
    other.select("p", [K2], model="m", now=5000.0)  # this process has seen the real time
    other.record("p", K2, THROTTLED, model="m", now=0.0)  # one caller with a zero clock
    with pytest.raises(ModelCooldownExhausted) as raised:
        attached(server.url).select("p", [K1], model="m", now=5001.0)
    assert raised.value.retry_after == 2999


# -- in-flight counts no attempt could make ----------------------------------------------------

INFLIGHT = f"{{{PREFIX}}}:inflight"


@pytest.mark.parametrize("count", ["inf", "1e308", "1000000", "1.5", "nan"])
def test_an_insane_in_flight_count_is_dropped_not_used(
    redis_servers: Callable[..., Server], count: str
) -> None:
    server = redis_servers()
    client = redis.Redis(port=server.port)
    now = time.monotonic()
    store = attached(server.url)
    taken = store.admit("p", [K1], model="m", now=now)
    assert taken is not None
    with store.ending(taken[1]):  # the provider announced 5 requests left for a minute
        store.record_budget("p", K1, model="m", remaining=5, reset_seconds=60, now=now)
    store.finish(taken[1], served=True)
    (entry,) = client.hkeys(f"{{{PREFIX}}}:budgets")
    client.hset(INFLIGHT, entry, count)
    again = attached(server.url).admit("p", [K1], model="m", now=now + 1)  # another process
    assert again is not None
    assert again[0] == K1  # the budget is not held spent by a count no attempt could make
    assert float(client.hget(INFLIGHT, entry)) == 1  # dropped, then this attempt counted


@pytest.mark.parametrize(
    ("table", "value"),
    [
        ("budgets", "many"),
        ("budgets", "inf"),
        ("refills", "1e999,nan,x"),
        ("refills", "no commas"),
        ("costs", "1e30"),
        ("costs", "-5"),
    ],
)
def test_a_tampered_token_budget_or_cost_is_ignored_not_raised(
    redis_servers: Callable[..., Server], table: str, value: str
) -> None:
    """Whatever another program wrote where budgets live, admission answers (no error, no
    degraded call) and reads what it cannot trust as absent."""
    server = redis_servers()
    client = redis.Redis(port=server.port)
    now = time.monotonic()
    store = attached(server.url)
    taken = store.admit("p", [K1], model="m", now=now, cost=10)
    assert taken is not None
    with store.ending(taken[1]):  # 5000 tokens left of 60 000, refilling for a minute
        store.record_token_budget(
            "p", K1, model="m", remaining=5000, reset_seconds=60, limit=60_000, now=now
        )
    store.finish(taken[1], served=True)
    for member in client.hkeys(f"{{{PREFIX}}}:budgets"):
        owner = member.removeprefix(b"t")
        client.hset(f"{{{PREFIX}}}:{table}", owner if table == "costs" else member, value)
    other = attached(server.url)  # another process
    again = other.admit("p", [K1], model="m", now=now + 1, cost=100)
    assert again is not None
    assert again[1].shared is not None  # Redis answered
    assert other.stats()["shared_errors_total"] == 0


def test_members_scored_infinite_stop_arming_the_capacity_guard(
    redis_servers: Callable[..., Any],
) -> None:
    import redis

    from cooldown.shared.observations import RedisObservations

    server = redis_servers()
    client = redis.Redis.from_url(server.url)
    client.zadd("{inf}:deadlines", {f"tampered-{index}": math.inf for index in range(200)})
    store = ModelCooldown()
    store.attach_shared(
        RedisObservations(server.url, prefix="inf", max_entries=200), secret=b"s" * 32
    )
    now = 1000.0
    for step in range(5):  # each write cuts up to 64 of them to now + max
        store.record(
            "p", f"k{step}", classify_upstream_outcome(429), model="m", now=now, max_seconds=20
        )
    assert client.zcount("{inf}:deadlines", "(+inf", "+inf") == 0
    assert client.zcount("{inf}:deadlines", "+inf", "+inf") == 0
    later = now + 30  # past the maximum: every cut member has expired
    assert store.select("p", ["fresh"], model="m", now=later, max_seconds=20) == "fresh"
    store.record("p", "fresh", classify_upstream_outcome(429), model="m", now=later, max_seconds=20)
    assert store.select("p", ["other"], model="m", now=later, max_seconds=20) == "other"
    client.close()
    store.detach_shared()


def test_a_frozen_sentinel_delays_a_call_by_one_timeout_at_most(
    redis_servers: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    primary = redis_servers()
    sentinel = redis_servers(sentinel_of=primary)
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv(
        "MODEL_COOLDOWN_REDIS_URL", f"redis+sentinel://127.0.0.1:{sentinel.port}/cooldown-primary"
    )
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", "sentinel-secret-" + "x" * 20)
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL", "sk-sentinel")
    sentinel.freeze()
    primary.freeze()
    durations = []
    for _ in range(3):
        started = time.monotonic()
        CredentialPool.record("ce-gpt-plus", "sk-sentinel", 429, model="m")
        durations.append(time.monotonic() - started)
    assert max(durations) < 0.5  # 100 ms timeouts, one attempt: not 2.5 to 5 s
    with pytest.raises(ModelCooldownExhausted):  # degraded to local: still cooling
        CredentialPool.select("ce-gpt-plus", model="m")


def test_an_unreachable_sentinel_is_as_quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv(
        "MODEL_COOLDOWN_REDIS_URL", f"redis+sentinel://127.0.0.1:{free_port()}/nowhere"
    )
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", "sentinel-secret-" + "x" * 20)
    started = time.monotonic()
    CredentialPool.record("ce-gpt-plus", "sk-x", 429, model="m")
    assert time.monotonic() - started < 0.5
