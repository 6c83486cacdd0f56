from __future__ import annotations

import logging

import pytest

from cooldown import FORWARDED_ENV, CooldownSettings, settings

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
    )


def test_settings_are_frozen() -> None:
    parsed = settings({})
    with pytest.raises(AttributeError):
        parsed.enabled = True  # type: ignore[misc]
