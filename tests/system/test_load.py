"""Bounded load over loopback: no key is dispatched to a model the gateway knew was cooling."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

CLIENTS = 4
REQUESTS_PER_CLIENT = 1500
MODELS = ["gpt-load-0", "gpt-load-1", "gpt-load-2", "gpt-load-3"]
KEYS = ["sk-load-0", "sk-load-1", "sk-load-2"]
QUOTA, WINDOW = 10, 3
PACE = 0.002  # seconds between one client's requests, so the run spans several windows
IN_FLIGHT_GRACE = 0.5  # a key selected before the 429 was recorded may still arrive this late
TIME_LIMIT = 240.0


def one_request(url: str, model: str) -> tuple[int, str | None]:
    request = urllib.request.Request(
        url,
        data=json.dumps({"model": model, "messages": []}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers.get("Retry-After")


def dispatches_while_cooling(log: Path) -> tuple[int, int]:
    """(violations, in-flight races) from the upstream's own log of what it received."""
    by_pair: dict[tuple[str, str], list[dict[str, object]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        by_pair[(entry["key"], entry["model"])].append(entry)
    violations = in_flight = 0
    for entries in by_pair.values():
        entries.sort(key=lambda entry: entry["time"])  # type: ignore[arg-type, return-value]
        cooling: list[tuple[float, float]] = []  # (throttled at, until) per upstream 429
        for entry in entries:
            arrived = float(entry["time"])  # type: ignore[arg-type]
            for throttled_at, until in cooling:
                if throttled_at < arrived < until:
                    if arrived > throttled_at + IN_FLIGHT_GRACE:
                        violations += 1
                    else:
                        in_flight += 1
                    break
            if entry["status"] == 429:
                cooling.append((arrived, arrived + float(entry["retry_after"])))  # type: ignore[arg-type]
    return violations, in_flight


def test_bounded_load_never_dispatches_a_known_cooling_key(
    spawn: Callable[..., str], tmp_path: Path
) -> None:
    log = tmp_path / "upstream.log"
    upstream = spawn(
        "cooldown.demo.upstream", "--quota", str(QUOTA), "--window", str(WINDOW), "--log", str(log)
    )
    env = {"MODEL_COOLDOWN_ENABLED": "true", "COOLDOWN_DEMO_API_KEY": KEYS[0]}
    env.update({f"COOLDOWN_DEMO_API_KEY_{n}": key for n, key in enumerate(KEYS[1:], start=1)})
    gateway = spawn("cooldown.demo", "--upstream", upstream + "/v1", env=env)
    url = gateway + "/v1/chat/completions"
    deadline = time.monotonic() + TIME_LIMIT
    results: list[tuple[int, str | None]] = []
    results_lock = threading.Lock()

    def client(number: int) -> None:
        mine = []
        for index in range(REQUESTS_PER_CLIENT):
            if time.monotonic() > deadline:
                break
            mine.append(one_request(url, MODELS[(number + index) % len(MODELS)]))
            time.sleep(PACE)
        with results_lock:
            results.extend(mine)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started

    statuses = Counter(status for status, _ in results)
    throttled = [advice for status, advice in results if status == 429]
    violations, in_flight = dispatches_while_cooling(log)
    upstream_dispatches = len(log.read_text().splitlines())
    print(
        f"load: {len(results)} requests in {elapsed:.1f}s, statuses {dict(statuses)}, "
        f"upstream dispatches {upstream_dispatches}, in-flight races {in_flight}, "
        f"dispatches while known cooling {violations}"
    )
    assert len(results) == CLIENTS * REQUESTS_PER_CLIENT
    assert set(statuses) <= {200, 429}
    assert statuses[200] > 0
    assert throttled
    assert all(advice is not None and 1 <= int(advice) <= WINDOW for advice in throttled)
    assert upstream_dispatches < len(results)  # most 429s never reached the upstream
    assert violations == 0
