"""Parity with the pools this package replaces, and the exact bounds of SPEC §18."""

from __future__ import annotations

from cooldown import CredentialPool

P = "ce-gpt-plus"


def test_the_legacy_bound_holds_against_the_live_rests_at_each_write() -> None:
    for index in range(30_000):
        CredentialPool.record(P, f"sk-{index}", 401, now=0.0)
    assert len(CredentialPool._legacy) == 30_000  # all live: nothing may be forgotten
    largest_after = 0
    for index in range(50):
        CredentialPool.record(P, f"sk-late-{index}", 401, now=10_000.0)
        largest_after = max(largest_after, len(CredentialPool._legacy))
    assert largest_after <= 1024
    assert len(CredentialPool._legacy) == 50


def test_the_first_write_after_the_rests_expire_drops_them() -> None:
    for index in range(30_000):
        CredentialPool.record(P, f"sk-{index}", 429, now=0.0)
    CredentialPool.record(P, "sk-late", 429, now=10_000.0)
    assert len(CredentialPool._legacy) == 1


def test_a_rest_read_at_an_earlier_now_still_rests() -> None:
    """Callers' clocks may disagree by a little: a rest from now=160 holds at now=101."""
    CredentialPool.record(P, "sk-early", 429, now=160.0)
    assert CredentialPool.available(P, ["sk-early", "sk-free"], now=101.0) == ["sk-free"]
    CredentialPool.record(P, "sk-other", 401, now=101.0)
    assert CredentialPool.available(P, ["sk-early"], now=101.0) == []


def test_replaced_rests_leave_the_heap_bounded() -> None:
    for round_number in range(200):
        for index in range(20):
            CredentialPool.record(P, f"sk-{index}", 429, now=float(round_number))
    assert len(CredentialPool._legacy) == 20
    assert len(CredentialPool._legacy._expiry) <= 2 * 20 + 64
