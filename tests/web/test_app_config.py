"""`init_app` reads the process settings from `app.config`, and says what it would do silently."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from flask import Flask

from cooldown import CredentialPool, init_app, settings

P = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"


def app_with(**config: object) -> Flask:
    app = Flask("configured")
    app.config.update(config)
    init_app(app)
    return app


def test_app_config_turns_the_feature_on() -> None:
    assert not settings().enabled
    app_with(MODEL_COOLDOWN_ENABLED=True, MODEL_COOLDOWN_MAX_SECONDS=120)
    current = settings()
    assert current.enabled
    assert current.max_seconds == 120


def test_app_config_overrides_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv("MODEL_COOLDOWN_LEARN", "shadow")
    app_with(MODEL_COOLDOWN_ENABLED="off")
    assert not settings().enabled
    assert settings().learn == "shadow"  # a name app.config does not set: the environment
    assert settings({"MODEL_COOLDOWN_ENABLED": "true"}).enabled  # an explicit mapping is as given


def test_booleans_ints_and_strings_follow_the_environment_rules() -> None:
    app_with(
        MODEL_COOLDOWN_ENABLED="yes",
        MODEL_COOLDOWN_LEASE_SECONDS=60,
        MODEL_COOLDOWN_FIRST_DELAY="7",
        MODEL_COOLDOWN_LEARN="apply",
    )
    current = settings()
    assert (current.enabled, current.lease_seconds, current.first_delay, current.learn) == (
        True,
        60,
        7,
        "apply",
    )


@pytest.mark.parametrize("value", [1.5, [True], {"on": True}, "maybe", 0])
def test_a_malformed_value_is_logged_once_by_name_and_disables_as_in_the_environment(
    value: object, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    with caplog.at_level(logging.INFO, "cooldown"):
        app_with(MODEL_COOLDOWN_ENABLED=True, MODEL_COOLDOWN_MAX_SECONDS=value)
        settings()
    assert not settings().enabled
    malformed = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(malformed) == 1
    assert "MODEL_COOLDOWN_MAX_SECONDS" in malformed[0].getMessage()
    assert str(value) not in malformed[0].getMessage().replace("MODEL_COOLDOWN_MAX_SECONDS", "")


def test_a_later_init_app_that_disagrees_warns_once_and_wins(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    app_with(MODEL_COOLDOWN_ENABLED=True, MODEL_COOLDOWN_MAX_SECONDS=120)
    with caplog.at_level(logging.WARNING, "cooldown"):
        app_with(MODEL_COOLDOWN_MAX_SECONDS=90)
        app_with(MODEL_COOLDOWN_MAX_SECONDS=60)
    assert settings().max_seconds == 60
    assert settings().enabled  # not set by the later calls: the earlier override stands
    differs = [r for r in caplog.records if "differs" in r.getMessage()]
    assert len(differs) == 1
    assert "MODEL_COOLDOWN_MAX_SECONDS" in differs[0].getMessage()
    assert "90" not in differs[0].getMessage()


def test_init_app_warns_once_when_the_flag_is_unset(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    with caplog.at_level(logging.INFO, "cooldown"):
        app_with()
        app_with()
    off = [r for r in caplog.records if "legacy" in r.getMessage()]
    assert len(off) == 1
    assert off[0].levelno == logging.WARNING
    assert "MODEL_COOLDOWN_ENABLED is unset" in off[0].getMessage()
    assert "set it to true" in off[0].getMessage()


def test_init_app_says_an_explicit_false_at_info(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    with caplog.at_level(logging.INFO, "cooldown"):
        app_with(MODEL_COOLDOWN_ENABLED=False)
    off = [r for r in caplog.records if "legacy" in r.getMessage()]
    assert len(off) == 1
    assert off[0].levelno == logging.INFO


def test_the_first_pool_call_with_the_flag_unset_warns_once(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))
    CredentialPool.register("unset-flag", keys=["sk-unset-one"])
    with caplog.at_level(logging.INFO, "cooldown"):
        CredentialPool.select("unset-flag", model="gpt-4o")
        CredentialPool.select("unset-flag", model="gpt-4o")
    took_legacy = [r for r in caplog.records if "legacy provider-wide path" in r.getMessage()]
    assert [r.levelno for r in took_legacy] == [logging.WARNING]
    assert "sk-unset" not in caplog.text


def test_init_app_says_nothing_when_the_feature_is_on(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    with caplog.at_level(logging.INFO, "cooldown"):
        app_with(MODEL_COOLDOWN_ENABLED=True)
    assert not [r for r in caplog.records if "legacy" in r.getMessage()]


def test_a_pool_call_without_model_warns_once_per_provider(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    monkeypatch.setenv(BASE, "sk-one-0123456789")
    app_with(MODEL_COOLDOWN_ENABLED=True)
    with caplog.at_level(logging.WARNING, "cooldown"):
        CredentialPool.select(P)
        CredentialPool.available(P)
        CredentialPool.record(P, "sk-one-0123456789", 200)
        CredentialPool.select("ce-gpt-pro")
        CredentialPool.select(P, model="gpt-4o")
    unscoped = [r.getMessage() for r in caplog.records if "no model" in r.getMessage()]
    assert len(unscoped) == 2
    assert any(P in message for message in unscoped)
    assert any("ce-gpt-pro" in message for message in unscoped)
    assert "sk-one" not in caplog.text


def test_no_unscoped_warning_while_the_feature_is_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    monkeypatch.setenv(BASE, "sk-one")
    with caplog.at_level(logging.WARNING, "cooldown"):
        CredentialPool.select(P)
        CredentialPool.status(P)
    assert not [r for r in caplog.records if "no model" in r.getMessage()]


@pytest.mark.parametrize(
    "name", ["MODEL_COOLDOWN_MAX_SECONDS", "MODEL_COOLDOWN_LEASE_SECONDS", "MODEL_COOLDOWN_ENABLED"]
)
@pytest.mark.parametrize("value", [10**5000, -(10**5000)], ids=["huge", "huge-negative"])
def test_an_int_too_long_to_print_is_a_malformed_setting_not_an_error(
    name: str, value: int, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    with caplog.at_level(logging.WARNING, "cooldown"):
        app_with(**{name: value})
        settings()
    assert any(name in r.getMessage() and "malformed" in r.getMessage() for r in caplog.records)


def nested(depth: int, *, in_lists: bool) -> Any:
    value: Any = [1]
    for _ in range(depth):
        value = [value] if in_lists else {"x": value}
    return value


@pytest.mark.parametrize("in_lists", [False, True], ids=["mappings", "lists"])
def test_accounts_nested_too_deeply_are_malformed_not_an_error(
    in_lists: bool, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    from cooldown.pools import accounts

    accounts._setting._parsed.cache_clear()  # each case's malformed value is read (and said) anew
    deep = nested(5000, in_lists=in_lists)
    with caplog.at_level(logging.WARNING, "cooldown"):
        app_with(MODEL_COOLDOWN_ACCOUNTS={"ce-gpt-plus": {"team": deep}})
        assert CredentialPool.accounts("ce-gpt-plus") == {}
    assert any("MODEL_COOLDOWN_ACCOUNTS" in r.getMessage() for r in caplog.records)
