"""The goodput simulator's claims, asserted on its deterministic counts (never on timings)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from cooldown import CredentialPool

SIMULATOR = Path(__file__).resolve().parents[2] / "benchmarks" / "goodput.py"


@pytest.fixture(scope="module")
def goodput() -> ModuleType:
    spec = importlib.util.spec_from_file_location("goodput", SIMULATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["goodput"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def restored_environment() -> Iterator[None]:
    """The simulator configures the pools through os.environ, as a deployment would."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
    CredentialPool._providers.pop("goodput-sim", None)


def test_rate_limit_headers_prevent_every_provider_429_in_steady_traffic(
    goodput: ModuleType,
) -> None:
    reactive = goodput.headers_scenario(goodput.REACTIVE, hours=0.5)
    headers = goodput.headers_scenario(goodput.HEADERS, hours=0.5)
    assert reactive.provider_429s > 0  # the 429 the headers would have avoided
    assert headers.provider_429s == 0
    assert headers.served >= reactive.served


def test_per_model_cooldowns_serve_more_than_provider_wide_rests(goodput: ModuleType) -> None:
    legacy = goodput.uneven_scenario(goodput.LEGACY, hours=0.5)
    reactive = goodput.uneven_scenario(goodput.REACTIVE, hours=0.5)
    assert reactive.served > legacy.served
    assert reactive.provider_429s < legacy.provider_429s


def test_learned_windows_cut_advice_less_429s_without_over_cooling(goodput: ModuleType) -> None:
    hour, end = goodput.HOUR, 4 * goodput.HOUR
    fixed, _ = goodput.no_advice_scenario(goodput.REACTIVE, hours=4)
    learned, _ = goodput.no_advice_scenario(goodput.LEARNED, hours=4)
    assert goodput.per_window(fixed.provider_429_times, hour, end, 300.0) > 4.5
    assert goodput.per_window(learned.provider_429_times, hour, end, 300.0) <= 1.5
    served_share = goodput.per_window(learned.served_times, hour, end, 300.0) / 5
    assert served_share >= 0.9


def test_shadow_learning_changes_nothing(goodput: ModuleType) -> None:
    shadow = goodput.Strategy("shadow", learn="shadow")
    fixed, _ = goodput.no_advice_scenario(goodput.REACTIVE, hours=1)
    watched, _ = goodput.no_advice_scenario(shadow, hours=1)
    assert watched.provider_429_times == fixed.provider_429_times
    assert watched.served_times == fixed.served_times


def test_learned_windows_follow_a_longer_window(goodput: ModuleType) -> None:
    result, _ = goodput.no_advice_scenario(goodput.LEARNED, hours=6, window_after=600.0)
    settled = goodput.per_window(
        result.provider_429_times, 4 * goodput.HOUR, 6 * goodput.HOUR, 600.0
    )
    assert settled <= 1.5


def test_affinity_keeps_conversations_on_their_first_key(goodput: ModuleType) -> None:
    without = goodput.affinity_scenario(goodput.LEARNED, hours=0.25)
    with_affinity = goodput.affinity_scenario(goodput.AFFINITY, hours=0.25)
    assert with_affinity.first_key_share > 0.9 > 0.6 > without.first_key_share
    assert with_affinity.served == without.served
