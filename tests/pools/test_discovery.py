"""Key discovery reuses its last parse only while the variables it read are unchanged."""

from __future__ import annotations

import logging
import os

import pytest
from pytest_mock import MockerFixture

from cooldown import (
    CredentialPool,
    configured_nanogpt_keys,
)
from cooldown.pools import discovery

P = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"


@pytest.fixture(autouse=True)
def two_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(BASE) or name.startswith(("NANOGPT_", "NANO_GPT_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv(BASE, "sk-one")
    monkeypatch.setenv(f"{BASE}_1", "sk-two")


def test_a_new_numbered_variable_takes_effect_on_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert CredentialPool.keys(P) == ["sk-one", "sk-two"]
    monkeypatch.setenv(f"{BASE}_7", "sk-seven")
    assert CredentialPool.keys(P) == ["sk-one", "sk-two", "sk-seven"]


def test_a_changed_value_takes_effect_on_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CredentialPool.keys(P) == ["sk-one", "sk-two"]
    monkeypatch.setenv(f"{BASE}_1", "sk-rotated")
    assert CredentialPool.keys(P) == ["sk-one", "sk-rotated"]
    monkeypatch.setenv(BASE, "sk-first-rotated")
    assert CredentialPool.keys(P) == ["sk-first-rotated", "sk-rotated"]


def test_a_removed_variable_takes_effect_on_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CredentialPool.keys(P) == ["sk-one", "sk-two"]
    monkeypatch.delenv(f"{BASE}_1")
    assert CredentialPool.keys(P) == ["sk-one"]
    monkeypatch.delenv(BASE)
    assert CredentialPool.keys(P) == []


def test_an_unchanged_environment_is_not_scanned_again(mocker: MockerFixture) -> None:
    assert CredentialPool.keys(P) == ["sk-one", "sk-two"]
    scan = mocker.spy(discovery, "numbered_suffix")
    for _ in range(10):
        assert CredentialPool.keys(P) == ["sk-one", "sk-two"]
    assert scan.call_count == 0


def test_a_swap_no_cheap_check_sees_is_caught_within_a_second(
    monkeypatch: pytest.MonkeyPatch, mocker: MockerFixture
) -> None:
    """One unrelated variable removed as a numbered one appears: the count stays the same."""
    monkeypatch.setenv("UNRELATED_DISCOVERY_VARIABLE", "x")
    clock = mocker.patch.object(discovery.time, "monotonic", return_value=100.0)
    assert CredentialPool.keys(P) == ["sk-one", "sk-two"]
    monkeypatch.delenv("UNRELATED_DISCOVERY_VARIABLE")
    monkeypatch.setenv(f"{BASE}_2", "sk-three")
    assert CredentialPool.keys(P) == ["sk-one", "sk-two"]  # the documented bound
    clock.return_value = 100.0 + discovery.RESCAN_SECONDS
    assert CredentialPool.keys(P) == ["sk-one", "sk-two", "sk-three"]


def test_a_returned_list_cannot_change_the_next_answer() -> None:
    CredentialPool.keys(P).append("sk-injected")
    assert CredentialPool.keys(P) == ["sk-one", "sk-two"]


def test_nanogpt_discovery_follows_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NANOGPT_API_KEY", "nano-direct")
    assert configured_nanogpt_keys() == ["nano-direct"]
    monkeypatch.setenv("NANOGPT_API_KEYS", "nano-a,nano-b")
    assert configured_nanogpt_keys() == ["nano-direct", "nano-a", "nano-b"]
    monkeypatch.setenv("NANOGPT_API_KEY_3", "nano-three")
    monkeypatch.setenv("NANOGPT_PREFERRED_KEY_INDEX", "3")
    assert configured_nanogpt_keys() == ["nano-three", "nano-direct", "nano-a", "nano-b"]
    monkeypatch.setenv("NANOGPT_PREFERRED_KEY_INDEX", "0")
    assert configured_nanogpt_keys() == ["nano-direct", "nano-a", "nano-b", "nano-three"]


def test_a_supplied_mapping_is_parsed_on_every_call() -> None:
    environ = {BASE: "sk-mapped"}
    assert CredentialPool.keys(P, environ) == ["sk-mapped"]
    environ[f"{BASE}_1"] = "sk-mapped-two"
    assert CredentialPool.keys(P, environ) == ["sk-mapped", "sk-mapped-two"]


def test_a_list_variable_nested_too_deeply_is_malformed_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, fresh_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("NANOGPT_API_KEYS", "[" * 2000)
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert configured_nanogpt_keys() == []
        assert configured_nanogpt_keys({"NANOGPT_API_KEYS": "[" * 2000}) == []
    assert [record.getMessage() for record in caplog.records] == [
        "NANOGPT_API_KEYS is malformed (nested too deeply); it is skipped"
    ]
