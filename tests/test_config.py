from __future__ import annotations

import importlib.util
import logging

import pytest
from pytest_mock import MockerFixture

from cooldown import (
    FORWARDED_ENV,
    CooldownSettings,
    CredentialPool,
    ModelCooldownExhausted,
    config,
    configured_nanogpt_keys,
    settings,
)

pytestmark = pytest.mark.usefixtures("fresh_warnings")


@pytest.mark.parametrize("raw", ["true", "1", "yes", "on", " TRUE ", "\tOn\n", "Yes"])
def test_enabled_true_forms(raw: str) -> None:
    assert settings({"MODEL_COOLDOWN_ENABLED": raw}).enabled is True


@pytest.mark.parametrize("raw", ["false", "0", "no", "off", " OFF ", "", "   ", "\n"])
def test_enabled_false_forms(raw: str) -> None:
    assert settings({"MODEL_COOLDOWN_ENABLED": raw}) == CooldownSettings(enabled=False)


def test_unset_environment_is_disabled_with_default_maximum() -> None:
    assert settings({}) == CooldownSettings(enabled=False, max_seconds=3600)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", 1), (" 120 ", 120), ("2147483647", 2147483647), ("", 3600), ("  ", 3600), ("007", 7)],
)
def test_max_seconds_accepted_forms(raw: str, expected: int) -> None:
    parsed = settings({"MODEL_COOLDOWN_ENABLED": "1", "MODEL_COOLDOWN_MAX_SECONDS": raw})
    assert parsed == CooldownSettings(enabled=True, max_seconds=expected)


@pytest.mark.parametrize(
    "raw", ["0", "-1", "1.5", "NaN", "1e3", "bad", "2147483648", "+5", "٣", "1 0", "inf"]
)
def test_malformed_max_seconds_disables_and_logs_name_not_value(
    raw: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        parsed = settings({"MODEL_COOLDOWN_ENABLED": "true", "MODEL_COOLDOWN_MAX_SECONDS": raw})
    assert parsed == CooldownSettings()
    assert [r.getMessage() for r in caplog.records] == [
        "MODEL_COOLDOWN_MAX_SECONDS is malformed; model cooldown is disabled"
    ]
    assert raw.strip() not in caplog.records[0].getMessage().replace("MODEL_COOLDOWN", "")


@pytest.mark.parametrize("raw", ["maybe", "2", "enabled", "tru", "y"])
def test_malformed_enabled_disables_and_logs(raw: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert settings({"MODEL_COOLDOWN_ENABLED": raw}) == CooldownSettings()
    assert len(caplog.records) == 1
    assert "MODEL_COOLDOWN_ENABLED" in caplog.records[0].getMessage()
    assert raw not in caplog.records[0].getMessage()


def test_malformed_setting_logs_once_per_name(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        for raw in ["bad", "worse", "bad", "-3"]:
            settings({"MODEL_COOLDOWN_ENABLED": "on", "MODEL_COOLDOWN_MAX_SECONDS": raw})
        settings({"MODEL_COOLDOWN_ENABLED": "nope"})
    names = [record.getMessage().split()[0] for record in caplog.records]
    assert names == ["MODEL_COOLDOWN_MAX_SECONDS", "MODEL_COOLDOWN_ENABLED"]


def test_every_malformed_name_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        settings({"MODEL_COOLDOWN_ENABLED": "x", "MODEL_COOLDOWN_MAX_SECONDS": "y"})
    assert len(caplog.records) == 2


def test_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    assert settings().enabled is True
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "false")
    assert settings().enabled is False
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "60")
    assert settings().max_seconds == 60


def test_forwarded_env_lists_every_setting() -> None:
    assert FORWARDED_ENV == (
        "MODEL_COOLDOWN_ENABLED",
        "MODEL_COOLDOWN_MAX_SECONDS",
        "MODEL_COOLDOWN_REDIS_URL",
        "MODEL_COOLDOWN_REDIS_SECRET",
        "MODEL_COOLDOWN_REDIS_PREFIX",
        "MODEL_COOLDOWN_REDIS_TIMEOUT_MS",
        "MODEL_COOLDOWN_LEARN",
        "MODEL_COOLDOWN_STATUS_TOKEN",
        "MODEL_COOLDOWN_LEASE_SECONDS",
        "MODEL_COOLDOWN_FIRST_DELAY",
        "MODEL_COOLDOWN_STATUS_MODELS",
        "MODEL_COOLDOWN_ACCOUNTS",
        "MODEL_COOLDOWN_WAIT_SECONDS",
        "MODEL_COOLDOWN_MAX_WAITERS",
        "MODEL_COOLDOWN_QUOTA_SECONDS",
        "MODEL_COOLDOWN_LIMITS",
        "MODEL_COOLDOWN_USAGE_SECONDS",
    )


def test_settings_are_frozen() -> None:
    parsed = settings({})
    with pytest.raises(AttributeError):
        parsed.enabled = True  # type: ignore[misc]


SECRET = "k" * 32
URL = "redis://127.0.0.1:6379/0"


def test_redis_settings_parse() -> None:
    parsed = settings(
        {
            "MODEL_COOLDOWN_ENABLED": "true",
            "MODEL_COOLDOWN_REDIS_URL": f" {URL} ",
            "MODEL_COOLDOWN_REDIS_SECRET": SECRET,
            "MODEL_COOLDOWN_REDIS_PREFIX": "gw:prod-1",
        }
    )
    assert (parsed.enabled, parsed.redis_url, parsed.redis_secret) == (True, URL, SECRET)
    assert parsed.redis_prefix == "gw:prod-1"
    assert SECRET not in repr(parsed)
    assert "127.0.0.1" not in repr(parsed)


def test_no_url_means_process_local_and_the_secret_is_ignored() -> None:
    parsed = settings({"MODEL_COOLDOWN_ENABLED": "1", "MODEL_COOLDOWN_REDIS_SECRET": "short"})
    assert parsed == CooldownSettings(enabled=True)


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("MODEL_COOLDOWN_REDIS_URL", {"MODEL_COOLDOWN_REDIS_URL": "http://host:6379"}),
        ("MODEL_COOLDOWN_REDIS_URL", {"MODEL_COOLDOWN_REDIS_URL": "redis://"}),
        ("MODEL_COOLDOWN_REDIS_URL", {"MODEL_COOLDOWN_REDIS_URL": "redis://h:port/0"}),
        ("MODEL_COOLDOWN_REDIS_SECRET", {"MODEL_COOLDOWN_REDIS_SECRET": "x" * 31}),
        ("MODEL_COOLDOWN_REDIS_SECRET", {"MODEL_COOLDOWN_REDIS_SECRET": ""}),
        ("MODEL_COOLDOWN_REDIS_PREFIX", {"MODEL_COOLDOWN_REDIS_PREFIX": "has space"}),
        ("MODEL_COOLDOWN_REDIS_PREFIX", {"MODEL_COOLDOWN_REDIS_PREFIX": "p" * 101}),
    ],
)
def test_malformed_redis_settings_turn_only_sharing_off(
    name: str, env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    full = {
        "MODEL_COOLDOWN_ENABLED": "true",
        "MODEL_COOLDOWN_REDIS_URL": "rediss://user:pa55word@cache.internal:6380/2",
        "MODEL_COOLDOWN_REDIS_SECRET": SECRET,
        **env,
    }
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert settings(full) == CooldownSettings(enabled=True)  # cooldowns on, not shared
    assert [r.getMessage().split()[0] for r in caplog.records] == [name]
    for value in (*env.values(), "pa55word", SECRET):
        if value:
            assert value not in caplog.text


def test_url_without_the_redis_package_is_malformed(
    mocker: MockerFixture, caplog: pytest.LogCaptureFixture
) -> None:
    real_find_spec = importlib.util.find_spec
    mocker.patch(
        "importlib.util.find_spec",
        side_effect=lambda name, *args: None if name == "redis" else real_find_spec(name, *args),
    )
    env = {
        "MODEL_COOLDOWN_ENABLED": "true",
        "MODEL_COOLDOWN_REDIS_URL": URL,
        "MODEL_COOLDOWN_REDIS_SECRET": SECRET,
    }
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert settings(env) == CooldownSettings(enabled=True)
    assert "MODEL_COOLDOWN_REDIS_URL is malformed" in caplog.text


def test_the_redis_secret_and_url_never_leave_by_pickle_or_asdict() -> None:
    import dataclasses
    import pickle

    current = settings(
        {
            "MODEL_COOLDOWN_ENABLED": "true",
            "MODEL_COOLDOWN_REDIS_URL": "redis://:hunter2-password@127.0.0.1:6379/0",
            "MODEL_COOLDOWN_REDIS_SECRET": "secret-" + "s" * 40,
        }
    )
    assert current.redis_url is not None  # usable as the string it is
    assert current.redis_url.startswith("redis://")
    assert "hunter2" not in repr(current)
    with pytest.raises(TypeError, match="secret"):
        pickle.dumps(current)
    with pytest.raises(TypeError, match="secret"):
        dataclasses.asdict(current)
    assert "hunter2" not in repr(current.redis_url)


def test_a_non_utf8_secret_turns_sharing_off_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, fresh_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("MODEL_COOLDOWN_REDIS_SECRET", "s" * 32 + "\udcff")  # a byte 0xff
    monkeypatch.setenv("CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL", "sk-utf8-test")
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert settings().redis_url is None
        CredentialPool.record("ce-gpt-plus", "sk-utf8-test", 429, model="m")
        with pytest.raises(ModelCooldownExhausted):
            CredentialPool.select("ce-gpt-plus", model="m")
    assert [record.getMessage() for record in caplog.records] == [
        "MODEL_COOLDOWN_REDIS_SECRET is malformed; cooldowns stay on, but are not shared"
    ]


def test_the_warn_once_set_is_capped(fresh_warnings: None) -> None:
    names = {f"NANOGPT_API_KEY_{index}": "your-key-here" for index in range(3000)}
    configured_nanogpt_keys(names)
    assert len(config._warned) == config.WARNED_NAMES_LIMIT
    assert config.warnings_suppressed_total >= 3000 - config.WARNED_NAMES_LIMIT


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("MODEL_COOLDOWN_WAIT_SECONDS", "1.\u00b2"),  # a superscript two: a digit float() refuses
        ("MODEL_COOLDOWN_WAIT_SECONDS", "\u0663"),  # an Arabic-Indic three
        ("MODEL_COOLDOWN_WAIT_SECONDS", "1e1"),
        ("MODEL_COOLDOWN_WAIT_SECONDS", "nan"),
        ("MODEL_COOLDOWN_MAX_WAITERS", "\u00b2"),
        ("MODEL_COOLDOWN_MAX_WAITERS", "\u0661\u0660"),
        ("MODEL_COOLDOWN_MAX_WAITERS", "1.5"),
    ],
)
def test_a_malformed_waiting_setting_is_its_default_with_one_warning(
    name: str, raw: str, caplog: pytest.LogCaptureFixture
) -> None:
    default = CooldownSettings()
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        for _ in range(3):
            parsed = settings({"MODEL_COOLDOWN_ENABLED": "true", name: raw})
            assert (parsed.wait_seconds, parsed.max_waiters) == (
                default.wait_seconds,
                default.max_waiters,
            )
    assert [r.getMessage() for r in caplog.records] == [f"{name} is malformed; its default is used"]
    assert raw not in caplog.text
