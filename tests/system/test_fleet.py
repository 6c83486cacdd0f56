"""The operator's view of a fleet: 4 gunicorn workers on a real Redis answer 429s,
and every worker's `/status` and `/metrics` report the same fleet totals."""

from __future__ import annotations

import json
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..conftest import fleet_environment, gunicorn_app

TOKEN = "fleet-token-" + "x" * 24
WORKERS = 4
APP = textwrap.dedent(
    """
    import time

    from flask import Flask
    from cooldown import CredentialPool, init_app, status_blueprint

    CredentialPool.register("fleet", keys=["sk-fleet-only"])
    app = Flask("fleet")
    init_app(app)
    app.register_blueprint(status_blueprint())


    @app.post("/cool")
    def cool() -> str:
        CredentialPool.record("fleet", "sk-fleet-only", 429, model="m", retry_after_seconds=600)
        return "cooled"


    @app.post("/ask")
    def ask() -> str:
        time.sleep(0.2)  # a busy sync worker: requests sent meanwhile reach the others
        return CredentialPool.select("fleet", model="m") or "none"  # every key cools: 429
    """
)


@pytest.fixture(params=[False, True], ids=["one-registry-per-worker", "prometheus-multiprocess"])
def fleet(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, prefix: str
) -> Iterator[str]:
    (tmp_path / "fleet_app.py").write_text(APP)
    environment = fleet_environment(redis_url, prefix, TOKEN)
    if request.param:
        (tmp_path / "metrics").mkdir()
        environment["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    with gunicorn_app(tmp_path, "fleet_app", environment, workers=WORKERS) as url:
        yield url


def get(url: str, path: str) -> bytes:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return bytes(answer.read())


def post(url: str, path: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url + path, method="POST"), timeout=10):
            return 200
    except urllib.error.HTTPError as error:
        error.close()
        return error.code


def in_parallel(calls: int, call: Callable[[], object]) -> list[object]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda _: call(), range(calls)))


def fleet_metric(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("model_cooldown_fleet_exhausted_total "):
            return float(line.split()[-1])
    return None


def test_every_worker_reports_the_same_fleet_totals(fleet: str) -> None:
    assert post(fleet, "/cool") == 200
    answered = in_parallel(40, lambda: post(fleet, "/ask"))
    assert answered == [429] * 40
    per_worker: dict[int, dict[str, int]] = {}
    deadline = time.monotonic() + 30
    while len(per_worker) < WORKERS or any(c["all_cooling"] != 1 for c in per_worker.values()):
        # concurrent reads reach every sync worker; a worker's shared ids may be a second old
        assert time.monotonic() < deadline, per_worker
        for body in in_parallel(16, lambda: get(fleet, "/cooldown/status")):
            summary = json.loads(body)  # type: ignore[arg-type]
            per_worker[summary["worker_pid"]] = {
                "own": summary["exhausted_total"],
                "fleet": summary["fleet"]["exhausted_total"],
                "all_cooling": summary["providers"]["fleet"]["all_cooling_scopes"],
            }
    assert {counts["fleet"] for counts in per_worker.values()} == {40}
    assert sum(counts["own"] for counts in per_worker.values()) == 40  # each its own share
    assert sum(1 for counts in per_worker.values() if counts["own"]) >= 2  # several answered
    deadline = time.monotonic() + 15  # multiprocess mode publishes once a second
    while True:
        scraped = [
            fleet_metric(body.decode())
            for body in in_parallel(16, lambda: get(fleet, "/cooldown/metrics"))
        ]  # type: ignore[union-attr]
        if set(scraped) == {40.0}:
            break
        assert time.monotonic() < deadline, scraped
        time.sleep(0.2)
