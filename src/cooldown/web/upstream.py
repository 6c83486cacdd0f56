"""The exceptions that carry an upstream's error answer, for `init_app(upstream_errors=True)`."""

from __future__ import annotations

import importlib

__all__ = ["UPSTREAM_ERRORS", "upstream_error_classes"]

UPSTREAM_ERRORS = (
    ("openai", "APIStatusError"),
    ("anthropic", "APIStatusError"),
    ("httpx", "HTTPStatusError"),
    ("requests", "HTTPError"),
)
"""(module, class): the SDKs' status errors and `raise_for_status()`'s, where installed."""


def upstream_error_classes() -> list[type[Exception]]:
    """Those of the classes whose library is installed (none of them is a dependency)."""
    found = []
    for module_name, class_name in UPSTREAM_ERRORS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        error_class = getattr(module, class_name, None)
        if isinstance(error_class, type) and issubclass(error_class, Exception):
            found.append(error_class)
    return found
