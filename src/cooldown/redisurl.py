"""MODEL_COOLDOWN_REDIS_URL, parsed (one server, a Cluster or a Sentinel-managed primary), and
the masked text that holds it and the Redis secret.

The schemes are the ones the `limits` package (behind Flask-Limiter) reads, so operators can
reuse the URLs they have. Parsing needs no Redis client, so settings can validate a URL
before anything connects; a URL this package cannot honour exactly is refused, never bent.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["RedisEndpoint", "Secret", "parse_redis_url"]


class Secret(str):
    """A setting that must not leave the process by accident (the Redis secret, a URL that
    may hold a password): masked in `repr`, refused by pickle and by `copy.deepcopy` (so
    `dataclasses.asdict(settings())` raises instead of copying it out in clear)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'***'"

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a secret setting is neither pickled nor copied")

    def __deepcopy__(self, memo: Any) -> Secret:
        raise TypeError("a secret setting is neither pickled nor copied")


Mode = Literal["single", "cluster", "sentinel"]

_SCHEMES: dict[str, tuple[Mode, bool]] = {  # scheme -> (mode, TLS)
    "redis": ("single", False),
    "rediss": ("single", True),
    "unix": ("single", False),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
}
_TIMEOUT_OPTIONS = frozenset({"socket_timeout", "socket_connect_timeout"})
_TEXT_OPTIONS = frozenset(
    {"client_name", "ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile"}
)


@dataclass(frozen=True)
class RedisEndpoint:
    """Where Redis is and how to talk to it; `options` never loosen the timeout."""

    mode: Mode
    tls: bool
    hosts: tuple[tuple[str, int], ...] = ()
    unix_path: str | None = None
    db: int = 0
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    service_name: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    timeouts: tuple[tuple[str, float], ...] = ()  # seconds asked for in the URL


def _hosts(netloc: str, default_port: int) -> tuple[tuple[str, int], ...]:
    """`host:port[,host:port...]` after any credentials; raises ValueError when malformed."""
    hosts = []
    for part in netloc.rpartition("@")[2].split(","):
        host, colon, port = part.strip().rpartition(":")
        if not colon:
            host, port = port, str(default_port)
        host = host.strip("[]")
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise ValueError("malformed host")
        hosts.append((host, int(port)))
    return tuple(hosts)


def _credentials(netloc: str) -> tuple[str | None, str | None]:
    userinfo, at, _ = netloc.rpartition("@")
    if not at:
        return None, None
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None, unquote(password) if colon else None)


def parse_redis_url(url: str) -> RedisEndpoint:
    """The endpoint a URL names; `ValueError` for anything this package would not honour."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise ValueError("unsupported scheme")
    mode, tls = _SCHEMES[scheme]
    options, timeouts, db = [], [], 0
    for name, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if name == "db" and value.isascii() and value.isdigit() and len(value) < 6:
            db = int(value)
        elif name in _TIMEOUT_OPTIONS:
            seconds = float(value)  # ValueError when it is not a number
            if not seconds > 0:
                raise ValueError("timeouts must be positive")
            timeouts.append((name, seconds))
        elif name in _TEXT_OPTIONS:
            options.append((name, value))
        else:
            raise ValueError("an option the client cannot use as given")
    username, password = _credentials(parts.netloc)
    endpoint = functools.partial(
        RedisEndpoint,
        mode,
        tls,
        username=username,
        password=password,
        options=tuple(options),
        timeouts=tuple(timeouts),
    )
    path = unquote(parts.path)
    if scheme == "unix":
        if not path.startswith("/"):
            raise ValueError("a unix URL needs an absolute socket path")
        return endpoint(unix_path=path, db=db)
    hosts = _hosts(parts.netloc, 26379 if mode == "sentinel" else 6379)
    service_name = None
    segments = [segment for segment in path.split("/") if segment]
    if mode == "sentinel":
        if not segments or len(segments) > 2:
            raise ValueError("a sentinel URL names the service: /service_name[/db]")
        service_name = segments[0]
        if len(segments) == 2:
            db = _db(segments[1])
    elif segments:
        if len(segments) > 1 or mode == "cluster":
            raise ValueError("unexpected path")
        db = _db(segments[0])
    if mode == "single" and len(hosts) != 1:
        raise ValueError("one host for a single server")
    return endpoint(hosts=hosts, db=db, service_name=service_name)


def _db(text: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) < 6):
        raise ValueError("malformed database number")
    return int(text)
