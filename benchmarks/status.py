"""What `CredentialPool.status()` costs an operator's scrape: 100 keys, idle and full table.

Run by hand: `python benchmarks/status.py`. Targets: <= 5 ms with 10000
live entries, <= 1 ms on an idle table; one pass over the table per call.
"""

from __future__ import annotations

import os
import time
import timeit

from cooldown import CredentialPool, classify_upstream_outcome, model_cooldown

KEYS = 100
BASE = "BENCH_STATUS_KEY"
THROTTLED = classify_upstream_outcome(429)


def fastest_ms(statement: str, number: int = 20) -> float:
    runs = timeit.repeat(statement, globals=globals(), number=number, repeat=7)
    return min(runs) / number * 1e3


def main() -> None:
    os.environ["MODEL_COOLDOWN_ENABLED"] = "true"
    os.environ[BASE] = "sk-status-0"
    for index in range(1, KEYS):
        os.environ[f"{BASE}_{index}"] = f"sk-status-{index}"
    CredentialPool.register("bench-status", BASE)
    idle = fastest_ms("CredentialPool.status('bench-status')")
    idle_model = fastest_ms("CredentialPool.status('bench-status', model='gpt-bench')")
    now = time.monotonic()
    for index in range(KEYS):  # every key cools for one model: what the summary must count
        CredentialPool.record("bench-status", f"sk-status-{index}", 429, model="gpt-bench")
    for index in range(10_000 - KEYS):
        model_cooldown.record(
            "filler", f"f{index}", THROTTLED, model="m", now=now, retry_after_seconds=3000
        )
    assert model_cooldown.entry_count == 10_000
    full = fastest_ms("CredentialPool.status('bench-status')")
    full_model = fastest_ms("CredentialPool.status('bench-status', model='gpt-bench')")
    assert CredentialPool.status("bench-status")["cooling_some_models"] == KEYS
    print(f"status() for {KEYS} keys, idle table:         {idle:5.2f} ms (target <= 1 ms)")
    print(f"  ... with a model:                        {idle_model:5.2f} ms")
    print(f"status() for {KEYS} keys, 10000 live entries: {full:5.2f} ms (target <= 5 ms)")
    print(f"  ... with a model:                        {full_model:5.2f} ms")


if __name__ == "__main__":
    main()
