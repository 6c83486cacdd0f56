"""Keys that share one provider account: a throttle cools the scope for every sibling."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from cooldown import CredentialPool, ModelCooldown, init_app, model_cooldown
from cooldown.shared.observations import RedisObservations

P = "accounted"
KEYS = ["sk-a-one-0123456789", "sk-a-two-0123456789", "sk-b-one-0123456789"]
ACCOUNTS = {"team-a": [1, 2], "team-b": [3]}


@pytest.fixture(autouse=True)
def unregister() -> Iterator[None]:
    yield
    CredentialPool._providers.pop(P, None)


@pytest.fixture
def pool(enabled: None) -> None:
    CredentialPool.register(P, keys=KEYS, accounts=ACCOUNTS)


class Answer:
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status_code, self.headers = status, headers or {}


def test_a_throttle_cools_that_model_for_every_key_of_the_account(pool: None) -> None:
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
    assert CredentialPool.available(P, model="m", now=1) == [KEYS[2]]
    assert CredentialPool.available(P, model="other", now=1) == KEYS  # that model only
    assert CredentialPool.available(P, model="m", now=30) == KEYS  # the same deadline


def test_an_auth_rejection_stays_the_one_keys(pool: None) -> None:
    CredentialPool.record(P, KEYS[0], 401, model="m", now=0)
    assert CredentialPool.available(P, model="m", now=1) == KEYS[1:]


def test_dispatch_after_a_throttle_goes_to_another_account_not_a_sibling(pool: None) -> None:
    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        return Answer(429, {"Retry-After": "30"}) if key != KEYS[2] else Answer(200)

    answer = CredentialPool.dispatch(P, send, model="m", order="configured")
    assert answer.status_code == 200
    assert sent == [KEYS[0], KEYS[2]]  # the sibling was never sent: it shares the quota


def test_one_keys_token_headers_hold_its_siblings_for_a_large_request(pool: None) -> None:
    headers = {
        "x-ratelimit-remaining-tokens": "1000",
        "x-ratelimit-reset-tokens": "30s",
        "x-ratelimit-remaining-requests": "1",
        "x-ratelimit-reset-requests": "30s",
    }
    answer = CredentialPool.dispatch(
        P, lambda key: Answer(200, headers), model="m", order="configured", cost=10
    )
    assert answer.status_code == 200
    assert CredentialPool.available(P, model="m", cost=5000) == [KEYS[2]]
    assert CredentialPool.available(P, model="m", cost=500) == KEYS
    taken = model_cooldown.admit(P, KEYS[1:2], model="m", accounts={KEYS[1]: "team-a"})
    assert taken is not None  # the account's last request, taken by the sibling
    status = CredentialPool.status(P, model="m")["keys"]
    assert [key["state"] for key in status] == ["cooling", "cooling", "ready"]


def test_without_accounts_every_key_is_its_own(enabled: None) -> None:
    CredentialPool.register(P, keys=KEYS)
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
    assert CredentialPool.available(P, model="m", now=1) == KEYS[1:]


def test_status_shows_labels_and_the_accounts_every_key_of_which_cools(pool: None) -> None:
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
    status = CredentialPool.status(P, model="m", now=1)
    assert [key["account"] for key in status["keys"]] == ["team-a", "team-a", "team-b"]
    assert [key["state"] for key in status["keys"]] == ["cooling", "cooling", "ready"]
    assert status["accounts_cooling"] == 1
    text = json.dumps(status)
    assert not any(key[:8] in text for key in KEYS)


def test_accounts_from_the_environment(enabled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ACCOUNTS", json.dumps({P: ACCOUNTS}))
    CredentialPool.register(P, keys=KEYS)
    CredentialPool.record(P, KEYS[1], 429, model="m", retry_after_seconds=30, now=0)
    assert CredentialPool.available(P, model="m", now=1) == [KEYS[2]]


def test_accounts_from_app_config(enabled: None) -> None:
    from flask import Flask

    app = Flask("accounts")
    app.config["MODEL_COOLDOWN_ACCOUNTS"] = {P: ACCOUNTS}
    init_app(app)
    CredentialPool.register(P, keys=KEYS)
    assert CredentialPool.accounts(P) == {1: "team-a", 2: "team-a", 3: "team-b"}


@pytest.mark.parametrize(
    "raw", ["{", "[1]", json.dumps({P: {"a": ["1"]}}), json.dumps({P: {"a": [0]}})]
)
def test_malformed_accounts_in_the_environment_group_nothing_with_one_warning(
    enabled: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
    raw: str,
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ACCOUNTS", raw)
    CredentialPool.register(P, keys=KEYS)
    with caplog.at_level(logging.WARNING, "cooldown"):
        CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
        CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
    assert CredentialPool.available(P, model="m", now=1) == KEYS[1:]
    warned = [r.getMessage() for r in caplog.records if "ACCOUNTS" in r.getMessage()]
    assert warned == ["MODEL_COOLDOWN_ACCOUNTS is malformed; keys are grouped in no account"]


@pytest.mark.parametrize(
    ("accounts", "error"),
    [
        ([1, 2], TypeError),
        ({"": [1]}, TypeError),
        ({"a": "12"}, TypeError),
        ({"a": [True]}, TypeError),
        ({"a": [0]}, ValueError),
        ({"a": [1], "b": [1]}, ValueError),
        ({"a": ["sk-a-one-0123456789"]}, ValueError),  # a key itself is never an account member
        ({"a": ["k-12345678"], "b": ["k-12345678"]}, ValueError),
    ],
)
def test_register_refuses_what_is_not_an_account_map(accounts: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        CredentialPool.register(P, keys=KEYS, accounts=accounts)
    assert not CredentialPool.pooled(P)


def test_a_sibling_cools_in_another_process_through_redis_within_the_attempts_round_trips(
    pool: None,
    redis_url: str,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    script_calls: list[str],
) -> None:
    secret = "accounts-secret-" + "a" * 32
    for name, value in {
        "MODEL_COOLDOWN_REDIS_URL": redis_url,
        "MODEL_COOLDOWN_REDIS_SECRET": secret,
        "MODEL_COOLDOWN_REDIS_PREFIX": prefix,
    }.items():
        monkeypatch.setenv(name, value)
    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        return Answer(429, {"Retry-After": "30"}) if key == KEYS[0] else Answer(200)

    CredentialPool.dispatch(P, send, model="m", order="configured")
    # the secret check as the store attaches, then two attempts (the throttled key, then the
    # other account's): a start and an end each, the sibling's cooldown riding on the first end
    assert [name for name in script_calls if name != "lookup"] == [
        "secret_check",
        *["start", "end"] * 2,
    ]
    other = ModelCooldown()  # another process: nothing local, the same secret and prefix
    other.attach_shared(RedisObservations(redis_url, prefix=prefix), secret=secret.encode())
    assert other.available(P, KEYS, model="m") == [KEYS[2]]


# -- positions are places in the list as configured -------------------------------------------


@pytest.mark.parametrize(
    "configured",
    [
        [KEYS[0], "your-api-key-here", KEYS[2]],  # a placeholder copied from a template
        [KEYS[0], KEYS[0], KEYS[2]],  # a duplicate
    ],
    ids=["placeholder", "duplicate"],
)
def test_a_dropped_key_moves_no_later_key_into_another_account(
    enabled: None, configured: list[str]
) -> None:
    CredentialPool.register(P, keys=configured, accounts=ACCOUNTS)
    assert CredentialPool.keys(P) == [KEYS[0], KEYS[2]]
    assert CredentialPool.key_accounts(P) == {KEYS[0]: "team-a", KEYS[2]: "team-b"}
    CredentialPool.record(P, KEYS[0], 429, model="m", retry_after_seconds=30, now=0)
    assert CredentialPool.available(P, model="m", now=1) == [KEYS[2]]  # team-b's, not a sibling
    accounts = [key["account"] for key in CredentialPool.status(P, model="m", now=1)["keys"]]
    assert accounts == ["team-a", "team-b"]


def test_environment_positions_count_a_placeholder_variable_too(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCOUNTED_KEY", KEYS[0])
    monkeypatch.setenv("ACCOUNTED_KEY_1", "<your key>")
    monkeypatch.setenv("ACCOUNTED_KEY_2", KEYS[2])
    CredentialPool.register(P, "ACCOUNTED_KEY", accounts=ACCOUNTS)
    assert CredentialPool.key_accounts(P) == {KEYS[0]: "team-a", KEYS[2]: "team-b"}


def test_a_position_beyond_the_keys_is_warned_about_once(
    enabled: None, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    CredentialPool.register(P, keys=KEYS[:2], accounts={"team-a": [1], "team-z": [7]})
    with caplog.at_level(logging.WARNING, "cooldown"):
        for _ in range(3):
            assert CredentialPool.key_accounts(P) == {KEYS[0]: "team-a"}
    assert len([r for r in caplog.records if "holds no key" in r.getMessage()]) == 1
    assert "sk-" not in caplog.text


def test_a_key_keeps_its_account_when_another_key_leaves(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cooldown.pools import code_keys

    clock = [1000.0]
    monkeypatch.setattr(code_keys.time, "monotonic", lambda: clock[0])
    in_the_secret_manager = list(KEYS)
    CredentialPool.register(P, keys=lambda: in_the_secret_manager, accounts=ACCOUNTS)
    assert CredentialPool.key_accounts(P) == {
        KEYS[0]: "team-a",
        KEYS[1]: "team-a",
        KEYS[2]: "team-b",
    }
    in_the_secret_manager.remove(KEYS[0])  # revoked
    clock[0] += 1.0
    assert CredentialPool.keys(P) == KEYS[1:]
    assert CredentialPool.key_accounts(P) == {KEYS[1]: "team-a", KEYS[2]: "team-b"}
    CredentialPool.record(P, KEYS[1], 429, model="m", retry_after_seconds=30, now=0)
    assert CredentialPool.available(P, model="m", now=1) == [KEYS[2]]  # team-b's key is free


def test_a_keys_status_label_stands_in_for_its_position(enabled: None) -> None:
    CredentialPool.register(P, keys=KEYS)
    labels = [row["label"] for row in CredentialPool.status(P)["keys"]]
    CredentialPool.register(P, keys=KEYS, accounts={"team-a": [labels[0], 2], "team-b": [3]})
    assert CredentialPool.key_accounts(P) == {
        KEYS[0]: "team-a",
        KEYS[1]: "team-a",
        KEYS[2]: "team-b",
    }
    CredentialPool.record(P, KEYS[1], 429, model="m", retry_after_seconds=30, now=0)
    assert CredentialPool.available(P, model="m", now=1) == [KEYS[2]]


def test_environment_keys_keep_their_accounts_when_one_is_unset(
    enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, key in zip(
        ("ACCOUNTED_KEY", "ACCOUNTED_KEY_1", "ACCOUNTED_KEY_2"), KEYS, strict=True
    ):
        monkeypatch.setenv(name, key)
    CredentialPool.register(P, "ACCOUNTED_KEY", accounts=ACCOUNTS)
    assert CredentialPool.key_accounts(P)[KEYS[2]] == "team-b"
    monkeypatch.delenv("ACCOUNTED_KEY")  # the operator takes the first key out
    assert CredentialPool.keys(P) == KEYS[1:]
    assert CredentialPool.key_accounts(P) == {KEYS[1]: "team-a", KEYS[2]: "team-b"}
