"""Property tests: legacy pools are unchanged by the flag, and the parsers never crash."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager

import hypothesis.strategies as st
from hypothesis import given, settings

from cooldown import (
    CooldownSettings,
    CredentialPool,
    NanoGPTKeyPool,
    NanoGPTKeyPoolExhausted,
    NanoGPTUnifiedKeyPool,
    model_cooldown,
    retry_after_seconds,
)
from cooldown import config as config_module
from cooldown import settings as read_settings

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-prop-a", "sk-prop-b", "sk-prop-c"]
STATUSES = [200, 204, 400, 401, 402, 403, 404, 408, 429, 500, 503]


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set variables for one hypothesis example (fixtures would leak across examples)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


credential_ops = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.integers(0, 2), st.sampled_from(STATUSES)),
        st.tuples(st.just("headers"), st.integers(0, 2), st.sampled_from(STATUSES)),
        st.tuples(st.sampled_from(["select", "available", "eligible"])),
        st.tuples(st.just("wait"), st.sampled_from([1, 30, 59, 60, 61, 299, 300])),
    ),
    max_size=30,
)


def run_credential(ops: list[tuple[object, ...]], model: str | None) -> list[object]:
    CredentialPool.reset()
    now, answers = 0.0, []
    for op in ops:
        if op[0] == "wait":
            now += float(op[1])  # type: ignore[arg-type]
        elif op[0] == "record":
            CredentialPool.record(P, KEYS[op[1]], op[2], now=now, model=model)  # type: ignore[index, arg-type]
        elif op[0] == "headers":
            auth = {"authorization": f"Bearer {KEYS[op[1]]}"}  # type: ignore[index]
            CredentialPool.record_headers(P, auth, op[2], now=now, quota_bucket=model)  # type: ignore[arg-type]
        else:
            answers.append(getattr(CredentialPool, str(op[0]))(P, now=now, model=model))
    answers.append(sorted(CredentialPool._legacy.snapshot().items()))
    return answers


@settings(max_examples=200, deadline=None)
@given(ops=credential_ops, unscoped=st.sampled_from([None, ""]))
def test_credential_pool_flag_on_but_unscoped_equals_flag_off(
    ops: list[tuple[object, ...]], unscoped: str | None
) -> None:
    with environment(**{BASE: KEYS[0], f"{BASE}_1": KEYS[1], f"{BASE}_7": KEYS[2]}):
        with environment(MODEL_COOLDOWN_ENABLED="false"):
            off = run_credential(ops, "gpt-prop")
        with environment(MODEL_COOLDOWN_ENABLED="true"):
            on = run_credential(ops, unscoped)
    assert on == off
    assert model_cooldown.entry_count == 0


nanogpt_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("select_key"),
            st.fixed_dictionaries({k: st.sampled_from(STATUSES) for k in KEYS}),
            st.integers(1, 3),
        ),
        st.tuples(
            st.sampled_from(["record_result", "invalidate"]),
            st.integers(0, 2),
            st.sampled_from(STATUSES),
        ),
        st.tuples(st.just("select_available_key")),
        st.tuples(st.just("wait"), st.sampled_from([1, 29, 30, 60, 299, 300])),
    ),
    max_size=30,
)


def run_nanogpt(
    pool: type[NanoGPTKeyPool], ops: list[tuple[object, ...]], model: str | None
) -> list[object]:
    pool.reset()
    now, answers = 0.0, []
    for op in ops:
        if op[0] == "wait":
            now += float(op[1])  # type: ignore[arg-type]
        elif op[0] == "select_key":
            statuses: dict[str, int] = op[1]  # type: ignore[assignment]
            try:
                answers.append(
                    pool.select_key(
                        KEYS,
                        statuses.__getitem__,
                        check_every_requests=op[2],  # type: ignore[arg-type]
                        now=now,
                        model=model,
                    )
                )
            except NanoGPTKeyPoolExhausted as error:
                answers.append(str(error))
        elif op[0] == "select_available_key":
            answers.append(pool.select_available_key(KEYS, now=now, model=model))
        else:
            getattr(pool, str(op[0]))(KEYS[op[1]], op[2], now=now, model=model)  # type: ignore[index]
        answers.append((pool.active_key, pool.active_until, pool.active_requests))
    answers.append(sorted(pool.rejected_until.items()))
    return answers


@settings(max_examples=200, deadline=None)
@given(
    ops=nanogpt_ops,
    unscoped=st.sampled_from([None, ""]),
    pool=st.sampled_from([NanoGPTKeyPool, NanoGPTUnifiedKeyPool]),
)
def test_nanogpt_flag_on_but_unscoped_equals_flag_off(
    ops: list[tuple[object, ...]], unscoped: str | None, pool: type[NanoGPTKeyPool]
) -> None:
    with environment(MODEL_COOLDOWN_ENABLED="false"):
        off = run_nanogpt(pool, ops, "gpt-prop")
    with environment(MODEL_COOLDOWN_ENABLED="true"):
        on = run_nanogpt(pool, ops, unscoped)
    assert on == off
    assert model_cooldown.entry_count == 0


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@settings(max_examples=500, deadline=None)
@given(enabled=st.text(max_size=12), maximum=st.text(max_size=12))
def test_settings_parser_never_raises_and_never_logs_values(enabled: str, maximum: str) -> None:
    config_module._warned.clear()
    config_module._parse.cache_clear()
    handler = Collect()
    logger = logging.getLogger("cooldown")
    logger.addHandler(handler)
    try:
        parsed = read_settings(
            {"MODEL_COOLDOWN_ENABLED": enabled, "MODEL_COOLDOWN_MAX_SECONDS": maximum}
        )
    finally:
        logger.removeHandler(handler)
    assert isinstance(parsed, CooldownSettings)
    assert 1 <= parsed.max_seconds <= 2147483647
    if handler.messages:
        assert parsed == CooldownSettings()
        templates = {
            f"{name} is malformed; model cooldown is disabled"
            for name in ("MODEL_COOLDOWN_ENABLED", "MODEL_COOLDOWN_MAX_SECONDS")
        }
        assert set(handler.messages) <= templates
    else:
        assert parsed.enabled == (enabled.strip().lower() in {"true", "1", "yes", "on"})


header_values = st.one_of(
    st.text(max_size=40),
    st.integers(-(10**6), 10**20).map(str),
    st.datetimes(timezones=st.timezones()).map(
        lambda moment: moment.strftime("%a, %d %b %Y %H:%M:%S GMT")
    ),
    st.binary(max_size=10),
    st.none(),
    st.floats(allow_nan=True),
)


@settings(max_examples=1000, deadline=None)
@given(value=header_values, name=st.sampled_from(["Retry-After", "retry-after", "RETRY-AFTER"]))
def test_retry_after_parser_never_raises(value: object, name: str) -> None:
    seconds = retry_after_seconds({name: value}, received_at=1_800_000_000.0)
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)
