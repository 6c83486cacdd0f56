"""What one announced budget says about its counter's refill period."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from cooldown.evidence.refill_shape import refill_periods


@given(
    limit=st.integers(1, 100_000),
    period=st.sampled_from([1.0, 10.0, 60.0, 3600.0, 86400.0]),
    fill=st.floats(0.0, 1.0, exclude_max=True),
    reset_error=st.floats(-2.0, 2.0),
)
def test_every_reading_of_a_continuous_counter_allows_its_period(
    limit: int, period: float, fill: float, reset_error: float
) -> None:
    """Whoever spent from it: remaining rounded down, the reset off by up to two seconds."""
    level = fill * limit
    reset = (limit - level) * period / limit + reset_error
    periods = refill_periods(math.floor(level), reset, limit)
    if periods is not None:
        assert periods[0] <= period <= periods[1]


def test_a_fixed_windows_readings_soon_allow_no_common_period() -> None:
    """Five requests per 10 s window, answered 50 ms apart from its start: by the fourth
    reading, no period explains them all."""
    readings = [refill_periods(5 - used, 10.0 - 0.05 * used, 5) for used in (1, 2, 3, 4)]
    assert all(periods is not None for periods in readings)
    low = max(periods[0] for periods in readings if periods is not None)
    high = min(periods[1] for periods in readings if periods is not None)
    assert low > high


def test_a_full_counter_or_a_due_reset_says_nothing() -> None:
    assert refill_periods(60, 0.0, 60) is None
    assert refill_periods(10, 0.0, 60) is None
    assert refill_periods(70, 5.0, 60) is None
