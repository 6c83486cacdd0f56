"""Keys that share one provider account, and so one quota.

OpenAI's limits belong to an organization or project: a throttle on one key of an account is
a throttle on its siblings too, and sending the next attempt to a sibling only meets another
429. Accounts group keys by their 1-based configured position, from
`CredentialPool.register(..., accounts=...)` or `MODEL_COOLDOWN_ACCOUNTS` (JSON
`{"<provider>": {"<account label>": [<positions>]}}`); a key's status label (`"k-..."`) may
stand in place of its position. A key in no account is its own. Account labels are an
operator's names, not secrets: the status shows them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from ..config import ACCOUNTS_ENV, warn_once
from .provider_settings import ProviderSetting

__all__ = [
    "AccountMap",
    "accounts_from_environment",
    "apply_app_accounts",
    "checked_accounts",
    "forget_app_accounts",
    "labels_by_key",
]

AccountMap = Mapping[int | str, str]
"""1-based key position, or a key's status label (`"k-..."`) -> its account's label."""
KEY_LABEL = re.compile(r"k-[0-9a-f]{8}")


def labels_by_key(
    keys: Sequence[str],
    grouped: AccountMap,
    positions: Mapping[str, int],
    provider: str,
    key_label: Callable[[str], str],
) -> dict[str, str]:
    """Key -> its account's label, for the keys that are in one. A key's position is the
    place it was first seen at in the list as configured (`positions`), so a placeholder or
    a duplicate dropped before it, or a key that left, moves no other key into another
    account. A key's status label (`key_label`) names it in place of its position. A
    position that names no key is warned about once per provider."""
    if not grouped:
        return {}
    numbered = [position for position in grouped if isinstance(position, int)]
    if max(numbered, default=0) > max(positions.values(), default=0):
        warn_once(provider, "provider %s: an account names a key position that holds no key")
    labelled = len(numbered) < len(grouped)
    found: dict[str, str] = {}
    for key in keys:
        account = grouped.get(positions.get(key, 0))
        if account is None and labelled:
            account = grouped.get(key_label(key))
        if account is not None:
            found[key] = account
    return found


def checked_accounts(provider: str, accounts: object) -> dict[int | str, str]:
    """`{label: [positions or key labels]}` as position (or key label) -> label; a clear
    error for anything else."""
    if not isinstance(accounts, Mapping):
        raise TypeError(f"accounts for provider {provider!r} must map a label to key positions")
    by_position: dict[int | str, str] = {}
    for label, positions in accounts.items():
        if not isinstance(label, str) or not label:
            raise TypeError("an account label must be a non-empty str")
        if isinstance(positions, (str, bytes)) or not isinstance(positions, (list, tuple)):
            raise TypeError("an account's key positions must be a list of ints")
        for position in positions:
            if isinstance(position, str):
                if not KEY_LABEL.fullmatch(position):
                    raise ValueError('a key is named by its status label, "k-" and 8 hex digits')
            elif isinstance(position, bool) or not isinstance(position, int):
                raise TypeError("an account's key positions must be ints (1 is the first key)")
            elif position < 1:
                raise ValueError("key positions start at 1")
            if by_position.setdefault(position, label) != label:
                raise ValueError("a key position belongs to one account at most")
    return by_position


_setting = ProviderSetting(
    ACCOUNTS_ENV, checked_accounts, "%s is malformed; keys are grouped in no account"
)

apply_app_accounts = _setting.apply_app
forget_app_accounts = _setting.forget_app


def accounts_from_environment(provider: str) -> AccountMap:
    """This provider's accounts in `MODEL_COOLDOWN_ACCOUNTS` (`app.config` over the
    environment); malformed: none, with one warning."""
    return _setting.get(provider) or {}
