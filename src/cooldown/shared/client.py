"""A redis-py client for a parsed endpoint: one server, a Cluster or a Sentinel's primary,
with one attempt per command and the configured timeouts (the URL may only tighten them)."""

from __future__ import annotations

from typing import Any

from ..redisurl import RedisEndpoint

__all__ = ["connect"]


def connect(endpoint: RedisEndpoint, timeout: float) -> Any:
    """A client for the endpoint; the URL's own timeouts may only tighten ours."""
    from redis import Redis
    from redis.backoff import NoBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    timeouts: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    for name, seconds in endpoint.timeouts:
        timeouts[name] = min(timeouts[name], seconds)
    common: dict[str, Any] = {
        **timeouts,
        **dict(endpoint.options),
        "username": endpoint.username,
        "password": endpoint.password,
    }
    if endpoint.tls:
        common["ssl"] = True
    once: dict[str, Any] = {"retry": Retry(NoBackoff(), 0)}  # one attempt, one timeout
    # redis 5 leaves the calls below untyped and redis 8 types them: each ignore holds for both.
    if endpoint.mode == "cluster":
        nodes = [ClusterNode(host, port) for host, port in endpoint.hosts]  # type: ignore[no-untyped-call, unused-ignore]
        return RedisCluster(startup_nodes=nodes, **once, **common)
    single = {**common, **once, "db": endpoint.db, "health_check_interval": 0}
    if endpoint.mode == "sentinel":
        # The Sentinel's own connections get the same single attempt and timeouts as the rest.
        sentinel_options = {**timeouts, **once, "health_check_interval": 0}
        sentinel = Sentinel(list(endpoint.hosts), sentinel_kwargs=sentinel_options, **timeouts)  # type: ignore[no-untyped-call, unused-ignore]
        return sentinel.master_for(endpoint.service_name or "", **single)  # type: ignore[no-untyped-call, unused-ignore]
    if endpoint.unix_path is not None:
        return Redis(unix_socket_path=endpoint.unix_path, **single)
    host, port = endpoint.hosts[0]
    client = Redis(host=host, port=port, **single)
    cluster: Any = client.info("cluster")  # redis 5 types it as maybe awaitable, redis 8 not
    if cluster.get("cluster_enabled"):  # a plain URL naming a cluster node
        client.close()
        return RedisCluster(host=host, port=port, **once, **common)
    return client
