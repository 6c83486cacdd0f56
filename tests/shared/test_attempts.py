"""Attempt bookkeeping shared through Redis: in-flight counts, the probe after a release,
budgets and stale successes hold for every process, at one round trip per attempt start and
one per end.

Two stores attached to the same Redis with the same secret stand for two processes where time
must be passed as `now=`; real worker processes run real `dispatch`es whose `send` blocks.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from cooldown import (
    CredentialPool,
    ModelCooldown,
    ModelCooldownExhausted,
    classify_upstream_outcome,
    model_cooldown,
)
from cooldown.digests import PreparedHmac, credential_message, credential_prefix, scope_message

from ..conftest import SHARED_SECRET as SECRET
from ..conftest import two_processes_share_one_probe

try:
    import redis
except ImportError:
    if os.environ.get("MODEL_COOLDOWN_REQUIRE_REDIS") == "1":
        raise
    pytest.skip("the [redis] extra is not installed", allow_module_level=True)

from cooldown.shared.observations import RedisObservations

Worker = Callable[..., Any]  # conftest.Worker

P = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"
K1, K2 = "sk-attempt-SECRET-one", "sk-attempt-SECRET-two"
KEYS = [K1, K2]
MODEL = "gpt-SECRET-attempts"
THROTTLED = classify_upstream_outcome(429)
SERVED = classify_upstream_outcome(200)
T = 7000.0


def admit(store: ModelCooldown, now: float, **options: Any) -> Any:
    return store.admit(P, KEYS, model=MODEL, now=now, **options)


def answer(store: ModelCooldown, admitted: Any, status: int, now: float, **budget: Any) -> None:
    """Record an attempt's answer the way `dispatch` does, then end it."""
    key, attempt = admitted
    with store.ending(attempt):
        store.record(
            P,
            key,
            classify_upstream_outcome(status),
            model=MODEL,
            retry_after_seconds=30 if status == 429 else None,
            now=now,
            sent_at=attempt.started,
        )
        if budget:
            store.record_budget(P, key, model=MODEL, now=now, **budget)
    store.finish(attempt, served=status == 200)


def throttle(store: ModelCooldown, key: str, seconds: float, now: float) -> None:
    store.record(P, key, THROTTLED, model=MODEL, retry_after_seconds=seconds, now=now)


# -- the rules, across processes ----------------------------------------------------------------


def test_a_probe_claimed_in_one_process_holds_the_key_in_every_other(
    process: Callable[[], ModelCooldown],
) -> None:
    first, second = process(), process()
    throttle(first, K1, 10, T)
    throttle(first, K2, 100, T)
    probe = admit(first, T + 11)
    assert probe[0] == K1
    assert probe[1].probe
    with pytest.raises(ModelCooldownExhausted) as held:
        admit(second, T + 11.5)  # this process never saw K1 cool, nor the probe start
    assert held.value.retry_after == 1
    answer(first, probe, 200, T + 12)
    after = admit(second, T + 12.5)
    assert after[0] == K1
    assert not after[1].probe


def test_in_flight_counts_are_shared_so_spread_order_avoids_a_busy_key(
    process: Callable[[], ModelCooldown],
) -> None:
    first, second = process(), process()
    busy = admit(first, T, order="configured")
    assert busy[0] == K1
    answer(first, admit(first, T + 0.05, exclude=[K1]), 200, T + 0.06)  # K2: the more recent
    assert admit(second, T + 0.1)[0] == K2  # spread: K1 has one in flight elsewhere
    answer(first, busy, 200, T + 0.2)
    assert admit(second, T + 0.3, order="configured")[0] == K1


def test_a_budget_announced_in_one_process_limits_every_other(
    process: Callable[[], ModelCooldown],
) -> None:
    first, second = process(), process()
    answer(first, admit(first, T, order="configured"), 200, T + 0.1, remaining=1, reset_seconds=30)
    last_one = admit(first, T + 1, order="configured")
    assert last_one[0] == K1  # one request left: this one
    assert admit(second, T + 1.1, order="configured")[0] == K2  # K1's budget is spent
    answer(first, last_one, 200, T + 2, remaining=0, reset_seconds=28)
    assert admit(second, T + 31, order="configured")[0] == K1  # the reset ended it


def test_a_stale_success_elsewhere_does_not_reopen_a_key_another_process_throttled(
    process: Callable[[], ModelCooldown],
) -> None:
    first, second, third = process(), process(), process()
    slow = admit(first, T, order="configured")
    throttle(second, K1, 60, T + 1)  # a 429 answered while `slow` was in flight
    answer(first, slow, 200, T + 2)  # sent before that 429: it proves nothing
    assert third.select(P, KEYS, model=MODEL, now=T + 3) == K2
    second.record(P, K1, SERVED, model=MODEL, now=T + 4)  # sent after it: it clears it
    assert third.select(P, KEYS, model=MODEL, now=T + 5) == K1


def test_a_lease_left_by_a_crashed_process_expires_everywhere(
    process: Callable[[], ModelCooldown],
) -> None:
    crashed, survivor = process(), process()
    throttle(crashed, K1, 10, T)
    throttle(crashed, K2, 100, T)
    assert admit(crashed, T + 11, lease_seconds=5)[0] == K1  # never ended
    with pytest.raises(ModelCooldownExhausted):
        admit(survivor, T + 15)
    taken = admit(survivor, T + 16.5)
    assert taken[0] == K1
    assert taken[1].probe


# -- round trips and failure --------------------------------------------------------------------


class Reply:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}


def test_one_round_trip_starts_an_attempt_and_one_ends_it(
    monkeypatch: pytest.MonkeyPatch,
    enabled: None,
    redis_url: str,
    prefix: str,
    script_calls: list[str],
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", redis_url)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", SECRET)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_PREFIX", prefix)
    monkeypatch.setenv(BASE, K1)
    monkeypatch.setenv(f"{BASE}_1", K2)
    replies = iter([Reply(429), Reply(200)])
    answered = CredentialPool.dispatch(P, lambda key: next(replies), model=MODEL)
    assert answered is not None
    assert answered.status_code == 200
    # the secret check, once, as the store attaches; then one round trip per start and end
    assert script_calls == ["secret_check", "start", "end", "start", "end"]
    assert model_cooldown.stats()["shared_errors_total"] == 0


def test_redis_down_mid_dispatch_falls_back_to_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = ModelCooldown()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends
    store.attach_shared(RedisObservations(f"redis://127.0.0.1:{port}"), secret=SECRET.encode())
    throttle(store, K1, 10, T)
    taken = admit(store, T + 11)
    assert taken[0] == K1
    assert taken[1].probe
    assert admit(store, T + 11.1)[0] == K2  # and it holds the probe
    answer(store, taken, 200, T + 12)
    assert store.stats()["shared_errors_total"] >= 1


def test_a_probe_whose_end_missed_redis_is_released_once_it_answers(
    process: Callable[[], ModelCooldown], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blip at the end of a probe must not hold its key fleet-wide until the lease (300 s)
    runs out: the process releases it before its next admission once Redis answers."""
    first, second = process(), process()
    throttle(first, K1, 10, T)
    throttle(first, K2, 100, T)
    probe = admit(first, T + 11)
    working = RedisObservations._script

    def end_fails(self: RedisObservations, name: str) -> Any:
        if name == "end":
            raise redis.ConnectionError("a blip")
        return working(self, name)

    monkeypatch.setattr(RedisObservations, "_script", end_fails)
    answer(first, probe, 200, T + 12)  # released here, but not in Redis
    monkeypatch.setattr(RedisObservations, "_script", working)
    with pytest.raises(ModelCooldownExhausted):
        admit(second, T + 12.5)  # the lost end still holds K1 for everyone
    assert admit(first, T + 14)[0] == K1  # after the backoff: released, then admitted
    assert first.stats()["shared_errors_total"] == 1


def test_per_model_counts_count_each_cooldown_once_with_sharing(
    process: Callable[[], ModelCooldown],
) -> None:
    """A process's own cooldowns are in its table and in Redis, under different ids."""
    first, second = process(), process()
    for model in ("gpt-a", "gpt-b"):
        first.record(P, K1, THROTTLED, model=model, retry_after_seconds=30, now=T)
    second.record(P, K2, THROTTLED, model="gpt-a", retry_after_seconds=30, now=T)
    assert first.inspection.scoped_counts(P, KEYS, now=T + 1) == [2, 1]
    assert second.inspection.scoped_counts(P, KEYS, now=T + 1) == [2, 1]


# -- what Redis holds ---------------------------------------------------------------------------


def shared_ids(key: str) -> tuple[str, str]:
    digest = PreparedHmac(SECRET.encode())
    credential = digest(credential_message(credential_prefix(P), key))
    scope = scope_message(MODEL, None)
    assert scope is not None
    return credential.hex(), (credential + digest(scope)).hex()


def test_tampered_attempt_state_degrades_to_safe_answers(
    process: Callable[[], ModelCooldown], redis_url: str, prefix: str
) -> None:
    store = process()
    client = redis.Redis.from_url(redis_url)
    _, entry = shared_ids(K1)
    client.hset(f"{{{prefix}}}:inflight", entry, "not a number")
    client.hset(f"{{{prefix}}}:probes", entry, "no-such-lease")  # a probe that holds nothing
    client.zadd(f"{{{prefix}}}:leases", {f"forged:{entry}": float("inf")})
    client.hset(f"{{{prefix}}}:budgets", entry, "5")
    client.zadd(f"{{{prefix}}}:resets", {entry: float("inf")})
    client.hset(f"{{{prefix}}}:learned", entry, "inf,-1,,x,0")
    taken = admit(store, T, order="configured")
    assert taken[0] == K1
    assert taken[1].shared.learned is None  # an estimate that is not sane numbers is ignored
    answer(store, taken, 200, T + 0.1)
    assert store.stats()["shared_errors_total"] == 0
    forged = client.zscore(f"{{{prefix}}}:leases", f"forged:{entry}")
    assert forged is not None
    assert forged < (T + 3700 + 60) * 1000 + wall_offset_ms()
    client.close()


def wall_offset_ms() -> float:
    return (time.time() - time.monotonic()) * 1000


def test_redis_holds_only_hex_ids_leases_and_numbers(
    process: Callable[[], ModelCooldown], redis_url: str, prefix: str
) -> None:
    first, second = process(), process()
    throttle(first, K1, 10, T)
    held = admit(first, T + 11)
    answer(second, admit(second, T + 11.1), 200, T + 11.2, remaining=3, reset_seconds=9)
    client = redis.Redis.from_url(redis_url)
    blob = []
    fleet = f"{{{prefix}}}:fleet".encode()  # counter names: the package's own, fixed labels
    assert set(client.hkeys(fleet)) <= {b"exhausted_total", b"escalated_total", b"probes_total"}
    for name in client.scan_iter(f"{{{prefix}}}:*"):
        if name == fleet:
            blob += client.hvals(name)
            continue
        kind = client.type(name)
        if kind == b"zset":
            blob += [member for member, _ in client.zrange(name, 0, -1, withscores=True)]
        elif kind == b"hash":
            blob += [part for pair in client.hgetall(name).items() for part in pair]
        else:
            blob.append(client.get(name) or b"")
    for part in blob:  # a lease is "<pid>.<nonce>.<n>:<entry>[:<owner>:<cost>]"; a refill
        # "<limit>,<announced>,<largest>"; a token budget's owner is "t<owner>"
        for piece in re.split(r"[:,]", part.decode().removeprefix("t")):
            assert re.fullmatch(r"[0-9a-f.]*", piece), piece
    joined = b" ".join(blob)
    for secret in (K1, K2, MODEL, SECRET, "SECRET"):
        assert secret.encode() not in joined
    answer(first, held, 200, T + 12)
    assert client.hlen(f"{{{prefix}}}:inflight") == 0
    assert client.zcard(f"{{{prefix}}}:leases") == 0
    client.close()


# -- real processes -----------------------------------------------------------------------------


@pytest.fixture
def worker_env(redis_url: str, prefix: str) -> dict[str, str]:
    return {
        "MODEL_COOLDOWN_ENABLED": "true",
        "MODEL_COOLDOWN_REDIS_URL": redis_url,
        "MODEL_COOLDOWN_REDIS_SECRET": SECRET,
        "MODEL_COOLDOWN_REDIS_PREFIX": prefix,
        BASE: K1,
        f"{BASE}_1": K2,
    }


@pytest.fixture
def workers(
    worker_env: dict[str, str], worker_processes: Callable[..., list[Worker]]
) -> list[Worker]:
    return worker_processes(2, worker_env)


def test_two_processes_share_one_probe(workers: list[Worker]) -> None:
    two_processes_share_one_probe(workers, P, (K1, K2), MODEL, T)


def test_two_processes_spread_over_what_the_other_has_in_flight(workers: list[Worker]) -> None:
    first, second = workers
    scope = {"model": MODEL}
    assert first("hold_dispatch", name="a", provider=P, scope=scope, now=T)["value"] == {"key": K1}
    assert second("hold_dispatch", name="b", provider=P, scope=scope, now=T)["value"] == {"key": K2}
    assert first("answer_dispatch", name="a", status=200)["value"]["status"] == 200
    assert second("answer_dispatch", name="b", status=200)["value"]["status"] == 200


def test_a_window_learned_in_one_process_is_used_by_every_other(
    worker_env: dict[str, str], worker_processes: Callable[..., list[Worker]]
) -> None:
    """A throttles without advice at T; B's probe is served at T + 6: the window is at most
    6 s, and A (which never saw that answer) knows it at its next dispatch. (Each process
    maps monotonic time to wall time with its own offset: they agree to a millisecond.)"""
    first, second = worker_processes(2, {**worker_env, "MODEL_COOLDOWN_LEARN": "apply"})
    scope = {"model": MODEL, "order": "configured"}

    def dispatch(worker: Worker, at: float, status: int) -> Any:
        worker("hold_dispatch", name="d", provider=P, scope=scope, now=at)
        return worker("answer_dispatch", name="d", status=status)["value"]

    def bounds(worker: Worker) -> Any:
        return worker("learned_bounds", provider=P, key=K1, model=MODEL)["value"]

    assert dispatch(first, T, 429)["keys"] == [K1, K2]  # both cool for the first delay, 5 s
    assert dispatch(second, T + 6, 200) == {"status": 200, "keys": [K1]}
    # B learned from A's throttle and its own success:
    assert bounds(second) == pytest.approx([0.0, 6.0], abs=0.05)
    assert dispatch(first, T + 20, 200) == {"status": 200, "keys": [K1]}
    assert bounds(first) == pytest.approx([0.0, 6.0], abs=0.05)  # alone: "at most 20 s"


@pytest.mark.parametrize("answer", [[99, 0, None], [0, 0, None, b"soon"], "OK"])
def test_a_shared_answer_that_makes_no_sense_degrades_to_the_local_choice(
    process: Callable[[], ModelCooldown], monkeypatch: pytest.MonkeyPatch, answer: object
) -> None:
    """Whatever answers on the Redis port (a proxy, another program), no IndexError and no
    ValueError reaches a route: the call is counted and this process decides."""
    store = process()
    monkeypatch.setattr(RedisObservations, "_script", lambda self, name: lambda **_: answer)
    taken = admit(store, T, order="configured")
    assert taken[0] == K1
    assert taken[1].shared is None
    assert store.stats()["shared_errors_total"] == 1
