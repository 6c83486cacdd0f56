"""Which budgets a key spends: its own, or its provider account's.

Keys of one account share one request and one token quota per model; the store keeps those
budgets under the account's entry (account digest + scope digest), never under a label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..digests import PreparedHmac, account_message

__all__ = ["account_entries", "checked_labels"]


def checked_labels(accounts: object) -> Mapping[str, str]:
    """`accounts`: key -> its account's label (keys in no account are left out)."""
    if not isinstance(accounts, Mapping):
        raise TypeError("accounts must map a key to its account's label")
    for label in accounts.values():
        if type(label) is not str or not label:
            raise TypeError("an account label must be a non-empty str")
    return accounts


def account_entries(
    digest: PreparedHmac,
    prefix: bytes,
    keys: Sequence[str],
    labels: Mapping[str, str],
    scope_digest: bytes,
) -> dict[str, bytes]:
    """Key -> its account's entry, for the keys in an account; each account digested once.
    `prefix` is the provider's credential prefix."""
    if not labels:
        return {}
    by_label: dict[str, bytes] = {}
    entries = {}
    for key in keys:
        label = labels.get(key)
        if label is not None:
            account = by_label.get(label)
            if account is None:
                account = by_label[label] = digest(account_message(prefix, label)) + scope_digest
            entries[key] = account
    return entries
