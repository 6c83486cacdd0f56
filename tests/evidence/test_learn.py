"""Learned windows: bounds from natural traffic, bounded memory, advice always wins."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cooldown import CredentialPool, ModelCooldownExhausted
from cooldown.digests import scope_message
from cooldown.evidence.learn import (
    UNUSED_EXPIRY_SECONDS,
    LearnPolicy,
    WindowLearner,
    window_learner,
)

P = "ce-gpt-plus"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL"
SCOPE = scope_message("gpt-4o", None) or b""


@pytest.fixture
def one_key(enabled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE, "sk-learn-SECRET")


def released_at(model: str, start: float) -> float:
    """The first whole second at which the pool lets the key go again."""
    now = start
    while True:
        try:
            CredentialPool.select(P, model=model, now=now)
            return now
        except ModelCooldownExhausted:
            now += 1


def test_apply_learns_a_longer_window(one_key: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_LEARN", "apply")
    CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=0)
    assert released_at("gpt-4o", 0) == 5  # nothing known yet: the short first delay
    CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=5)
    assert released_at("gpt-4o", 5) == 15  # still throttled: the delay doubles
    CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=15)
    assert released_at("gpt-4o", 15) == 35
    CredentialPool.record(P, "sk-learn-SECRET", 200, model="gpt-4o", now=35)
    assert window_learner.bounds(P, "sk-learn-SECRET", SCOPE) == (15.0, 35.0)
    CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=1000)
    assert released_at("gpt-4o", 1000) == 1025  # next episode: bisect (15, 35]


def test_the_doubling_stops_at_the_fallback(one_key: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_LEARN", "apply")
    monkeypatch.setenv("MODEL_COOLDOWN_FIRST_DELAY", "20")
    now = 0
    for expected in (20, 40, 60, 60):  # the pool's fixed fallback is 60 s
        CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=now)
        released = released_at("gpt-4o", now)
        assert released - now == expected
        now = released


def test_provider_advice_always_wins(one_key: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_LEARN", "apply")
    for start in (0, 1000):  # teach it 120 s
        CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=start)
        CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=start + 60)
        CredentialPool.record(P, "sk-learn-SECRET", 200, model="gpt-4o", now=start + 120)
    CredentialPool.record(
        P, "sk-learn-SECRET", 429, model="gpt-4o", retry_after_seconds=5, now=2000
    )
    assert released_at("gpt-4o", 2000) == 2005


def test_off_and_shadow_cool_for_the_fixed_fallback(
    one_key: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for mode, start in (("off", 0), ("shadow", 10_000)):
        monkeypatch.setenv("MODEL_COOLDOWN_LEARN", mode)
        with caplog.at_level(logging.INFO, logger="cooldown"):
            CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=start)
            CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=start + 60)
        assert released_at("gpt-4o", start + 60) == start + 120
    assert len(window_learner) == 1  # shadow learned; off never touched it
    shadow_lines = [r.getMessage() for r in caplog.records if "learned window" in r.getMessage()]
    assert shadow_lines
    assert all("SECRET" not in line and "gpt-4o" not in line for line in shadow_lines)


def test_malformed_mode_is_off_with_one_warning(
    one_key: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_warnings: None,
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_LEARN", "sometimes")
    with caplog.at_level(logging.WARNING, logger="cooldown"):
        for start in (0, 60):
            CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=start)
    assert [r.getMessage() for r in caplog.records] == [
        "MODEL_COOLDOWN_LEARN is malformed; windows are not learned"
    ]
    assert len(window_learner) == 0


def test_estimates_are_bounded_least_recently_used_first() -> None:
    learner = WindowLearner(max_estimates=3)
    for index in range(4):
        learner.throttled(
            P, f"k{index}", SCOPE, fallback=60, now=index, policy=LearnPolicy("apply", 3600)
        )
    assert len(learner) == 3
    assert learner.bounds(P, "k0", SCOPE) is None
    assert learner.bounds(P, "k3", SCOPE) == (0.0, None)


def test_an_estimate_unused_for_seven_days_starts_over() -> None:
    learner = WindowLearner()
    learner.throttled(P, "k", SCOPE, fallback=60, now=0, policy=LearnPolicy("apply", 3600))
    learner.throttled(P, "k", SCOPE, fallback=60, now=60, policy=LearnPolicy("apply", 3600))
    assert learner.bounds(P, "k", SCOPE) == (60.0, None)
    later = 60 + UNUSED_EXPIRY_SECONDS + 1
    assert (
        learner.throttled(P, "k", SCOPE, fallback=60, now=later, policy=LearnPolicy("apply", 3600))
        == 60
    )
    assert learner.bounds(P, "k", SCOPE) == (0.0, None)


def test_learner_state_holds_no_names() -> None:
    learner = WindowLearner()
    learner.throttled(P, "sk-SECRET", SCOPE, fallback=60, now=0, policy=LearnPolicy("apply", 3600))
    assert all(b"SECRET" not in entry and b"gpt" not in entry for entry in learner._estimates)
    assert "SECRET" not in repr(vars(learner))


events = st.lists(
    st.tuples(st.sampled_from(["throttle", "success"]), st.floats(0, 5000)), max_size=60
)


@settings(max_examples=300, deadline=None)
@given(
    events=events,
    ceiling=st.sampled_from([1, 30, 300, 3600]),
    fallback=st.sampled_from([1, 60, 300]),
)
def test_learner_invariants(events: list[tuple[str, float]], ceiling: int, fallback: int) -> None:
    learner = WindowLearner()
    now = 0.0
    for kind, gap in events:
        now += gap
        if kind == "throttle":
            delay = learner.throttled(
                P, "k", SCOPE, fallback=fallback, now=now, policy=LearnPolicy("apply", ceiling)
            )
            assert 1 <= delay <= ceiling
        else:
            learner.succeeded(P, "k", SCOPE, now=now)
        bounds = learner.bounds(P, "k", SCOPE)
        if bounds is not None:
            lower, upper = bounds
            assert lower >= 0
            assert upper is None or lower <= upper


def test_nanogpt_pools_learn_too(enabled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from cooldown import NanoGPTKeyPool

    monkeypatch.setenv("MODEL_COOLDOWN_LEARN", "apply")
    for at in (0, 5, 15):  # throttled again at each release: 5, then 10, then 20 s
        NanoGPTKeyPool.record_result("nano-learn", 429, model="gpt-4o", now=at)
    with pytest.raises(ModelCooldownExhausted):
        NanoGPTKeyPool.select_available_key(["nano-learn"], model="gpt-4o", now=34)
    assert NanoGPTKeyPool.select_available_key(["nano-learn"], model="gpt-4o", now=35)


@pytest.mark.parametrize("sent_at", [float("nan"), float("inf"), "5", -3.0])
def test_a_refused_sent_at_teaches_the_learner_nothing(
    one_key: None, monkeypatch: pytest.MonkeyPatch, sent_at: object
) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_LEARN", "apply")
    for now in (0, 5, 15):  # three advice-less throttles in a row would learn a long window
        with pytest.raises((TypeError, ValueError), match="sent_at"):
            CredentialPool.record(
                P, "sk-learn-SECRET", 429, model="gpt-4o", now=now, sent_at=sent_at
            )  # type: ignore[arg-type]
    CredentialPool.record(P, "sk-learn-SECRET", 429, model="gpt-4o", now=100)
    assert released_at("gpt-4o", 100) == 105  # still the first delay: nothing was learned
