"""NanoGPT's pools: keys validated by a probe, rotated as the legacy pools did, beside the
core (`CredentialPool`) and built on the same store."""

from __future__ import annotations

from .pools import (
    NanoGPTKeyPool,
    NanoGPTKeyPoolExhausted,
    NanoGPTUnifiedKeyPool,
    configured_nanogpt_keys,
    is_nanogpt_credential_rejection,
)

__all__ = [
    "NanoGPTKeyPool",
    "NanoGPTKeyPoolExhausted",
    "NanoGPTUnifiedKeyPool",
    "configured_nanogpt_keys",
    "is_nanogpt_credential_rejection",
]
