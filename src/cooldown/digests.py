"""HMAC-SHA-256 ids for credentials and scopes: the only form names take inside this package."""

from __future__ import annotations

import hashlib

__all__ = [
    "PreparedHmac",
    "account_message",
    "credential_message",
    "credential_prefix",
    "frame",
    "label_message",
    "optional_str",
    "refill_message",
    "scope_message",
]

_HASH_BLOCK_SIZE = 64  # SHA-256 block size, as RFC 2104 pads the key to it


def frame(part: str) -> bytes:
    """Length-prefix one part, so ("ab", "c") and ("a", "bc") never hash alike."""
    data = part.encode("utf-8", "surrogatepass")
    return len(data).to_bytes(8, "big") + data


_CREDENTIAL_TAG = frame("credential")
_MODEL_TAG = frame("model")
_BUCKET_TAG = frame("quota_bucket")
_ACCOUNT_TAG = frame("account")
_LABEL_TAG = frame("label")
_REFILL_TAG = frame("refill")


class PreparedHmac:
    """HMAC-SHA-256 (RFC 2104) with the keyed inner and outer states computed once.

    Copying two prepared hashes costs well under half of `hmac.digest`, which re-keys on
    every call; digests are identical (tests compare them).
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > _HASH_BLOCK_SIZE:
            key = hashlib.sha256(key).digest()
        padded = key.ljust(_HASH_BLOCK_SIZE, b"\0")
        self._inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in padded))
        self._outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in padded))

    def __call__(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


_prefixes: dict[str, bytes] = {}
_MAX_PREFIXES = 256  # providers are a gateway's pool names: a few, and none of them secret


def credential_prefix(provider: object) -> bytes:
    """The framed `("credential", provider)` that starts each of a provider's credential
    messages; kept per provider, as every call of the hot path needs it."""
    if type(provider) is str:
        prefix = _prefixes.get(provider)
        if prefix is not None:
            return prefix
    elif not isinstance(provider, str):
        raise TypeError("provider must be a str")
    prefix = _CREDENTIAL_TAG + frame(provider)
    if type(provider) is str and len(_prefixes) < _MAX_PREFIXES:
        _prefixes[provider] = prefix
    return prefix


def credential_message(prefix: bytes, credential: str) -> bytes:
    """What a credential id is the HMAC of, locally and in shared state alike; `prefix` is
    the provider's `credential_prefix`."""
    return prefix + frame(credential)


def account_message(prefix: bytes, label: str) -> bytes:
    """What an account id is the HMAC of: the provider's `credential_prefix`, the label, and
    a tag no credential message ends with (a credential's frame ends the message)."""
    return prefix + frame(label) + _ACCOUNT_TAG


def label_message(prefix: bytes, credential: str) -> bytes:
    """What a key's operator label is the HMAC of: a message of its own (a tag no credential
    message ends with), so a label is never a prefix of a stored id."""
    return prefix + frame(credential) + _LABEL_TAG


def refill_message(prefix: bytes, scope: bytes | None) -> bytes:
    """What a provider's refill reading is kept under: for one scope, or (`None`) for the
    provider as a whole."""
    return prefix + _REFILL_TAG + (scope or b"")


def optional_str(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None")
    return value


def scope_message(model: object, quota_bucket: object) -> bytes | None:
    """Bucket wins over model; the two live under different tags so names never collide."""
    if quota_bucket is None and type(model) is str:  # the common call: a model, no bucket
        return _MODEL_TAG + frame(model) if model else None
    bucket = optional_str(quota_bucket, "quota_bucket")
    model_name = optional_str(model, "model")
    if bucket:
        return _BUCKET_TAG + frame(bucket)
    if model_name:
        return _MODEL_TAG + frame(model_name)
    return None
