"""Case-insensitive reads of HTTP headers, in whatever shape a client library hands them over."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

__all__ = ["Headers", "header_value", "lowered_headers"]

Headers: TypeAlias = Mapping[str, Any] | Iterable[tuple[str, Any]]
"""A mapping (dict, werkzeug, requests, httpx, urllib3, `http.client` message) or pairs."""


def _items(headers: Headers) -> Iterable[object]:
    if isinstance(headers, (str, bytes)):
        return ()
    if isinstance(headers, Mapping):
        return headers.items()
    items = getattr(headers, "items", None)  # http.client's HTTPMessage is no Mapping
    return items() if callable(items) else headers


def lowered_headers(headers: Headers | None) -> dict[str, object]:
    """Every header by its lower-cased name; the first of repeated names wins."""
    if headers is None:
        return {}
    items: list[Any] = list(_items(headers))
    try:  # the common case: string names; reversed, so the first of a repeated name wins
        return {name.lower(): value for name, value in reversed(items)}
    except (AttributeError, TypeError, ValueError):  # odd pairs: keep only well-formed ones
        lowered: dict[str, object] = {}
        for item in items:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                lowered.setdefault(item[0].lower(), item[1])
        return lowered


def header_value(headers: Headers, name: str) -> object:
    """The first value of the header `name`, matched case-insensitively, or `None`."""
    return lowered_headers(headers).get(name.lower())
