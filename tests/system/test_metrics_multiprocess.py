"""`/metrics` under real gunicorn workers in prometheus_client's multiprocess mode."""

from __future__ import annotations

import os
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..conftest import gunicorn_app

TOKEN = "multiprocess-token-" + "x" * 20
APP = textwrap.dedent(
    """
    import os
    import time
    from flask import Flask, request
    from cooldown import CredentialPool, init_app, status_blueprint

    CredentialPool.register("mp", "MP_KEY")
    app = Flask("mp")
    init_app(app)
    app.register_blueprint(status_blueprint())


    @app.post("/bump/<int:number>")
    def bump(number: int) -> str:
        CredentialPool.record("mp", "sk-mp", 429, model=f"model-{number}")
        if request.args.get("hold"):
            time.sleep(0.5)  # keeps this sync worker busy: the next connection goes to the other
        return str(os.getpid())
    """
)


@pytest.fixture
def gunicorn(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "mp_app.py").write_text(APP)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_COOLDOWN")}
    environment.update(
        MODEL_COOLDOWN_ENABLED="true",
        MODEL_COOLDOWN_STATUS_TOKEN=TOKEN,
        MP_KEY="sk-mp",
        PROMETHEUS_MULTIPROC_DIR=str(metrics),
    )
    with gunicorn_app(tmp_path, "mp_app", environment, workers=2) as url:
        yield url


def scrape(url: str) -> str:
    request = urllib.request.Request(
        url + "/cooldown/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.read().decode())


def recorded(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("model_cooldown_recorded_total "):
            return float(line.split()[-1])
    return 0.0


def bump(url: str, number: int, *, hold: bool = False) -> str:
    """Record one throttle in whichever worker takes the connection; that worker's pid."""
    query = "?hold=1" if hold else ""
    request = urllib.request.Request(f"{url}/bump/{number}{query}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.read().decode())


def test_a_counter_incremented_in_both_workers_is_summed_in_one_scrape(gunicorn: str) -> None:
    # Requests one at a time may all reach the same worker (the kernel need not spread them):
    # one held request keeps a sync worker busy, so the request sent meanwhile reaches the other.
    per_worker: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=1) as background:
        for number in range(0, 60, 2):
            held = background.submit(bump, gunicorn, number, hold=True)
            time.sleep(0.1)  # the held request has reached a worker
            for pid in (bump(gunicorn, number + 1), held.result(timeout=10)):
                per_worker[pid] = per_worker.get(pid, 0) + 1
            if len(per_worker) == 2:
                break
    assert len(per_worker) == 2, "every request reached one worker"
    total = sum(per_worker.values())
    deadline = time.monotonic() + 15  # each worker publishes once a second; none on a scrape
    while recorded(text := scrape(gunicorn)) != total:
        assert time.monotonic() < deadline, (recorded(text), per_worker)
        time.sleep(0.2)
    samples = [line for line in text.splitlines() if line.startswith("model_cooldown_recorded")]
    assert samples == [f"model_cooldown_recorded_total {float(total)}"]  # one sum, not per pid
    assert 'model_cooldown_keys{provider="mp",state="cooling_some_models"} 1.0' in text
