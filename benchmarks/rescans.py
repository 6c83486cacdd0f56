"""Full-table rescans under ordinary threaded load (issue 22, item 2).

Run by hand: `python benchmarks/rescans.py`. 8000 entries whose deadlines sit exactly at the
maximum; 8 threads select and record for 3 s, each reading its clock just before the call,
as the pools do (so a call's `now` may be microseconds older than the last write's). Prints
operations per second and how many times the whole table was truncated per second.
"""

from __future__ import annotations

import threading
import time

from cooldown import ModelCooldown, classify_upstream_outcome
from cooldown.store.schedule import DeadlineSchedule

THROTTLED = classify_upstream_outcome(429)
THREADS, SECONDS, MAXIMUM = 8, 3.0, 60


def main() -> None:
    store = ModelCooldown()
    now = time.monotonic()
    for index in range(8000):  # advice above the maximum: every deadline sits at the cap
        store.record(
            "p", f"k{index}", THROTTLED, model="m", retry_after_seconds=600, now=now,
            max_seconds=MAXIMUM,
        )  # fmt: skip
    rescans = [0]
    truncate = DeadlineSchedule._truncate

    def counting(schedule: DeadlineSchedule, limit: float) -> None:
        rescans[0] += 1
        truncate(schedule, limit)

    DeadlineSchedule._truncate = counting  # type: ignore[method-assign]
    operations = [0]
    stop = time.monotonic() + SECONDS

    def work(thread: int) -> None:
        step = 0
        while time.monotonic() < stop:
            store.select("p", [f"x{thread}"], model="m", max_seconds=MAXIMUM, now=time.monotonic())
            store.record(
                "p", f"y{thread}-{step % 10}", THROTTLED, model=f"m{step % 7}",
                retry_after_seconds=600, max_seconds=MAXIMUM, now=time.monotonic(),
            )  # fmt: skip
            operations[0] += 2
            step += 1

    threads = [threading.Thread(target=work, args=(index,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(
        f"{THREADS} threads, 8000 entries at the cap: {operations[0] / SECONDS:,.0f} ops/s, "
        f"{rescans[0] / SECONDS:.1f} full-table rescans/s"
    )


if __name__ == "__main__":
    main()
