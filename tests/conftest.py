"""Fixtures shared by the suite: a clean environment and clean process-wide state per test."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, ClassVar

import pytest
from flask import Flask
from werkzeug.serving import make_server

from cooldown import (
    FORWARDED_ENV,
    CredentialPool,
    ModelCooldown,
    NanoGPTKeyPool,
    NanoGPTUnifiedKeyPool,
    config,
    model_cooldown,
)
from cooldown.evidence.learn import window_learner
from cooldown.pools.accounts import forget_app_accounts
from cooldown.pools.limits import forget_app_limits


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No MODEL_COOLDOWN_* from the caller's shell, and no state left by another test."""
    for name in FORWARDED_ENV:
        monkeypatch.delenv(name, raising=False)
    forget_everything()
    yield
    forget_everything()


def forget_everything() -> None:
    from cooldown.shared import share_when_configured

    config.forget_app_config()
    forget_app_accounts()
    forget_app_limits()
    share_when_configured(model_cooldown, config.CooldownSettings())  # detach, close Redis
    model_cooldown.reset()
    window_learner.reset()
    CredentialPool.reset()
    NanoGPTKeyPool.reset()
    NanoGPTUnifiedKeyPool.reset()


@pytest.fixture
def fresh_warnings() -> Iterator[None]:
    """Forget which settings already warned, so log-once can be observed again."""
    config._warned.clear()
    config._parse.cache_clear()
    config._last_read[0] = None
    yield
    config._warned.clear()
    config._parse.cache_clear()
    config._last_read[0] = None


@pytest.fixture
def enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")


@pytest.fixture
def store() -> ModelCooldown:
    return ModelCooldown()


@pytest.fixture
def serve_in_thread() -> Iterator[Callable[[Flask], str]]:
    """Serve a Flask app over loopback in this process; return its base URL."""
    servers = []

    def start(app: Flask) -> str:
        server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start `python -m <module> --port 0 ...` and return the URL it prints; stop it after."""
    started: list[subprocess.Popen[str]] = []
    logs: list[IO[str]] = []

    def start(module: str, *args: str, env: dict[str, str] | None = None) -> str:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_COOLDOWN")}
        environment.update(env or {})
        log = open(tmp_path / f"{module}-{len(started)}.stderr", "w")  # noqa: SIM115
        logs.append(log)
        process = subprocess.Popen(
            [sys.executable, "-m", module, "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=environment,
        )
        started.append(process)
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 20)
        line = process.stdout.readline() if ready else ""
        if not line.startswith("Serving on "):
            process.kill()
            raise RuntimeError(f"{module} did not start: {line!r}")
        return line.split()[-1]

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    for log in logs:
        log.close()


# -- real processes for shared state -----------------------------------------------------------

WORKER = Path(__file__).with_name("shared_worker.py")


class Worker:
    """A gateway worker process (tests/shared_worker.py): JSON commands in, answers out."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def __call__(self, op: str, **command: Any) -> Any:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **command}) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())


@pytest.fixture
def worker_processes() -> Iterator[Callable[..., list[Worker]]]:
    """Start `count` workers with `env` (added to a MODEL_COOLDOWN-free environment)."""
    started: list[subprocess.Popen[str]] = []

    def start(count: int, env: dict[str, str], *args: str) -> list[Worker]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_COOLDOWN")}
        environment.update(env)
        group = []
        for _ in range(count):
            process = subprocess.Popen(
                [sys.executable, str(WORKER), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=environment,
            )
            started.append(process)
            assert process.stdout is not None
            assert json.loads(process.stdout.readline()) == {"ready": True}
            group.append(Worker(process))
        return group

    yield start
    for process in started:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.close()
        process.wait(timeout=10)
        process.stdout.close()


def two_processes_share_one_probe(
    workers: list[Worker], provider: str, keys: tuple[str, str], model: str, now: float
) -> None:
    """Process A's probe (a real `dispatch`, its `send` blocked) holds the key for process B.

    Both keys cool at `now`, the first for 10 s, the second for 100 s.
    """
    first, second = workers
    scope = {"model": model}
    for key, seconds in zip(keys, (10, 100), strict=False):
        first(
            "record",
            provider=provider,
            key=key,
            status=429,
            scope=scope,
            retry_after=seconds,
            now=now,
        )

    def dispatch(worker: Worker, name: str, at: float) -> Any:
        return worker("hold_dispatch", name=name, provider=provider, scope=scope, now=at)["value"]

    def answer(worker: Worker, name: str) -> Any:
        return worker("answer_dispatch", name=name, status=200)["value"]

    assert dispatch(first, "probe", now + 11) == {"key": keys[0]}
    refused = dispatch(second, "herd", now + 11.5)
    assert refused == {"error": "ModelCooldownExhausted", "retry_after": 1}
    assert answer(first, "probe") == {"status": 200, "keys": [keys[0]]}
    assert dispatch(second, "next", now + 12) == {"key": keys[0]}
    assert answer(second, "next") == {"status": 200, "keys": [keys[0]]}


TEST_REDIS_URL = os.environ.get("MODEL_COOLDOWN_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
"""The Redis the suite may write to (under prefixes of its own, deleted afterwards)."""


@pytest.fixture(scope="session")
def redis_url() -> str:
    """`MODEL_COOLDOWN_TEST_REDIS_URL`, reachable; skipped (or failed, when required) if not."""
    import redis

    try:
        client = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=1)
        client.ping()
        client.close()
    except (redis.RedisError, OSError) as error:
        if os.environ.get("MODEL_COOLDOWN_REQUIRE_REDIS") == "1":
            pytest.fail(f"MODEL_COOLDOWN_REQUIRE_REDIS=1 but Redis is unreachable: {error}")
        pytest.skip(f"no Redis at MODEL_COOLDOWN_TEST_REDIS_URL ({type(error).__name__})")
    return TEST_REDIS_URL


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A Redis key prefix of this test's own; every key under it is deleted afterwards."""
    name = f"mc-test-{uuid.uuid4().hex[:12]}"
    yield name
    delete_prefix(redis_url, name)


SHARED_SECRET = "attempts-secret-" + "q" * 40
"""The one secret every store `process` attaches with: one fleet, one set of ids."""


@pytest.fixture
def process(redis_url: str, prefix: str) -> Iterator[Callable[[], ModelCooldown]]:
    """A new store attached to the test's Redis and prefix: one more gateway process."""
    from cooldown.shared.observations import RedisObservations  # needs the [redis] extra

    stores: list[ModelCooldown] = []

    def start() -> ModelCooldown:
        store = ModelCooldown()
        backend = RedisObservations(redis_url, prefix=prefix)
        store.attach_shared(backend, secret=SHARED_SECRET.encode())
        stores.append(store)
        return store

    yield start
    for store in stores:
        backend = store.detach_shared()
        assert isinstance(backend, RedisObservations)
        backend.close()


@pytest.fixture
def script_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the Redis scripts this process runs from now on, one per round trip."""
    from cooldown.shared.calls import ScriptCalls

    called: list[str] = []
    run = ScriptCalls._call

    def counted(self: ScriptCalls, now: float, script: str, *args: Any) -> Any:
        called.append(script)
        return run(self, now, script, *args)

    monkeypatch.setattr(ScriptCalls, "_call", counted)
    return called


def delete_prefix(redis_url: str, prefix: str) -> None:
    """Delete every key a test wrote under `{prefix}`."""
    import redis

    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{{{prefix}}}:*"):
        client.delete(key)
    client.close()


def require_program(name: str) -> None:
    """Skip without the program, unless CI requires Redis: then it is a failure."""
    if shutil.which(name) is None:
        if os.environ.get("MODEL_COOLDOWN_REQUIRE_REDIS") == "1":
            pytest.fail(f"MODEL_COOLDOWN_REQUIRE_REDIS=1 but {name} is not installed")
        pytest.skip(f"{name} is not installed (.ci/run installs it)")


def free_port(*, with_cluster_bus: bool = False) -> int:
    """A free loopback port; for a cluster node, its bus port (port + 10000) is free too."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if not with_cluster_bus:
            return port
        if port < 55000:
            with socket.socket() as bus:
                try:
                    bus.bind(("127.0.0.1", port + 10000))
                    return port
                except OSError:
                    continue


class RedisServer:
    """A redis-server this test started on a free loopback port; stopped by PID."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, unix_path: str | None) -> None:
        self.process = process
        self.port = port
        self.unix_path = unix_path

    @property
    def url(self) -> str:
        return f"unix://{self.unix_path}" if self.unix_path else f"redis://127.0.0.1:{self.port}/0"

    def cli(self, *args: str) -> str:
        target = ["-s", self.unix_path] if self.unix_path else ["-p", str(self.port)]
        return subprocess.run(
            ["redis-cli", *target, *args], capture_output=True, text=True, timeout=20, check=True
        ).stdout.strip()

    def freeze(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.thaw()
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture
def redis_servers(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start redis-server processes of this test's own (`*args` are extra server options)."""
    require_program("redis-server")
    require_program("redis-cli")
    servers: list[RedisServer] = []

    def start(
        *args: str, unix: bool = False, sentinel_of: RedisServer | None = None
    ) -> RedisServer:
        port = free_port(with_cluster_bus="--cluster-enabled" in args)
        folder = tmp_path / f"redis-{port}"
        folder.mkdir()
        unix_path = str(folder / "redis.sock") if unix else None
        if sentinel_of is not None:
            config = folder / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
                f"sentinel monitor cooldown-primary 127.0.0.1 {sentinel_of.port} 1\n"
            )
            command = ["redis-server", str(config), "--sentinel"]
        else:
            command = [
                "redis-server",
                "--port", "0" if unix else str(port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(folder),
                *(["--unixsocket", unix_path, "--unixsocketperm", "700"] if unix_path else []),
                *args,
            ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = RedisServer(process, port, unix_path)
        servers.append(server)
        deadline = time.monotonic() + 20
        while True:
            try:
                if server.cli("ping") == "PONG":
                    return server
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    yield start
    for server in servers:
        server.stop()


def fleet_environment(redis_url: str, prefix: str, token: str) -> dict[str, str]:
    """This process's environment without its MODEL_COOLDOWN_* settings, plus a fleet's:
    the feature on, the status token, and Redis sharing under the test's prefix."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_COOLDOWN")}
    environment.pop("PROMETHEUS_MULTIPROC_DIR", None)
    environment.update(
        MODEL_COOLDOWN_ENABLED="true",
        MODEL_COOLDOWN_STATUS_TOKEN=token,
        MODEL_COOLDOWN_REDIS_URL=redis_url,
        MODEL_COOLDOWN_REDIS_SECRET="fleet-secret-" + "f" * 32,
        MODEL_COOLDOWN_REDIS_PREFIX=prefix,
    )
    return environment


@contextlib.contextmanager
def gunicorn_app(
    directory: Path, module: str, environment: dict[str, str], *, workers: int
) -> Iterator[str]:
    """`gunicorn module:app` with `workers` sync workers on a free loopback port; its URL once
    it answers, and the server stopped by its PID afterwards."""
    port = free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "gunicorn", "-w", str(workers)),
            *("-b", f"127.0.0.1:{port}", "--chdir", str(directory), f"{module}:app"),
        ],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/cooldown/", timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "gunicorn did not start"
                assert process.poll() is None, "gunicorn exited"
                time.sleep(0.1)
        yield url
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def longest_loop_gap(work: Callable[[], Any]) -> tuple[float, Any]:
    """Run the coroutine `work()` on a new event loop beside a 5 ms ticker: the longest the
    loop went without running the ticker (a stall), and what `work` returned."""
    import asyncio

    async def main() -> tuple[float, Any]:
        longest, stop = 0.0, asyncio.Event()

        async def ticker() -> None:
            nonlocal longest
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                longest = max(longest, time.perf_counter() - last)
                last = time.perf_counter()

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        try:
            result = await work()
        finally:
            stop.set()
            await ticking
        return longest, result

    return asyncio.run(main())


class ServedWithoutHeaders:
    """A 200 with no headers, as an async `send` returns it."""

    status_code = 200
    headers: ClassVar[dict[str, str]] = {}
