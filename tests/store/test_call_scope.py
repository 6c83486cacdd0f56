"""A `CallScope` in `provider`'s place carries the whole scope, as the pools pass it."""

from __future__ import annotations

import pytest

from cooldown import ModelCooldown, classify_upstream_outcome
from cooldown.store import CallScope

P = "scoped-provider"
KEYS = ["sk-scope-one", "sk-scope-two", "sk-scope-three"]
THROTTLED = classify_upstream_outcome(429)


def test_a_scope_selects_what_its_keywords_select(store: ModelCooldown) -> None:
    store.record(P, KEYS[0], THROTTLED, model="m", retry_after_seconds=30, now=0)
    scope = CallScope(P, "m", now=1, order="configured")
    assert store.available(scope, KEYS) == store.available(P, KEYS, model="m", now=1)
    assert store.select(scope, KEYS) == KEYS[1]
    assert store.explain(scope, KEYS)[0] == ("scope", 30)
    assert store.select(scope._replace(model="other"), KEYS) == KEYS[0]


def test_a_scope_carries_the_accounts_a_budget_belongs_to(store: ModelCooldown) -> None:
    scope = CallScope(P, "m", now=0, accounts={KEYS[0]: "team", KEYS[1]: "team"})
    store.record_budget(scope, KEYS[0], remaining=0, reset_seconds=30)
    assert store.available(scope, KEYS) == [KEYS[2]]  # the account's budget is spent


def test_admit_takes_a_scope_and_keeps_its_order(store: ModelCooldown) -> None:
    taken = store.admit(CallScope(P, "m", now=0, order="configured"), KEYS)
    assert taken is not None
    assert taken[0] == KEYS[0]
    store.finish(taken[1], served=True)


@pytest.mark.parametrize(
    "keywords",
    [{"model": "m"}, {"now": 1}, {"max_seconds": 60}, {"cost": 10}, {"order": "spread"}],
)
def test_a_scope_and_its_keywords_together_are_a_type_error(
    store: ModelCooldown, keywords: dict[str, object]
) -> None:
    with pytest.raises(TypeError, match="not both"):
        store.available(CallScope(P, "m"), KEYS, **keywords)  # type: ignore[arg-type]
