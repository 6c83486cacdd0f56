from __future__ import annotations

import logging
from collections.abc import Iterator
from unittest.mock import Mock

import pytest

from cooldown import (
    ModelCooldownExhausted,
    NanoGPTKeyPool,
    NanoGPTKeyPoolExhausted,
    NanoGPTUnifiedKeyPool,
    UpstreamOutcome,
    classify_upstream_outcome,
    configured_nanogpt_keys,
    is_nanogpt_credential_rejection,
    model_cooldown,
)
from cooldown.pools.nanogpt.active_key import MAX_REJECTIONS

A, B, C = "nano-key-a", "nano-key-b", "nano-key-c"
POOLS = [NanoGPTKeyPool, NanoGPTUnifiedKeyPool]


def probe_answering(**statuses: int) -> Mock:
    """A catalog probe: statuses by key letter (a, b, c), 200 for anything unnamed."""
    by_key = {f"nano-key-{letter}": status for letter, status in statuses.items()}
    return Mock(side_effect=lambda key: by_key.get(key, 200))


@pytest.fixture(params=POOLS, ids=["raw", "unified"])
def pool(request: pytest.FixtureRequest) -> type[NanoGPTKeyPool]:
    chosen: type[NanoGPTKeyPool] = request.param
    return chosen


# -- discovery --------------------------------------------------------------------------------


def test_is_nanogpt_credential_rejection() -> None:
    assert [
        s for s in (200, 400, 401, 402, 403, 404, 429, 500) if is_nanogpt_credential_rejection(s)
    ] == [
        401,
        402,
        403,
        429,
    ]
    assert not is_nanogpt_credential_rejection("401")


def test_discovery_order_direct_lists_numbered() -> None:
    env = {
        "NANO_GPT_KEY": "direct-2",
        "NANOGPT_API_KEY": "direct-1",
        "NANOGPT_API_KEYS": '["list-1", "list-2", 7]',
        "NANO_GPT_KEYS": "list-3, list-4\nlist-5,,",
        "NANOGPT_API_KEY_2": "num-2a",
        "NANO_GPT_KEY_2": "num-2b",
        "NANO_GPT_KEY_1": "num-1b",
        "NANOGPT_API_KEY_10": "num-10",
    }
    assert configured_nanogpt_keys(env) == [
        "direct-1",
        "direct-2",
        "list-1",
        "list-2",
        "list-3",
        "list-4",
        "list-5",
        "num-1b",
        "num-2a",
        "num-2b",
        "num-10",
    ]


def test_discovery_strips_and_deduplicates() -> None:
    env = {"NANOGPT_API_KEY": " k ", "NANOGPT_API_KEYS": "k, j ,", "NANOGPT_API_KEY_1": "j"}
    assert configured_nanogpt_keys(env) == ["k", "j"]


def test_malformed_json_list_falls_back_to_commas() -> None:
    assert configured_nanogpt_keys({"NANOGPT_API_KEYS": '["a", '}) == ['["a"']


def test_preferred_index_moves_its_keys_first_before_dedup() -> None:
    env = {
        "NANOGPT_API_KEY": "zero",
        "NANOGPT_API_KEYS": "listed",
        "NANOGPT_API_KEY_1": "one",
        "NANOGPT_API_KEY_2": "two",
        "NANO_GPT_KEY_2": "zero",
        "NANOGPT_PREFERRED_KEY_INDEX": " 2 ",
    }
    assert configured_nanogpt_keys(env) == ["two", "zero", "listed", "one"]


def test_bad_preferred_index_is_ignored() -> None:
    env = {"NANOGPT_API_KEY": "a", "NANOGPT_API_KEY_1": "b", "NANOGPT_PREFERRED_KEY_INDEX": "x"}
    assert configured_nanogpt_keys(env) == ["a", "b"]


# -- legacy selection -------------------------------------------------------------------------


def test_no_keys_is_none(pool: type[NanoGPTKeyPool]) -> None:
    probe = Mock()
    assert pool.select_key([" ", ""], probe, now=0) is None
    probe.assert_not_called()


def test_single_key_is_active_without_a_probe(pool: type[NanoGPTKeyPool]) -> None:
    probe = Mock()
    assert pool.select_key([f" {A} "], probe, now=0) == A
    probe.assert_not_called()
    assert (pool.active_key, pool.active_until, pool.active_requests) == (A, 300, 0)


def test_active_key_is_reused_until_ttl(pool: type[NanoGPTKeyPool]) -> None:
    probe = probe_answering()
    assert pool.select_key([A, B], probe, now=0) == A
    assert pool.select_key([A, B], probe, now=299) == A
    assert probe.call_count == 1
    assert pool.select_key([A, B], probe, now=300) == A
    assert probe.call_count == 2


def test_active_key_revalidates_after_request_budget(pool: type[NanoGPTKeyPool]) -> None:
    probe = probe_answering()
    pool.select_key([A, B], probe, check_every_requests=2, now=0)
    pool.record_result(A, 200, now=1)
    assert pool.select_key([A, B], probe, check_every_requests=2, now=1) == A
    assert probe.call_count == 1
    pool.record_result(A, 200, now=1)
    pool.select_key([A, B], probe, check_every_requests=2, now=1)
    assert probe.call_count == 2
    assert pool.active_requests == 0


def test_probe_order_active_first_and_rejections(pool: type[NanoGPTKeyPool]) -> None:
    probe = probe_answering(a=401, b=429)
    assert pool.select_key([A, B, C], probe, now=0) == C
    assert [call.args[0] for call in probe.call_args_list] == [A, B, C]
    assert pool.rejected_until == {A: 300, B: 60}
    probe.reset_mock()
    assert pool.select_key([A, B, C], probe, now=100) == C
    probe.assert_not_called()
    assert pool.rejected_until == {A: 300}  # B's rejection expired and was forgotten


def test_rejected_durations_are_at_least_one_second(pool: type[NanoGPTKeyPool]) -> None:
    with pytest.raises(NanoGPTKeyPoolExhausted):
        pool.select_key(
            [A, B],
            probe_answering(a=403, b=429),
            check_ttl_seconds=0,
            rejected_cooldown_seconds=0,
            now=0,
        )
    assert pool.rejected_until == {A: 1.0, B: 1.0}


def test_all_rejected_without_probe_message(pool: type[NanoGPTKeyPool]) -> None:
    pool.invalidate(A, 401, now=0)
    pool.invalidate(B, 429, now=0)
    probe = Mock()
    with pytest.raises(
        NanoGPTKeyPoolExhausted, match="All configured NanoGPT keys are cooling down"
    ):
        pool.select_key([A, B], probe, now=1)
    probe.assert_not_called()


def test_nothing_validated_message(pool: type[NanoGPTKeyPool]) -> None:
    with pytest.raises(NanoGPTKeyPoolExhausted, match="No configured NanoGPT API key passed"):
        pool.select_key([A, B], probe_answering(a=500, b=402), now=0)
    assert pool.active_key is None


def test_probe_errors_are_ambiguous_and_logged_by_type(
    pool: type[NanoGPTKeyPool], caplog: pytest.LogCaptureFixture
) -> None:
    def probe(key: str) -> int:
        if key == A:
            raise OSError(f"connection to {key} failed")
        return 200

    with caplog.at_level(logging.WARNING, logger="cooldown"):
        assert pool.select_key([A, B], probe, now=0) == B
    assert "OSError" in caplog.text
    assert A not in caplog.text
    assert pool.rejected_until == {}


def test_unexpected_probe_errors_propagate(pool: type[NanoGPTKeyPool]) -> None:
    with pytest.raises(KeyError):
        pool.select_key([A, B], Mock(side_effect=KeyError("boom")), now=0)


def test_ambiguous_active_key_is_kept_for_thirty_seconds(pool: type[NanoGPTKeyPool]) -> None:
    pool.select_key([A, B], probe_answering(), now=0)
    assert pool.select_key([A, B], probe_answering(a=503, b=503), now=300) == A
    assert (pool.active_until, pool.active_requests) == (330, 0)


def test_ambiguous_non_active_key_is_not_kept(pool: type[NanoGPTKeyPool]) -> None:
    pool.select_key([A, B], probe_answering(), now=0)
    with pytest.raises(NanoGPTKeyPoolExhausted):
        pool.select_key([A, B], probe_answering(a=401, b=503), now=300)


def test_unconfigured_active_key_and_rejections_are_forgotten(pool: type[NanoGPTKeyPool]) -> None:
    pool.select_key([A, B], probe_answering(), now=0)
    pool.invalidate(C, 401, now=0)
    assert pool.select_key([B], Mock(), now=1) == B
    assert pool.rejected_until == {}


def test_legacy_record_result_counts_and_rejects(pool: type[NanoGPTKeyPool]) -> None:
    pool.select_key([A, B], probe_answering(), now=0)
    pool.record_result(A, 200, now=1)
    pool.record_result(B, 200, now=1)
    assert pool.active_requests == 1
    pool.record_result(A, 429, now=2)
    assert pool.active_key is None
    assert pool.rejected_until == {A: 62}


def test_legacy_invalidate_replaces_and_ignores_non_rejections(pool: type[NanoGPTKeyPool]) -> None:
    pool.invalidate(A, 401, now=0)
    pool.invalidate(A, 429, now=0)
    assert pool.rejected_until == {A: 60}
    pool.select_key([B], Mock(), now=0)
    pool.invalidate(B, 500, now=0)
    assert pool.active_key is None
    assert B not in pool.rejected_until


def test_select_available_key_legacy(pool: type[NanoGPTKeyPool]) -> None:
    pool.select_key([A, B, C], probe_answering(a=500), now=0)
    assert pool.active_key == B
    assert pool.select_available_key([A, B, C], now=1) == B
    pool.invalidate(B, 401, now=1)
    assert pool.select_available_key([A, B, C], now=1) == A
    pool.invalidate(A, 429, now=1)
    pool.invalidate(C, 403, now=1)
    assert pool.select_available_key([A, B, C], now=2) is None


def legacy_script(pool: type[NanoGPTKeyPool], model: str | None) -> list[object]:
    answers: list[object] = []
    probe = probe_answering(b=429)
    for step, (key, status) in enumerate(
        [(A, 200), (A, 401), (C, 402), (B, 200), (C, 403), (A, 429), (B, 500)]
    ):
        now = step * 50.0
        try:
            answers.append(pool.select_key([A, B, C], probe, now=now, model=model))
        except NanoGPTKeyPoolExhausted as error:
            answers.append(str(error))
        pool.record_result(key, status, now=now, model=model)
        answers.append(pool.select_available_key([A, B, C], now=now, model=model))
        answers.append((pool.active_key, pool.active_until, pool.active_requests))
        answers.append(dict(pool.rejected_until))
    return answers


@pytest.mark.parametrize("scope", [None, ""])
def test_flag_off_and_on_but_unscoped_are_identical(
    pool: type[NanoGPTKeyPool], monkeypatch: pytest.MonkeyPatch, scope: str | None
) -> None:
    off = legacy_script(pool, "gpt-x")
    pool.reset()
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    on = legacy_script(pool, scope)
    assert on == off
    assert any(isinstance(answer, dict) and answer for answer in off)
    assert model_cooldown.entry_count == 0


# -- scoped path ------------------------------------------------------------------------------

scoped = pytest.mark.usefixtures("enabled")


@scoped
def test_scoped_throttle_isolates_models(pool: type[NanoGPTKeyPool]) -> None:
    assert pool.select_key([A, B], probe_answering(), model="m1", now=0) == A
    pool.record_result(A, 429, model="m1", now=1)
    assert pool.active_key == A  # a model throttle is not a key failure
    assert pool.select_available_key([A, B], model="m1", now=2) == B
    assert pool.select_available_key([A, B], model="m2", now=2) == A
    assert pool.rejected_until == {}


@scoped
def test_scoped_bucket_isolation(pool: type[NanoGPTKeyPool]) -> None:
    pool.record_result(A, 429, model="m1", quota_bucket="tier", now=0)
    assert pool.select_available_key([A, B], model="m2", quota_bucket="tier", now=1) == B
    assert pool.select_available_key([A, B], model="m1", now=1) == A


@scoped
@pytest.mark.parametrize("status", [402, 403, 500, 503])
def test_scoped_statuses_that_invent_nothing(pool: type[NanoGPTKeyPool], status: int) -> None:
    pool.record_result(A, status, model="m1", now=0)
    pool.invalidate(A, status, model="m1", now=0)
    assert pool.select_available_key([A], model="m1", now=1) == A
    assert pool.rejected_until == {}


@scoped
def test_scoped_supplied_outcome_overrides(pool: type[NanoGPTKeyPool]) -> None:
    quota = UpstreamOutcome(False, "neutral", "throttled", "quota_exhausted")
    pool.record_result(A, 402, model="m1", outcome=quota, now=0)
    assert pool.select_available_key([A, B], model="m1", now=1) == B
    pool.record_result(B, 429, model="m1", outcome=classify_upstream_outcome(cancelled=True), now=0)
    assert pool.select_available_key([A, B], model="m1", now=1) == B


@scoped
def test_scoped_wide_auth_mirrors_and_clears_active(
    pool: type[NanoGPTKeyPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_MAX_SECONDS", "120")
    pool.select_key([A, B], probe_answering(), model="m1", now=0)
    pool.record_result(A, 401, model="m1", now=0)
    assert pool.rejected_until == {A: 120}
    assert pool.active_key is None
    assert pool.select_available_key([A, B], model="m2", now=1) == B
    pool.invalidate(B, 403, model="m1", credential_wide_auth=True, now=0)
    assert pool.rejected_until == {A: 120, B: 120}
    pool.invalidate(A, 401, model="m1", credential_wide_auth=False, now=0)


@scoped
def test_scoped_success_never_clears_a_legacy_rejection(
    pool: type[NanoGPTKeyPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "false")
    pool.invalidate(A, 429, now=0)
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    pool.record_result(A, 200, model="m1", now=1)
    assert pool.rejected_until == {A: 60}
    with pytest.raises(ModelCooldownExhausted) as raised:
        pool.select_available_key([A], model="m1", now=1)
    assert raised.value.retry_after == 59


@scoped
def test_scoped_select_key_refuses_without_probing(pool: type[NanoGPTKeyPool]) -> None:
    pool.record_result(A, 429, model="m1", retry_after_seconds=10, now=0)
    pool.record_result(B, 429, model="m1", retry_after_seconds=20, now=0)
    probe, dispatch = Mock(), Mock()
    with pytest.raises(ModelCooldownExhausted) as raised:
        dispatch(pool.select_key([A, B], probe, model="m1", now=1))
    assert raised.value.retry_after == 9
    probe.assert_not_called()
    dispatch.assert_not_called()


@scoped
def test_scoped_filtering_two_keys_to_one_still_probes(pool: type[NanoGPTKeyPool]) -> None:
    pool.record_result(A, 429, model="m1", now=0)
    probe = probe_answering()
    assert pool.select_key([A, B], probe, model="m1", now=1) == B
    probe.assert_called_once_with(B)


@scoped
def test_scoped_probe_401_cools_every_model(pool: type[NanoGPTKeyPool]) -> None:
    assert pool.select_key([A, B], probe_answering(a=401), model="m1", now=0) == B
    assert pool.rejected_until == {A: 300}
    with pytest.raises(ModelCooldownExhausted):
        pool.select_available_key([A], model="m2", now=1)


@scoped
def test_scoped_probe_429_cools_nothing(pool: type[NanoGPTKeyPool]) -> None:
    assert pool.select_key([A, B], probe_answering(a=429), model="m1", now=0) == B
    assert pool.rejected_until == {}
    assert model_cooldown.entry_count == 0
    assert pool.select_available_key([A, B], model="m1", now=1) == B  # active first
    assert pool.select_available_key([A], model="m1", now=1) == A


@scoped
def test_scoped_probe_403_keeps_the_validated_single_key(pool: type[NanoGPTKeyPool]) -> None:
    assert pool.select_key([A], Mock(), model="m1", now=0) == A
    probe = probe_answering(a=403)
    assert pool.select_key([A], probe, model="m1", now=300) == A
    probe.assert_called_once_with(A)
    assert pool.active_until == 330
    assert pool.rejected_until == {}


@scoped
def test_scoped_final_decision_429_when_every_key_now_cools(pool: type[NanoGPTKeyPool]) -> None:
    with pytest.raises(ModelCooldownExhausted) as raised:
        pool.select_key([A, B], probe_answering(a=401, b=401), model="m1", now=0)
    assert raised.value.retry_after == 300


@scoped
def test_scoped_final_decision_pool_error_when_keys_remain(pool: type[NanoGPTKeyPool]) -> None:
    with pytest.raises(NanoGPTKeyPoolExhausted, match="passed validation"):
        pool.select_key([A, B], probe_answering(a=401, b=500), model="m1", now=0)


@scoped
def test_scoped_empty_configuration_is_none(pool: type[NanoGPTKeyPool]) -> None:
    assert pool.select_key([], Mock(), model="m1", now=0) is None
    assert pool.select_available_key([], model="m1", now=0) is None


@pytest.fixture
def both_pools() -> Iterator[None]:
    yield
    NanoGPTKeyPool.reset()
    NanoGPTUnifiedKeyPool.reset()


@scoped
def test_raw_and_unified_pools_never_share_state(both_pools: None) -> None:
    NanoGPTKeyPool.select_key([A, B], probe_answering(), model="m1", now=0)
    NanoGPTKeyPool.record_result(A, 429, model="m1", now=0)
    NanoGPTKeyPool.record_result(B, 401, model="m1", now=0)
    NanoGPTKeyPool.invalidate(C, 429, now=0)
    assert NanoGPTUnifiedKeyPool.active_key is None
    assert NanoGPTUnifiedKeyPool.rejected_until == {}
    assert NanoGPTUnifiedKeyPool.select_available_key([A, B], model="m1", now=1) == A
    assert NanoGPTKeyPool._lock is not NanoGPTUnifiedKeyPool._lock


def test_a_full_rejection_map_is_not_rebuilt_for_every_new_key() -> None:
    from cooldown.pools.nanogpt.active_key import MAX_REJECTIONS

    for index in range(MAX_REJECTIONS):  # all live at once: 300 s auth rests from now=0
        NanoGPTKeyPool.invalidate(f"nano-full-{index}", 401, now=0.0)
    NanoGPTKeyPool.invalidate("nano-first-extra", 401, now=1.0)  # one scan: still all live
    full = NanoGPTKeyPool.rejected_until
    for index in range(100):
        NanoGPTKeyPool.invalidate(f"nano-more-{index}", 401, now=2.0)
    assert NanoGPTKeyPool.rejected_until is full  # dropped at once, no rebuild per key
    assert NanoGPTKeyPool.rejections_dropped_total == 101
    NanoGPTKeyPool.invalidate("nano-after-expiry", 401, now=301.0)  # the earliest rests ended
    assert NanoGPTKeyPool.rejected_until is not full
    assert "nano-after-expiry" in NanoGPTKeyPool.rejected_until


@pytest.mark.parametrize("scoped", [False, True])
def test_a_rejection_during_a_probe_is_not_ignored(
    scoped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if scoped:
        monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    scope = {"model": "m"} if scoped else {}
    keys = ["nano-a", "nano-b"]

    def probe(key: str) -> int:
        if key == "nano-a":  # the key is throttled by a real request while we probe it
            NanoGPTKeyPool.record_result("nano-a", 429, now=0.0, **scope)
        return 200

    chosen = NanoGPTKeyPool.select_key(keys, probe, now=0.0, **scope)
    assert chosen == "nano-b"


def test_nanogpt_rejections_are_capped_and_counted() -> None:
    for index in range(MAX_REJECTIONS + 20):
        NanoGPTKeyPool.invalidate(f"nano-junk-{index}", 401, now=0.0)
    assert len(NanoGPTKeyPool.rejected_until) == MAX_REJECTIONS
    assert NanoGPTKeyPool.rejections_dropped_total == 20
