"""Accounts and token budgets shared through Redis: token budgets, costs in flight, continuous
refill and an account's budgets hold for every process, still one round trip per attempt start
and end."""

from __future__ import annotations

import json
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

from ..conftest import SHARED_SECRET, Worker

P, MODEL, T = "p-shared-budgets", "m-shared-budgets", 7000.0
KEYS = ["sk-account-SECRET-one", "sk-account-SECRET-two", "sk-alone-SECRET-three"]
ACCOUNTS = {KEYS[0]: "team-a", KEYS[1]: "team-a"}

Process = Callable[[], ModelCooldown]


def admit(store: ModelCooldown, now: float, keys: list[str] = KEYS, **options: Any) -> Any:
    return store.admit(
        P, keys, model=MODEL, now=now, order="configured", accounts=ACCOUNTS, **options
    )


def end(
    store: ModelCooldown,
    admitted: Any,
    now: float,
    *,
    tokens: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
) -> None:
    """Record a served answer and the budgets its headers announced, as `dispatch` does."""
    key, attempt = admitted
    account = ACCOUNTS.get(key)
    with store.ending(attempt):
        store.record(
            P, key, classify_upstream_outcome(200), model=MODEL, now=now, sent_at=attempt.started
        )
        if tokens is not None:
            store.record_token_budget(P, key, model=MODEL, now=now, account=account, **tokens)
        if requests is not None:
            store.record_budget(P, key, model=MODEL, now=now, account=account, **requests)
    store.finish(attempt, served=True)


def announce_tokens(store: ModelCooldown, **tokens: Any) -> None:
    """One served attempt on the first key whose answer announces the account's tokens."""
    admitted = admit(store, T, cost=10)
    assert admitted[0] == KEYS[0]
    end(store, admitted, T, tokens=tokens)


def test_tokens_one_process_learned_hold_a_large_request_in_another(process: Process) -> None:
    first, second = process(), process()
    announce_tokens(first, remaining=1000, reset_seconds=30)
    assert admit(second, T + 1, cost=5000)[0] == KEYS[2]  # neither key of the account
    assert admit(second, T + 1, cost=500)[0] == KEYS[0]  # a request that fits


def test_a_cost_in_flight_in_one_process_is_held_against_the_account_in_another(
    process: Process,
) -> None:
    first, second = process(), process()
    announce_tokens(first, remaining=1000, reset_seconds=30)
    held = admit(second, T + 1, cost=600)
    assert held[0] == KEYS[0]
    assert admit(first, T + 1, cost=600)[0] == KEYS[2]  # 400 left on the account
    second.finish(held[1], served=True)
    assert admit(first, T + 1, cost=600)[0] == KEYS[0]


def test_tokens_refill_for_every_process_when_the_limit_is_announced(process: Process) -> None:
    first, second = process(), process()
    announce_tokens(first, remaining=0, reset_seconds=60, limit=60_000)  # 1000 back a second
    with pytest.raises(ModelCooldownExhausted) as held:
        admit(second, T + 0.5, KEYS[:2], cost=1000)
    assert held.value.retry_after == 1
    assert admit(second, T + 1.1, KEYS[:2], cost=1000)[0] == KEYS[0]


def test_a_request_budget_refills_and_counts_the_accounts_attempts_in_every_process(
    process: Process,
) -> None:
    first, second = process(), process()
    served = admit(first, T)
    end(first, served, T, requests={"remaining": 1, "reset_seconds": 60, "limit": 60})
    taken = admit(second, T, KEYS[:2])  # the account's last request
    assert taken[0] == KEYS[0]
    with pytest.raises(ModelCooldownExhausted):  # the sibling too: in flight is summed
        admit(first, T + 0.5, KEYS[1:2])
    assert admit(first, T + 1.1, KEYS[1:2])[0] == KEYS[1]  # one more refilled


def test_a_request_larger_than_every_token_limit_is_left_to_the_provider(
    process: Process,
) -> None:
    first, second = process(), process()
    announce_tokens(first, remaining=500, reset_seconds=30, limit=1000)
    assert admit(second, T + 1, KEYS[:2], cost=5000)[0] == KEYS[0]


# -- real processes -----------------------------------------------------------------------------

POOL, BASE = "ce-gpt-plus", "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"


@pytest.fixture
def workers(
    redis_url: str, prefix: str, worker_processes: Callable[..., list[Worker]]
) -> list[Worker]:
    """Two gateway processes; keys 1 and 2 share an account, key 3 is on its own."""
    return worker_processes(
        2,
        {
            "MODEL_COOLDOWN_ENABLED": "true",
            "MODEL_COOLDOWN_REDIS_URL": redis_url,
            "MODEL_COOLDOWN_REDIS_SECRET": SHARED_SECRET,
            "MODEL_COOLDOWN_REDIS_PREFIX": prefix,
            "MODEL_COOLDOWN_ACCOUNTS": json.dumps({POOL: {"team-a": [1, 2]}}),
            BASE: KEYS[0],
            f"{BASE}_1": KEYS[1],
            f"{BASE}_2": KEYS[2],
        },
    )


def test_two_processes_hold_one_accounts_tokens_and_cost_in_flight(workers: list[Worker]) -> None:
    first, second = workers
    scope = {"model": MODEL, "order": "configured", "cost": 600}

    def hold(worker: Worker, name: str) -> Any:
        return worker("hold_dispatch", name=name, provider=POOL, scope=scope, now=T)["value"]

    tokens = {"x-ratelimit-remaining-tokens": "1000", "x-ratelimit-reset-tokens": "30s"}
    assert hold(first, "a") == {"key": KEYS[0]}
    assert first("answer_dispatch", name="a", status=200, headers=tokens)["value"]["status"] == 200
    assert hold(second, "b") == {"key": KEYS[0]}  # 1000 tokens, none in flight
    assert hold(first, "c") == {"key": KEYS[2]}  # 600 of the account's 1000 are in flight
    for worker, name in ((second, "b"), (first, "c")):
        assert worker("answer_dispatch", name=name, status=200)["value"]["status"] == 200


def test_a_throttle_in_one_process_cools_the_siblings_in_the_other(workers: list[Worker]) -> None:
    first, second = workers
    scope = {"model": MODEL, "order": "configured"}
    assert first("hold_dispatch", name="a", provider=POOL, scope=scope, now=T)["value"] == {
        "key": KEYS[0]
    }
    throttled = first("answer_dispatch", name="a", status=429, headers={"Retry-After": "30"})[
        "value"
    ]
    assert throttled["keys"] == [KEYS[0], KEYS[2]]  # the sibling was skipped (key 3 429s too)
    model = {"model": MODEL}
    second("record", provider=POOL, key=KEYS[2], status=200, scope=model, now=T + 1)
    assert second("select", provider=POOL, scope=scope, now=T + 1)["value"] == KEYS[2]


def test_a_token_reset_of_31_years_holds_no_longer_than_the_maximum_in_the_fleet(
    monkeypatch: pytest.MonkeyPatch, enabled: None, redis_url: str, prefix: str
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", redis_url)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", "budgets-secret-" + "z" * 40)
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_PREFIX", prefix)
    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))
    CredentialPool.register("fleet-tokens", keys=["sk-fleet-tokens-0123456789"])

    class Served:
        status_code = 200

        def __init__(self, remaining: str, reset: str) -> None:
            self.headers = {
                "x-ratelimit-remaining-tokens": remaining,
                "x-ratelimit-reset-tokens": reset,
            }

    def dispatch(answer: Served, now: float) -> object:
        return CredentialPool.dispatch(
            "fleet-tokens", lambda key: answer, model="m", now=now, cost=10
        )

    dispatch(Served("500", "1s"), 1000.0)
    dispatch(Served("0", "999999999s"), 1000.0)
    with pytest.raises(ModelCooldownExhausted) as raised:
        dispatch(Served("500", "1s"), 1001.0)
    assert raised.value.retry_after <= 3600
    assert dispatch(Served("500", "1s"), 1000.0 + 3601).status_code == 200  # type: ignore[attr-defined]
    assert model_cooldown.stats()["shared_errors_total"] == 0


def test_an_older_answer_arriving_last_in_another_process_replaces_no_budget(
    process: Process,
) -> None:
    first, second, third = process(), process(), process()
    key = KEYS[2]  # in no account
    early = first.admit(P, [key], model=MODEL, now=T)  # sent first, answered last
    late = second.admit(P, [key], model=MODEL, now=T + 1)

    def answered(store: ModelCooldown, admitted: Any, remaining: int, now: float) -> None:
        attempt = admitted[1]
        with store.ending(attempt):
            store.record_budget(
                P, key, model=MODEL, remaining=remaining, reset_seconds=60, now=now, attempt=attempt
            )
        store.finish(attempt, served=True)

    answered(second, late, 0, T + 2)  # the newer answer: the window is spent
    answered(first, early, 5, T + 3)  # stale: the provider decided it before the newer one
    with pytest.raises(ModelCooldownExhausted):  # the fleet's admission holds the spent window
        third.admit(P, [key], model=MODEL, now=T + 4)


def test_a_request_served_since_the_budget_stays_spent_in_every_process(
    process: Process,
) -> None:
    first, second, third = process(), process(), process()
    key = KEYS[2]
    announcing = first.admit(P, [key], model=MODEL, now=T)
    with first.ending(announcing[1]):
        first.record_budget(
            P, key, model=MODEL, remaining=1, reset_seconds=60, now=T + 1, attempt=announcing[1]
        )
    first.finish(announcing[1], served=True)
    spending = second.admit(P, [key], model=MODEL, now=T + 2)  # the window's last request
    assert spending is not None
    second.finish(spending[1], served=True)  # served, its answer announcing nothing
    with pytest.raises(ModelCooldownExhausted):  # released, but still spent
        third.admit(P, [key], model=MODEL, now=T + 3)
