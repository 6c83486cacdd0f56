"""Prometheus exposition of the counters and gauges, for one process or every gunicorn worker.

With `PROMETHEUS_MULTIPROC_DIR` set (prometheus_client's multiprocess mode), every process
publishes its values to that directory once a second, and a scrape of any worker answers for
all of them: counters summed, gauges of shared state (key states) taken once as the maximum,
per-process gauges (entries held, capacity) summed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any

from flask import Response

from ..forksafe import new_lock
from ..store.backend import FLEET_COUNTERS
from .summary import Pools, app_pools, overview

__all__ = ["MULTIPROCESS_ENV", "PUBLISH_SECONDS", "metrics_response", "publish_when_multiprocess"]

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
PUBLISH_SECONDS = 1.0
METRICS_MISSING = (
    "Prometheus metrics need the prometheus_client package: pip install 'model-cooldown[metrics]'\n"
)
SUMMED_GAUGES = ("live_observations", "capacity")  # each process holds its own
SHARED_GAUGES = ("overflow_active", "shared", "shared_degraded", "shared_split")  # the worst
KEY_STATES = ("ready", "cooling", "drained", "cooling_some_models")
KEYS_METRIC = ("model_cooldown_keys", "configured keys by provider and state")
FLEET_METRIC = "model_cooldown_fleet_{}"
ALL_COOLING_METRIC = (
    "model_cooldown_all_cooling_scopes",
    "models or buckets in which every key of the provider cools: clients get 429 there",
)
WAITED_METRIC = (
    "model_cooldown_wait_seconds",
    "seconds a dispatch waited for a key, served or timed out",
)
SCOPED_METRIC = (
    "model_cooldown_scoped_cooldowns",
    "live per-model (or bucket) cooldowns over the provider's keys",
)


def _named(name: str) -> tuple[str, str]:
    """A counter or gauge of `stats()` as a metric: its name and its help text."""
    return f"model_cooldown_{name.removesuffix('_total')}", name.replace("_", " ")


def _families(summary: dict[str, Any]) -> list[Any]:
    """The metric families of one summary, as prometheus_client objects."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families: list[Any] = [
        GaugeMetricFamily(*_named(name), value=summary[name])
        for name in (*SUMMED_GAUGES, *SHARED_GAUGES)
    ]
    families += [
        CounterMetricFamily(*_named(name), value=value)
        for name, value in summary.items()
        if name.endswith("_total")
    ]
    families += [
        CounterMetricFamily(*_fleet_named(name), value=value)
        for name, value in (summary["fleet"] or {}).items()
    ]
    keys = GaugeMetricFamily(*KEYS_METRIC, labels=["provider", "state"])
    scoped = GaugeMetricFamily(*SCOPED_METRIC, labels=["provider"])
    all_cooling = GaugeMetricFamily(*ALL_COOLING_METRIC, labels=["provider"])
    for provider, counts in summary["providers"].items():
        for state in KEY_STATES:
            keys.add_metric([provider, state], counts.get(state, 0))
        scoped.add_metric([provider], counts["scoped_cooldowns"])
        all_cooling.add_metric([provider], counts["all_cooling_scopes"])
    return [*families, keys, scoped, all_cooling]


def _fleet_named(name: str) -> tuple[str, str]:
    """A fleet counter (`exhausted_total`): every process's increments, added up in Redis."""
    return FLEET_METRIC.format(name.removesuffix("_total")), f"fleet-wide {name.replace('_', ' ')}"


class _Publisher:
    """This process's values as multiprocess metrics (files named by its pid)."""

    def __init__(self, pools: Pools) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.pools = pools
        registry = CollectorRegistry()  # written to files, collected by MultiProcessCollector
        self._gauges = {
            name: Gauge(
                *_named(name),
                registry=registry,
                multiprocess_mode="livesum" if name in SUMMED_GAUGES else "livemax",
            )
            for name in (*SUMMED_GAUGES, *SHARED_GAUGES)
        }
        self._counters: dict[str, Any] = {}
        self._published: dict[str, float] = {}
        self._registry = registry
        self._counter_class = Counter
        self._keys = Gauge(
            *KEYS_METRIC,
            ["provider", "state"],
            registry=registry,
            multiprocess_mode="livemax",
        )
        self._scoped = Gauge(
            *SCOPED_METRIC,
            ["provider"],
            registry=registry,
            multiprocess_mode="livemax",
        )
        self._all_cooling = Gauge(
            *ALL_COOLING_METRIC,
            ["provider"],
            registry=registry,
            multiprocess_mode="livemax",
        )
        # The fleet's counters are read from Redis by every worker: taken once (the
        # largest, the freshest read), never summed over workers.
        self._fleet = {
            name: Gauge(
                _fleet_named(name)[0] + "_total",
                _fleet_named(name)[1],
                registry=registry,
                multiprocess_mode="livemax",
            )
            for name in FLEET_COUNTERS
        }
        self.lock = new_lock(self)

    def publish(self, summary: dict[str, Any]) -> None:
        with self.lock:
            for name, gauge in self._gauges.items():
                gauge.set(float(summary[name]))
            for name, value in summary.items():
                if name.endswith("_total"):
                    self._count(name, float(value))
            for provider, counts in summary["providers"].items():
                for state in KEY_STATES:
                    self._keys.labels(provider, state).set(counts.get(state, 0))
                self._scoped.labels(provider).set(counts["scoped_cooldowns"])
                self._all_cooling.labels(provider).set(counts["all_cooling_scopes"])
            for name, value in (summary["fleet"] or {}).items():
                self._fleet[name].set(value)

    def _count(self, name: str, value: float) -> None:
        """Counters only grow: publish what was added since last time (a reset adds nothing)."""
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = self._counter_class(
                *_named(name), registry=self._registry
            )
        added = value - self._published.get(name, 0.0)
        if added > 0:
            counter.inc(added)
        self._published[name] = value


_publisher: _Publisher | None = None
_publishing_pid = 0
_start_lock = new_lock(sys.modules[__name__], "_start_lock")


def _multiprocess() -> bool:
    if not os.environ.get(MULTIPROCESS_ENV):
        return False
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


def publish_when_multiprocess(pools: Pools | None = None) -> _Publisher | None:
    """Start this process's publisher thread once (again in a forked worker), publishing
    `pools` (default: the current app's); `None` when multiprocess mode is off."""
    global _publisher, _publishing_pid
    if not _multiprocess():
        return None
    with _start_lock:
        if _publishing_pid != os.getpid():
            _publisher = _Publisher(app_pools() if pools is None else pools)
            _publishing_pid = os.getpid()
            threading.Thread(target=_publish_forever, args=(_publisher,), daemon=True).start()
        return _publisher


def _restart_in_child() -> None:
    """A worker forked from a publishing parent (gunicorn --preload) publishes its own values."""
    if _publishing_pid and _publisher is not None:
        publish_when_multiprocess(_publisher.pools)


os.register_at_fork(after_in_child=_restart_in_child)


def _publish_forever(publisher: _Publisher) -> None:
    pid = os.getpid()
    while pid == _publishing_pid:
        with contextlib.suppress(Exception):  # a metrics thread never takes a worker down
            publisher.publish(overview(publisher.pools))
        time.sleep(PUBLISH_SECONDS)


def metrics_response(pools: Pools) -> Response:
    """`GET <prefix>/metrics`: one process's values, or every worker's in multiprocess mode."""
    try:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.exposition import CONTENT_TYPE_LATEST
    except ImportError:
        return Response(METRICS_MISSING, status=501, mimetype="text/plain")
    registry = CollectorRegistry()
    if publish_when_multiprocess(pools) is not None:
        from prometheus_client import multiprocess

        # Every worker's values, this one's included, as published in the last second.
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Collector(overview(pools), pools.store.waiters.histogram()))
    # content_type, not mimetype: CONTENT_TYPE_LATEST already names its charset, once
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class _Collector:
    def __init__(
        self, summary: dict[str, Any], waited: tuple[list[tuple[str, int]], float]
    ) -> None:
        self._summary, self._waited = summary, waited

    def collect(self) -> list[Any]:
        from prometheus_client.core import HistogramMetricFamily

        buckets, total = self._waited
        waits = HistogramMetricFamily(*WAITED_METRIC, buckets=buckets, sum_value=total)
        return [*_families(self._summary), waits]
