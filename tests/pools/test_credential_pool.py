from __future__ import annotations

from unittest.mock import Mock

import pytest
from pytest_mock import MockerFixture

from cooldown import (
    CredentialPool,
    ModelCooldownExhausted,
    UpstreamOutcome,
    classify_upstream_outcome,
    model_cooldown,
)
from cooldown.pools.provider import Provider

P = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"
K1, K2, K3 = "sk-pool-one", "sk-pool-two", "sk-pool-three"


@pytest.fixture
def three_keys(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv(BASE, K1)
    monkeypatch.setenv(f"{BASE}_1", K2)
    monkeypatch.setenv(f"{BASE}_2", K3)
    return [K1, K2, K3]


# -- registry and discovery -------------------------------------------------------------------


def test_default_providers_are_registered() -> None:
    for provider in (
        "ce-gpt-plus",
        "ce-gpt-pro",
        "ce-grok-heavy",
        "ce-claude-kiro-cheap",
        "ce-claude-kiro",
        "ce-claude-max",
        "ce-image",
    ):
        assert CredentialPool.pooled(provider)
    assert not CredentialPool.pooled("nobody")


def test_default_base_variables() -> None:
    env = {
        "CODEX_EVERYWHERE_API_KEY_CLAUDE_UNSTABLE": "cheap",
        "CODEX_EVERYWHERE_API_KEY_GPT_IMAGE": "img",
        "CODEX_EVERYWHERE_API_KEY_GROK_HEAVY": "grok",
    }
    assert CredentialPool.keys("ce-claude-kiro-cheap", env) == ["cheap"]
    assert CredentialPool.keys("ce-image", env) == ["img"]
    assert CredentialPool.keys("ce-grok-heavy", env) == ["grok"]


def test_keys_are_base_then_numbered_ascending_stripped_and_unique() -> None:
    env = {
        BASE: " base ",
        f"{BASE}_10": "ten",
        f"{BASE}_2": "two",
        f"{BASE}_1": "  ",
        f"{BASE}_3": "base",
        f"{BASE}_X": "ignored",
        f"{BASE}_2_OLD": "ignored",
    }
    assert CredentialPool.keys(P, env) == ["base", "two", "ten"]


def test_unregistered_provider_has_no_keys() -> None:
    assert CredentialPool.keys("nobody", {BASE: K1}) == []


def test_register_adds_a_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CredentialPool._providers, "custom", Provider("custom", "CUSTOM_KEY"))
    CredentialPool.register("custom", "CUSTOM_POOL_KEY")
    assert CredentialPool.pooled("custom")
    assert CredentialPool.keys("custom", {"CUSTOM_POOL_KEY_4": "k"}) == ["k"]
    with pytest.raises(ValueError, match="provider"):
        CredentialPool.register("", "X")


# -- legacy path ------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "rest"), [(401, 300), (402, 300), (403, 300), (429, 60)])
def test_legacy_rest_durations(three_keys: list[str], status: int, rest: int) -> None:
    CredentialPool.record(P, K1, status, now=0)
    assert CredentialPool.available(P, now=rest - 0.5) == [K2, K3]
    assert CredentialPool.available(P, now=rest) == three_keys


def test_legacy_new_rest_replaces_old(three_keys: list[str]) -> None:
    CredentialPool.record(P, K1, 401, now=0)
    CredentialPool.record(P, K1, 429, now=0)
    assert CredentialPool.available(P, now=60) == three_keys


def test_legacy_success_clears_and_others_change_nothing(three_keys: list[str]) -> None:
    CredentialPool.record(P, K1, 429, now=0)
    for status in (500, 400, 404, 503, 302):
        CredentialPool.record(P, K1, status, now=1)
    assert CredentialPool.available(P, now=2) == [K2, K3]
    CredentialPool.record(P, K1, 204, now=3)
    assert CredentialPool.available(P, now=3) == three_keys


def test_legacy_fallback_is_the_first_key(three_keys: list[str]) -> None:
    for key in three_keys:
        CredentialPool.record(P, key, 429, now=0)
    assert CredentialPool.available(P, now=1) == []
    assert CredentialPool.select(P, now=1) == K1


def test_no_keys_selects_none() -> None:
    assert CredentialPool.select(P, now=0) is None
    assert CredentialPool.select(P, model="m", now=0) is None


def test_empty_key_and_unregistered_provider_are_no_ops(three_keys: list[str]) -> None:
    CredentialPool.record(P, "", 401, now=0)
    CredentialPool.record(P, None, 401, now=0)
    CredentialPool.record("nobody", K1, 401, now=0)
    assert CredentialPool._legacy.snapshot() == {}


def test_record_headers_reads_bearer_case_insensitively(three_keys: list[str]) -> None:
    CredentialPool.record_headers(P, {"AUTHORIZATION": f"bearer {K2}"}, 429, now=0)
    CredentialPool.record_headers(P, {"X-Other": "x"}, 429, now=0)
    CredentialPool.record_headers(P, {"Authorization": f"Basic {K1}"}, 429, now=0)
    assert CredentialPool.available(P, now=1) == [K1, K3]


def test_legacy_ignores_scoped_evidence(three_keys: list[str]) -> None:
    quota = UpstreamOutcome(False, "neutral", "throttled", "quota_exhausted")
    CredentialPool.record(P, K1, 402, outcome=quota, retry_after_seconds=5, now=0)
    assert CredentialPool.available(P, now=6) == [K2, K3]
    assert model_cooldown.entry_count == 0


def legacy_run(model: str | None) -> list[object]:
    """Run one script of legacy calls and return every answer plus the legacy map."""
    answers: list[object] = []
    for step, (key, status) in enumerate(
        [(K1, 429), (K2, 401), (K3, 402), (K1, 200), (K2, 403), (K3, 429), (K1, 429), (K2, 500)]
    ):
        CredentialPool.record(P, key, status, now=step * 10, model=model, quota_bucket=None)
        answers.append(CredentialPool.available(P, now=step * 10 + 1))
        answers.append(CredentialPool.select(P, now=step * 10 + 1))
        answers.append(CredentialPool.eligible(P, now=step * 10 + 1))
    answers.append(CredentialPool._legacy.snapshot())
    return answers


@pytest.mark.parametrize("scope", [None, ""])
def test_flag_off_and_on_but_unscoped_are_identical(
    three_keys: list[str], monkeypatch: pytest.MonkeyPatch, scope: str | None
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "false")
    off = legacy_run(model="gpt-x")
    CredentialPool.reset()
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    on = legacy_run(model=scope)
    assert on == off
    assert model_cooldown.entry_count == 0
    assert off[-1]  # the legacy map really was exercised


# -- scoped path ------------------------------------------------------------------------------

scoped = pytest.mark.usefixtures("enabled", "three_keys")


@scoped
def test_scoped_throttle_cools_only_that_model() -> None:
    CredentialPool.record(P, K1, 429, model="gpt-a", now=0)
    assert CredentialPool.select(P, model="gpt-a", now=1) == K2
    assert CredentialPool.select(P, model="gpt-b", now=1) == K1
    assert CredentialPool.select(P, now=1) == K1
    assert CredentialPool._legacy.snapshot() == {}


@scoped
def test_scoped_bucket_is_shared_by_its_models() -> None:
    CredentialPool.record(P, K1, 429, model="mini", quota_bucket="tier", now=0)
    assert CredentialPool.select(P, model="large", quota_bucket="tier", now=1) == K2
    assert CredentialPool.select(P, model="mini", now=1) == K1


@scoped
@pytest.mark.parametrize("status", [403, 500, 502, 503, 504, 408, 400])
def test_scoped_non_throttle_statuses_invent_no_cooldown(status: int) -> None:
    CredentialPool.record(P, K1, status, model="gpt-a", now=0)
    assert CredentialPool.select(P, model="gpt-a", now=1) == K1
    assert CredentialPool._legacy.snapshot() == {}
    assert model_cooldown.entry_count == 0


@scoped
def test_supplied_outcome_overrides_status() -> None:
    quota = UpstreamOutcome(False, "neutral", "throttled", "quota_exhausted")
    CredentialPool.record(P, K1, 402, model="gpt-a", outcome=quota, now=0)
    assert CredentialPool.select(P, model="gpt-a", now=1) == K2
    cancelled = classify_upstream_outcome(429, cancelled=True)
    CredentialPool.record(P, K2, 429, model="gpt-a", outcome=cancelled, now=0)
    assert CredentialPool.select(P, model="gpt-a", now=1) == K2


@scoped
def test_401_is_wide_unless_told_otherwise() -> None:
    CredentialPool.record(P, K1, 401, model="gpt-a", now=0)
    assert CredentialPool.select(P, model="gpt-b", now=1) == K2
    assert CredentialPool.select(P, now=1) == K2  # mirrored into the legacy map
    CredentialPool.record(P, K2, 401, model="gpt-a", credential_wide_auth=False, now=0)
    assert CredentialPool.select(P, model="gpt-b", now=1) == K2


@scoped
def test_403_cools_only_with_explicit_wide_auth() -> None:
    CredentialPool.record(P, K1, 403, model="gpt-a", now=0)
    assert CredentialPool.select(P, model="gpt-a", now=1) == K1
    CredentialPool.record(P, K1, 403, model="gpt-a", credential_wide_auth=True, now=0)
    assert CredentialPool.select(P, model="gpt-b", now=1) == K2


@scoped
def test_wide_auth_mirror_uses_the_capped_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "100")
    CredentialPool.record(P, K1, 401, model="gpt-a", now=0)
    assert CredentialPool._legacy.snapshot() == {(P, K1): 100.0}
    CredentialPool.record(P, K1, 401, model="gpt-a", retry_after_seconds=7, now=0)
    assert CredentialPool._legacy.snapshot() == {(P, K1): 100.0}  # the later deadline is kept


@scoped
def test_scoped_success_never_clears_a_legacy_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "false")
    CredentialPool.record(P, K1, 429, now=0)
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    CredentialPool.record(P, K1, 200, model="gpt-a", now=1)
    assert CredentialPool.select(P, model="gpt-a", now=2) == K2
    assert (P, K1) in CredentialPool._legacy.snapshot()


@scoped
@pytest.mark.parametrize(("status", "retry_after"), [(429, 59), (401, 299)])
def test_scoped_selection_honours_legacy_rests(
    monkeypatch: pytest.MonkeyPatch, three_keys: list[str], status: int, retry_after: int
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "false")
    for key in three_keys:
        CredentialPool.record(P, key, status, now=0)
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    with pytest.raises(ModelCooldownExhausted) as raised:
        CredentialPool.select(P, model="gpt-a", now=1)
    assert raised.value.retry_after == retry_after


@scoped
def test_all_cooling_raises_and_nothing_is_dispatched(three_keys: list[str]) -> None:
    dispatch = Mock()
    for key in three_keys:
        CredentialPool.record(P, key, 429, model="gpt-a", retry_after_seconds=30, now=0)

    def route() -> None:
        key = CredentialPool.select(P, model="gpt-a", now=10)
        dispatch(key)

    with pytest.raises(ModelCooldownExhausted) as raised:
        route()
    assert raised.value.retry_after == 20
    dispatch.assert_not_called()
    assert CredentialPool.available(P, model="gpt-a", now=10) == []
    with pytest.raises(ModelCooldownExhausted):
        CredentialPool.eligible(P, model="gpt-a", now=10)
    assert CredentialPool.eligible(P, [], model="gpt-a", now=10) == []


@scoped
def test_pool_makes_one_store_call_per_selection_and_record(mocker: MockerFixture) -> None:
    calls = [mocker.spy(model_cooldown, name) for name in ("select", "record", "available")]
    key = CredentialPool.select(P, model="gpt-a", now=0)
    CredentialPool.record(P, key, 429, model="gpt-a", now=0)
    CredentialPool.available(P, model="gpt-a", now=0)
    assert [spy.call_count for spy in calls] == [1, 1, 1]
