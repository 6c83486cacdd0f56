"""The public surface: what `cooldown` exports, in which groups, and its version."""

from __future__ import annotations

import importlib.metadata

import cooldown
import cooldown.evidence

GATEWAY_PATH = [
    "CredentialPool",
    "KeyedClients",
    "init_app",
    "relay",
    "arelay",
    "status_blueprint",
    "upstream_model",
]
EVIDENCE = {
    "QUOTA_SPENT",
    "QuotaSpent",
    "RecordingContext",
    "SelectionScope",
    "UpstreamOutcome",
    "classify_upstream_outcome",
    "google_quota_spent",
    "google_retry_delay",
    "rate_limit_advice",
    "recording_context",
    "retry_after_seconds",
    "selection_scope",
    "upstream_model",
}


def test_the_gateway_path_comes_first() -> None:
    assert cooldown.__all__[: len(GATEWAY_PATH)] == GATEWAY_PATH


def test_every_export_exists_once() -> None:
    assert len(cooldown.__all__) == len(set(cooldown.__all__)) == 37
    for name in cooldown.__all__:
        assert getattr(cooldown, name) is not None, name


def test_evidence_helpers_are_the_same_objects_from_both_places() -> None:
    assert set(cooldown.evidence.__all__) == EVIDENCE
    for name in EVIDENCE:
        assert getattr(cooldown.evidence, name) is getattr(cooldown, name)


def test_the_version_is_the_installed_distributions() -> None:
    assert cooldown.__version__ == importlib.metadata.version("model-cooldown")


def test_every_error_a_route_may_meet_is_exported_with_its_family() -> None:
    assert issubclass(cooldown.ModelCooldownExhausted, cooldown.CooldownError)
    assert issubclass(cooldown.ModelCooldownCapacity, cooldown.CooldownError)
    assert issubclass(cooldown.CooldownError, cooldown.APIError)
    assert issubclass(cooldown.NanoGPTKeyPoolExhausted, RuntimeError)  # the legacy pools' error
