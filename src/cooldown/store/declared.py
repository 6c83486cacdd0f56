"""Limits a provider documents, declared at registration (`register(limits=...)`): requests
and tokens per second, minute, hour and day, counted per key (or account) and scope, so no
attempt is started that would pass one.

Second, minute and hour windows roll: each is counted in 60 slots, and an attempt leaves
its window when its slot has, at most one slot (a sixtieth of the window) later than the
exact moment: never earlier, so the count never lets a request through that the provider
would refuse. A day ends at midnight in its zone, read from the wall clock, or rolls over
24 hours like the others (`day_zone="rolling"`). Counts live under the store's lock, in
digests only, bounded like every map of the store.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone, tzinfo
from itertools import islice
from typing import Literal, NamedTuple, TypedDict
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .backend import SharedWindow

__all__ = [
    "COUNTERS",
    "UNITS",
    "DeclaredLimits",
    "DeclaredWindows",
    "Window",
    "WindowStatus",
    "day_zone",
    "declared_limits",
    "hold_in",
    "shared_windows",
    "status_in",
    "window_id",
]

Counter = Literal["requests", "tokens"]
Unit = Literal["second", "minute", "hour", "day"]
COUNTERS: tuple[Counter, ...] = ("requests", "tokens")
UNITS: tuple[Unit, ...] = ("second", "minute", "hour", "day")
UNIT_SECONDS: Mapping[Unit, int] = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
SLOTS = 60
"""Slots a rolling window is counted in."""
ROLLING = "rolling"
"""`day_zone` for a day of 24 rolling hours."""
MOST_OWNERS = 10000
"""Keys (or accounts) times scopes counted at most; beyond it the oldest counts are dropped."""


class Window(NamedTuple):
    """One declared limit: `limit` of `counter` per `unit`."""

    counter: Counter
    unit: Unit
    limit: int


class DeclaredLimits(NamedTuple):
    """A provider's declared windows, and when its day ends (`None`: 24 rolling hours)."""

    windows: tuple[Window, ...]
    zone: tzinfo | None


class WindowStatus(TypedDict):
    """One declared window as status shows it, for one key (or account) and scope."""

    counter: Counter
    unit: Unit
    used: int
    limit: int
    resets_in: int  # seconds until the earliest counted attempt leaves it (0: none counted)


def day_zone(zone: object) -> tzinfo | None:
    """An IANA zone name, or `"rolling"` (24 rolling hours: `None`)."""
    if not isinstance(zone, str):
        raise TypeError('day_zone must be an IANA zone name such as "UTC", or "rolling"')
    if zone == ROLLING:
        return None
    if zone == "UTC":  # known without a time zone database
        return timezone.utc
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f'day_zone must be an IANA zone name or "{ROLLING}"') from None


def declared_limits(limits: object, zone: object = "UTC") -> DeclaredLimits | None:
    """`{"requests": {"minute": 15, "day": 1500}, "tokens": {"minute": 1000000}}` checked;
    `None` when nothing is declared."""
    checked_zone = day_zone(zone)
    if limits is None:
        return None
    if not isinstance(limits, Mapping):
        raise TypeError('limits must map "requests" or "tokens" to {unit: limit}')
    windows: list[Window] = []
    for counter, units in limits.items():
        if not isinstance(counter, str):
            raise TypeError("a limit's counter must be a str")
        if counter not in COUNTERS:
            raise ValueError(f"a limit's counter must be one of {COUNTERS}")
        if not isinstance(units, Mapping):
            raise TypeError(f"limits[{counter!r}] must map a unit to a limit")
        for unit, limit in units.items():
            if not isinstance(unit, str):
                raise TypeError("a limit's unit must be a str")
            if unit not in UNITS:
                raise ValueError(f"a limit's unit must be one of {UNITS}")
            if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit < 0:
                raise ValueError("a limit must be 0 or more")
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise TypeError("a limit must be an int")
            windows.append(Window(counter, unit, limit))
    return DeclaredLimits(tuple(windows), checked_zone) if windows else None


def wall_offset() -> float:
    """What to add to a monotonic moment to read it on the wall clock, read now."""
    return time.time() - time.monotonic()


_Slots = dict[int, list[float]]  # slot -> [amount counted, when it leaves the window]
Live = list[tuple[float, float]]
"""A window's live slots: (when each leaves the window, what it counted)."""
WindowReader = Callable[[Counter, Unit], Live]
"""One owner's live slots of each window."""


class DeclaredWindows:
    """What each owner (a key's entry, or its account's, with the scope) started in each
    declared window. The store's lock guards it."""

    def __init__(self, most: int = MOST_OWNERS) -> None:
        self._most = most
        self._counts: dict[bytes, dict[tuple[Counter, Unit], _Slots]] = {}

    def clear(self) -> None:
        self._counts.clear()

    def reader(self, owner: bytes, now: float) -> WindowReader:
        """Each window's live slots for the owner, as (when it leaves the window, amount)."""
        counts = self._counts.get(owner, {})

        def read(counter: Counter, unit: Unit) -> Live:
            slots = counts.get((counter, unit)) or {}
            return [(ends, amount) for amount, ends in slots.values() if ends > now]

        return read

    def hold(self, owner: bytes, limits: DeclaredLimits, now: float, cost: int | None) -> float:
        """Until when a request of `cost` tokens (unknown: it needs one left) would pass a
        window: 0.0 when none, `inf` when it never fits (a limit of 0, or below `cost`)."""
        return hold_in(self.reader(owner, now), limits, now, cost)

    def count(self, owner: bytes, limits: DeclaredLimits, now: float, cost: int | None) -> None:
        """One attempt started: a request, and `cost` tokens (unknown: none)."""
        counts = self._counts.get(owner)
        if counts is None:
            counts = self._counts[owner] = {}
            if len(self._counts) > self._most:
                for oldest in list(islice(self._counts, len(self._counts) - self._most)):
                    del self._counts[oldest]
        offset = wall_offset()
        for counter, unit, _ in limits.windows:
            amount = 1 if counter == "requests" else (cost or 0)
            slots = counts.setdefault((counter, unit), {})
            for ended in [slot for slot, (_, ends) in slots.items() if ends <= now]:
                del slots[ended]
            slot, ends = _slot(unit, limits.zone, now, offset)
            counted = slots.get(slot)
            if counted is None:
                slots[slot] = [amount, ends]
            else:
                counted[0] += amount

    def status(self, owner: bytes, limits: DeclaredLimits, now: float) -> list[WindowStatus]:
        """Each declared window's count for the owner as of `now`."""
        return status_in(self.reader(owner, now), limits, now)


def window_id(counter: Counter, unit: Unit) -> str:
    """How the shared state names one window of an owner: `rm` is requests per minute."""
    return counter[0] + unit[0]


def hold_in(read: WindowReader, limits: DeclaredLimits, now: float, cost: int | None) -> float:
    """Until when a request of `cost` would pass one of the windows `read` gives."""
    hold = 0.0
    for counter, unit, limit in limits.windows:
        need = 1 if counter == "requests" or cost is None else cost
        hold = max(hold, _room_at(read(counter, unit), limit, need))
    return hold


def status_in(read: WindowReader, limits: DeclaredLimits, now: float) -> list[WindowStatus]:
    """Each window's use, as `read` gives its live slots."""
    shown: list[WindowStatus] = []
    for counter, unit, limit in limits.windows:
        live = read(counter, unit)
        ends = min((ends for ends, _ in live), default=now)
        shown.append(
            {
                "counter": counter,
                "unit": unit,
                "used": int(sum(amount for _, amount in live)),
                "limit": limit,
                "resets_in": math.ceil(max(0.0, ends - now)),
            }
        )
    return shown


def shared_windows(limits: DeclaredLimits, now: float, cost: int | None) -> list[SharedWindow]:
    """The windows as the shared admission counts them for a request of `cost` at `now`."""
    windows = []
    for counter, unit, limit in limits.windows:
        need = 1 if counter == "requests" or cost is None else cost
        amount = 1 if counter == "requests" else (cost or 0)
        ends = None
        if unit == "day" and limits.zone is not None:
            _, ends = _slot(unit, limits.zone, now, wall_offset())
        width = UNIT_SECONDS[unit] / SLOTS
        windows.append(SharedWindow(window_id(counter, unit), limit, need, amount, width, ends))
    return windows


def _room_at(live: Live, limit: int, need: int) -> float:
    """When `need` more fits under `limit`, as the live slots leave the window."""
    if need > limit:
        return math.inf
    excess = sum(amount for _, amount in live) + need - limit
    if excess <= 0:
        return 0.0
    for ends, amount in sorted(live):
        excess -= amount
        if excess <= 0:
            return ends
    return 0.0


def _slot(unit: Unit, zone: tzinfo | None, now: float, offset: float) -> tuple[int, float]:
    """The slot an attempt started at `now` is counted in, and when that slot leaves its
    window (monotonic): a rolling window's slot is a sixtieth of it, a calendar day's the
    day itself, ending at the next midnight in its zone."""
    if unit == "day" and zone is not None:
        today = datetime.fromtimestamp(now + offset, zone).date()
        midnight = datetime.combine(today + timedelta(days=1), datetime.min.time(), zone)
        return today.toordinal(), midnight.timestamp() - offset
    width = UNIT_SECONDS[unit] / SLOTS
    slot = math.floor(now / width)
    return slot, (slot + SLOTS + 1) * width
