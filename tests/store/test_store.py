from __future__ import annotations

import copy
import hmac
import logging
import math
import pickle
from typing import Any

import pytest
from pytest_mock import MockerFixture

from cooldown import (
    MAX_ENTRIES,
    ModelCooldown,
    ModelCooldownCapacity,
    ModelCooldownExhausted,
    UpstreamOutcome,
    classify_upstream_outcome,
    digests,
)
from cooldown.store.budget import ScopeBudget
from cooldown.store.schedule import DeadlineSchedule

P = "openai"
KEY = "sk-live-alpha-0001"
OTHER = "sk-live-bravo-0002"
THROTTLED = classify_upstream_outcome(429)
REJECTED = classify_upstream_outcome(401)
ACCEPTED = classify_upstream_outcome(200)


# -- identities -------------------------------------------------------------------------------


def test_credential_id_is_64_hex_and_stable_within_a_store(store: ModelCooldown) -> None:
    first = store.credential_id(P, KEY)
    assert len(first) == 64
    assert int(first, 16) >= 0
    assert store.credential_id(P, KEY) == first


def test_credential_id_differs_across_stores_and_providers(store: ModelCooldown) -> None:
    assert store.credential_id(P, KEY) != ModelCooldown().credential_id(P, KEY)
    assert store.credential_id(P, KEY) != store.credential_id("anthropic", KEY)
    assert store.credential_id(P, KEY) != store.credential_id(P, OTHER)


def test_credential_id_is_length_prefixed() -> None:
    store = ModelCooldown()
    assert store.credential_id("ab", "c") != store.credential_id("a", "bc")


def test_credential_id_is_hmac_sha256_of_the_framed_parts() -> None:
    secret = bytes(range(32))
    store = ModelCooldown(secret=secret)

    def frame(part: str) -> bytes:
        data = part.encode()
        return len(data).to_bytes(8, "big") + data

    message = frame("credential") + frame(P) + frame(KEY)
    assert store.credential_id(P, KEY) == hmac.new(secret, message, "sha256").hexdigest()


def test_credential_ids_hold_for_many_providers_and_str_subclasses() -> None:
    """Each provider's framed prefix is kept for the hot path; beyond the kept ones, and for a
    str subclass (never kept), the id is still the HMAC of the framed parts."""
    secret = bytes(range(32))
    store = ModelCooldown(secret=secret)

    class Name(str):
        pass

    def expected(provider: str) -> str:
        parts = ("credential", provider, KEY)
        message = b"".join(len(p.encode()).to_bytes(8, "big") + p.encode() for p in parts)
        return hmac.new(secret, message, "sha256").hexdigest()

    providers = [f"provider-{index}" for index in range(600)]
    for provider in [*providers, *providers, Name("provider-7"), Name("elsewhere")]:
        assert store.credential_id(provider, KEY) == expected(str(provider))
    with pytest.raises(TypeError, match="provider must be a str"):
        store.credential_id(b"bytes", KEY)  # type: ignore[arg-type]
    assert len(digests._prefixes) <= 256  # callers' provider names cannot grow it unbounded


def test_same_secret_gives_same_ids() -> None:
    secret = b"s" * 40
    assert ModelCooldown(secret=secret).credential_id(P, KEY) == ModelCooldown(
        secret=secret
    ).credential_id(P, KEY)


# -- record rules -----------------------------------------------------------------------------


def test_throttle_cools_only_its_model(store: ModelCooldown) -> None:
    assert store.record(P, KEY, THROTTLED, model="a", now=0) == 60
    assert store.available(P, [KEY], model="a", now=1) == []
    assert store.available(P, [KEY], model="b", now=1) == [KEY]
    assert store.available(P, [KEY], now=1) == [KEY]


def test_throttle_on_one_provider_leaves_another(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", now=0)
    assert store.available("other", [KEY], model="a", now=1) == [KEY]


def test_model_and_bucket_namespaces_never_collide(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, quota_bucket="shared", now=0)
    assert store.available(P, [KEY], model="shared", now=1) == [KEY]
    assert store.available(P, [KEY], quota_bucket="shared", now=1) == []


def test_bucket_wins_over_model(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="mini", quota_bucket="tier-1", now=0)
    assert store.available(P, [KEY], model="large", quota_bucket="tier-1", now=1) == []
    assert store.available(P, [KEY], model="mini", now=1) == [KEY]


def test_empty_bucket_falls_back_to_model(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="mini", quota_bucket="", now=0)
    assert store.available(P, [KEY], model="mini", now=1) == []


def test_throttle_without_scope_changes_nothing(store: ModelCooldown) -> None:
    assert store.record(P, KEY, THROTTLED, now=0) is None
    assert store.entry_count == 0


def test_wide_auth_rejection_cools_every_model(store: ModelCooldown) -> None:
    assert store.record(P, KEY, REJECTED, credential_wide_auth=True, fallback_seconds=300, now=0)
    assert store.available(P, [KEY], model="a", now=299) == []
    assert store.available(P, [KEY], quota_bucket="b", now=299) == []
    assert store.available(P, [KEY], now=299) == []
    assert store.available(P, [KEY], now=300) == [KEY]


def test_rejection_without_wide_auth_changes_nothing(store: ModelCooldown) -> None:
    assert store.record(P, KEY, REJECTED, model="a", now=0) is None
    assert store.available(P, [KEY], model="a", now=1) == [KEY]


@pytest.mark.parametrize("status", [402, 403, 400, 500, 502, 503, 504, 408, None])
def test_other_outcomes_invent_no_cooldown(store: ModelCooldown, status: int | None) -> None:
    outcome = classify_upstream_outcome(status)
    assert store.record(P, KEY, outcome, model="a", now=0) is None
    assert store.entry_count == 0


def test_transport_failures_and_cancellation_invent_no_cooldown(store: ModelCooldown) -> None:
    for outcome in (
        classify_upstream_outcome(transport_failure="timeout"),
        classify_upstream_outcome(429, cancelled=True),
    ):
        assert store.record(P, KEY, outcome, model="a", credential_wide_auth=True, now=0) is None
    assert store.entry_count == 0


def test_caller_classified_quota_exhaustion_cools(store: ModelCooldown) -> None:
    outcome = UpstreamOutcome(False, "neutral", "throttled", "quota_exhausted")
    assert store.record(P, KEY, outcome, model="a", now=0) == 60


# -- success ----------------------------------------------------------------------------------


def test_success_clears_only_its_own_model(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", now=0)
    store.record(P, KEY, THROTTLED, model="b", now=0)
    assert store.record(P, KEY, ACCEPTED, model="a", now=1) is None
    assert store.available(P, [KEY], model="a", now=2) == [KEY]
    assert store.available(P, [KEY], model="b", now=2) == []


def test_success_never_clears_wide_auth(store: ModelCooldown) -> None:
    store.record(P, KEY, REJECTED, credential_wide_auth=True, now=0)
    store.record(P, KEY, ACCEPTED, model="a", now=1)
    store.record(P, KEY, ACCEPTED, now=1)
    assert store.available(P, [KEY], model="a", now=2) == []


def test_unscoped_success_changes_nothing(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", now=0)
    store.record(P, KEY, ACCEPTED, now=1)
    assert store.available(P, [KEY], model="a", now=2) == []


def test_success_never_clears_the_overflow_guard() -> None:
    small = ModelCooldown(max_entries=1)
    small.record(P, KEY, THROTTLED, model="a", now=0)
    small.record(P, OTHER, THROTTLED, model="a", now=0)
    small.record(P, KEY, ACCEPTED, model="a", now=1)
    with pytest.raises(ModelCooldownCapacity):
        small.available(P, [KEY], model="a", now=2)


# -- delay rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("advice", "expected"),
    [
        (None, 60.0),
        (30, 30.0),
        (2.5, 2.5),
        (0, 1.0),
        (0.2, 1.0),
        (-1, 60.0),
        (math.nan, 60.0),
        (math.inf, 60.0),
        (-math.inf, 60.0),
        (True, 60.0),
        (False, 60.0),
        ("30", 60.0),
        (10**400, 3600.0),
        (7200, 3600.0),
    ],
)
def test_delay_rules(store: ModelCooldown, advice: object, expected: float) -> None:
    deadline = store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=advice, now=100)  # type: ignore[arg-type]
    assert deadline == 100 + expected


def test_fallback_is_capped_and_floored(store: ModelCooldown) -> None:
    assert (
        store.record(P, KEY, THROTTLED, model="a", fallback_seconds=500, max_seconds=120, now=0)
        == 120
    )
    assert store.record(P, KEY, THROTTLED, model="b", fallback_seconds=0, now=0) == 1


def test_fractional_deadline_is_kept(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=1.5, now=10)
    assert store.available(P, [KEY], model="a", now=11.49) == []
    assert store.available(P, [KEY], model="a", now=11.5) == [KEY]


def test_later_deadline_wins(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=100, now=0)
    assert store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=5, now=1) == 100
    assert store.available(P, [KEY], model="a", now=50) == []
    assert store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=200, now=2) == 202
    assert store.available(P, [KEY], model="a", now=150) == []
    assert store.available(P, [KEY], model="a", now=202) == [KEY]


# -- release and selection --------------------------------------------------------------------


def test_release_waits_for_all_three_deadlines(store: ModelCooldown) -> None:
    store.record(P, KEY, REJECTED, credential_wide_auth=True, retry_after_seconds=10, now=0)
    store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=20, now=0)
    legacy = {KEY: 30.0}
    for now, expected in ((9, []), (19, []), (29, []), (30, [KEY])):
        assert store.available(P, [KEY], model="a", now=now, legacy_rest_until=legacy) == expected
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, [KEY], model="a", now=25, legacy_rest_until=legacy)
    assert raised.value.retry_after == 5


def test_an_empty_table_still_honours_legacy_rests_and_the_guard(store: ModelCooldown) -> None:
    assert store.available(P, [KEY, OTHER], model="a", legacy_rest_until={KEY: 10}, now=5) == [
        OTHER
    ]
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, [KEY], model="a", legacy_rest_until={KEY: 10}, now=5)
    assert raised.value.retry_after == 5
    assert store.record(P, KEY, ACCEPTED, model="a", now=5) is None
    assert store.entry_count == 0


def test_available_keeps_order(store: ModelCooldown) -> None:
    keys = ["k1", "k2", "k3", "k4"]
    store.record(P, "k2", THROTTLED, model="a", now=0)
    assert store.available(P, keys, model="a", now=1) == ["k1", "k3", "k4"]
    assert store.select(P, keys, model="a", now=1) == "k1"
    store.record(P, "k1", THROTTLED, model="a", now=0)
    assert store.select(P, keys, model="a", now=1) == "k3"


def test_select_without_keys_is_none(store: ModelCooldown) -> None:
    assert store.select(P, [], model="a", now=0) is None


def test_all_cooling_raises_with_earliest_release(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=40, now=0)
    store.record(P, OTHER, THROTTLED, model="a", retry_after_seconds=10.2, now=0)
    assert store.available(P, [KEY, OTHER], model="a", now=1) == []
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, [KEY, OTHER], model="a", now=1)
    assert raised.value.retry_after == 10  # ceil(9.2)
    assert raised.value.status_code == 429
    assert store.stats()["exhausted_total"] == 1


def test_retry_after_is_bounded(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=3000, now=0)
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, [KEY], model="a", max_seconds=100, now=0)
    assert raised.value.retry_after == 100
    store.record(P, OTHER, THROTTLED, model="a", retry_after_seconds=1, now=0)
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select(P, [OTHER], model="a", now=0.9999)
    assert raised.value.retry_after == 1


def test_eligible_raises_only_when_keys_exist(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", now=0)
    assert store.eligible(P, [], model="a", now=1) == []
    assert store.eligible(P, [KEY, OTHER], model="a", now=1) == [OTHER]
    with pytest.raises(ModelCooldownExhausted):
        store.eligible(P, [KEY], model="a", now=1)


# -- capacity ---------------------------------------------------------------------------------


@pytest.fixture
def full_store() -> ModelCooldown:
    small = ModelCooldown(max_entries=3)
    for index in range(3):
        small.record(P, f"filler-{index}", THROTTLED, model="a", retry_after_seconds=500, now=0)
    return small


def test_capacity_drops_new_entry_and_raises_the_guard(full_store: ModelCooldown) -> None:
    deadline = full_store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=30, now=0)
    assert deadline == 30
    assert full_store.entry_count == 3
    stats = full_store.stats()
    assert stats["dropped_at_capacity_total"] == 1
    assert stats["overflow_active"] is True
    with pytest.raises(ModelCooldownCapacity) as raised:
        full_store.select(P, [OTHER], model="a", now=10)
    assert raised.value.retry_after == 20
    assert raised.value.status_code == 503
    with pytest.raises(ModelCooldownCapacity):
        full_store.available(P, [OTHER], model="b", now=10)
    assert full_store.stats()["capacity_rejections_total"] == 2


def test_capacity_never_evicts(full_store: ModelCooldown) -> None:
    full_store.record(P, KEY, THROTTLED, model="a", now=0)
    for index in range(3):
        assert full_store.available(P, [f"filler-{index}"], model="a", now=0) == []


def test_all_cooling_still_gives_429_during_overflow(full_store: ModelCooldown) -> None:
    full_store.record(P, KEY, THROTTLED, model="a", now=0)
    with pytest.raises(ModelCooldownExhausted):
        full_store.select(P, ["filler-0", "filler-1"], model="a", now=1)
    assert full_store.available(P, ["filler-0"], model="a", now=1) == []


def test_overflow_guard_expires(full_store: ModelCooldown) -> None:
    full_store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=30, now=0)
    assert full_store.select(P, [OTHER], model="a", now=30) == OTHER
    assert full_store.stats()["overflow_active"] is False


def test_overflow_guard_keeps_the_later_deadline(full_store: ModelCooldown) -> None:
    full_store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=30, now=0)
    full_store.record(P, OTHER, THROTTLED, model="a", retry_after_seconds=5, now=0)
    with pytest.raises(ModelCooldownCapacity):
        full_store.select(P, ["fresh"], model="a", now=20)


def test_extending_an_existing_entry_is_allowed_at_capacity(full_store: ModelCooldown) -> None:
    assert (
        full_store.record(P, "filler-0", THROTTLED, model="a", retry_after_seconds=900, now=0)
        == 900
    )
    assert full_store.stats()["overflow_active"] is False


def test_space_returns_after_expiry(full_store: ModelCooldown) -> None:
    assert full_store.record(P, KEY, THROTTLED, model="a", now=500) == 560
    assert full_store.entry_count == 1


@pytest.mark.parametrize(("requested", "expected"), [(0, 1), (-5, 1), (5, 5), (10**6, MAX_ENTRIES)])
def test_max_entries_is_clamped(requested: int, expected: int) -> None:
    assert ModelCooldown(max_entries=requested).capacity == expected


# -- pruning and inspection -------------------------------------------------------------------


def test_reads_and_writes_prune(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", now=0)
    store.record(P, OTHER, THROTTLED, model="a", retry_after_seconds=120, now=0)
    assert store.entry_count == 2
    store.available(P, [], now=60)
    assert store.entry_count == 1
    store.record(P, KEY, classify_upstream_outcome(500), now=120)
    assert store.entry_count == 0


def test_entry_count_does_not_prune(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", now=0)
    assert store.entry_count == 1
    assert store.stats()["live_observations"] == 1


def test_churn_keeps_the_schedule_bounded(store: ModelCooldown) -> None:
    for step in range(5000):
        store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=1 + step, now=step)
        store.record(P, KEY, ACCEPTED, model="a", now=step)
    assert store.entry_count == 0
    assert store._state.schedule.scheduled <= 2 * store.entry_count + 64


def test_stats_are_counts_only(store: ModelCooldown) -> None:
    store.record(P, KEY, THROTTLED, model="a", now=0)
    store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=100, now=0)
    store.record(P, KEY, THROTTLED, model="a", retry_after_seconds=5, now=0)
    assert store.stats() == {
        "live_observations": 1,
        "capacity": MAX_ENTRIES,
        "overflow_active": False,
        "recorded_total": 2,
        "dropped_at_capacity_total": 0,
        "escalated_total": 0,
        "exhausted_total": 0,
        "capacity_rejections_total": 0,
        "probes_total": 0,
        "waits_total": 0,
        "waits_served_total": 0,
        "waits_timed_out_total": 0,
        "waits_refused_total": 0,
        "shared": False,
        "shared_errors_total": 0,
        "shared_degraded": False,
        "shared_split": False,
    }


def test_reset_forgets_everything_but_ids(store: ModelCooldown) -> None:
    before = store.credential_id(P, KEY)
    store.record(P, KEY, THROTTLED, model="a", now=0)
    store.reset()
    assert store.entry_count == 0
    assert store.stats()["recorded_total"] == 0
    assert store.credential_id(P, KEY) == before


# -- refusal and secrecy ----------------------------------------------------------------------


def test_pickling_and_copying_are_refused(store: ModelCooldown) -> None:
    with pytest.raises(TypeError):
        pickle.dumps(store)
    with pytest.raises(TypeError):
        copy.copy(store)
    with pytest.raises(TypeError):
        copy.deepcopy(store)


@pytest.mark.parametrize("bad", [1, b"model", ["m"], 1.5])
def test_non_string_scope_is_a_type_error(store: ModelCooldown, bad: object) -> None:
    with pytest.raises(TypeError):
        store.record(P, KEY, THROTTLED, model=bad, now=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.available(P, [KEY], quota_bucket=bad, now=0)  # type: ignore[arg-type]


def test_no_raw_names_in_state_logs_or_errors(
    store: ModelCooldown, caplog: pytest.LogCaptureFixture
) -> None:
    secrets = [KEY, OTHER, "gpt-secret-model", "bucket-secret-name"]
    with caplog.at_level(logging.DEBUG):
        store.record(P, KEY, THROTTLED, model="gpt-secret-model", now=0)
        store.record(P, OTHER, THROTTLED, quota_bucket="bucket-secret-name", now=0)
        store.record(P, OTHER, THROTTLED, model="gpt-secret-model", now=0)
        store.record(P, KEY, REJECTED, credential_wide_auth=True, now=0)
        errors = []
        for scope in ({"model": "gpt-secret-model"}, {"quota_bucket": "bucket-secret-name"}):
            with pytest.raises(ModelCooldownExhausted) as raised:
                store.select(P, [KEY, OTHER], now=1, **scope)  # type: ignore[arg-type]
            errors.append(raised.value)
    dumped = " ".join(
        [repr(store), repr(vars(store)), str(store.stats()), *map(str, errors)]
        + [repr(e.to_dict()) for e in errors]
        + [record.getMessage() for record in caplog.records]
    )
    for secret in secrets:
        assert secret not in dumped
        assert secret.encode() not in b"".join(store._state.deadlines)


def test_a_now_read_a_moment_earlier_never_truncates_the_table(mocker: MockerFixture) -> None:
    store = ModelCooldown()
    for index in range(2000):
        store.record(
            "p",
            f"k{index}",
            classify_upstream_outcome(429),
            model="m",
            retry_after_seconds=10**6,
            now=100.0,
        )
    truncate = mocker.spy(DeadlineSchedule, "_truncate")
    for step in range(200):  # threads whose clocks were read microseconds apart
        store.select("p", ["x"], model="m", now=100.0 - step * 1e-6, max_seconds=3600)
        store.record(
            "p",
            "y",
            classify_upstream_outcome(429),
            model="m",
            retry_after_seconds=10**6,
            now=100.0,
        )
    assert truncate.call_count == 0
    store.select("p", ["x"], model="m", now=100.0, max_seconds=60)  # a lowered maximum: once
    store.select("p", ["x"], model="m", now=100.0, max_seconds=60)
    assert truncate.call_count == 1


def test_a_key_at_its_scope_budget_is_counted_once(mocker: MockerFixture) -> None:
    store = ModelCooldown()
    for index in range(3000):  # a full table, so an exact count would be expensive
        store.record("filler", f"f{index}", classify_upstream_outcome(429), model="m", now=0.0)
    for index in range(64):
        store.record("p", "k", classify_upstream_outcome(429), model=f"m{index}", now=0.0)
    scans = mocker.spy(ScopeBudget, "admits")
    counted = 0
    original = sum

    def counting_sum(*args: Any) -> Any:
        nonlocal counted
        counted += 1
        return original(*args)

    mocker.patch("cooldown.store.budget.sum", counting_sum, create=True)
    for index in range(50):
        store.record("p", "k", classify_upstream_outcome(429), model=f"new-{index}", now=1.0)
    assert scans.call_count == 50
    assert counted == 1  # then the credential is known to be at its budget
    assert store.stats()["escalated_total"] == 50


def test_a_caller_passing_zero_does_not_cut_other_callers_cooldowns() -> None:
    store = ModelCooldown()
    store.record(
        "p", "k", classify_upstream_outcome(429), model="m", retry_after_seconds=3000, now=5000.0
    )
    assert store.select("p", ["other"], model="m", now=0.0) == "other"
    with pytest.raises(ModelCooldownExhausted) as raised:
        store.select("p", ["k"], model="m", now=5001.0)
    assert raised.value.retry_after == 2999  # not cut to 0 + 3600
    store.select("p", ["other"], model="m", now=5001.0, max_seconds=60)  # a lowered maximum
    with pytest.raises(ModelCooldownExhausted) as lowered:
        store.select("p", ["k"], model="m", now=5001.0, max_seconds=60)
    assert lowered.value.retry_after == 60
