from __future__ import annotations

import pytest

from cooldown import APIError, CooldownError, ModelCooldownCapacity, ModelCooldownExhausted


def test_exhausted_is_a_429_with_its_code() -> None:
    error = ModelCooldownExhausted(12)
    assert isinstance(error, CooldownError)
    assert isinstance(error, APIError)
    assert (error.status_code, error.retry_after) == (429, 12)
    assert error.to_dict() == {
        "error": "model_cooldown",
        "message": "Every upstream key for this model is cooling down; retry after 12 seconds.",
        "retry_after": 12,
    }


def test_capacity_is_a_503_with_its_code() -> None:
    error = ModelCooldownCapacity(3)
    assert error.status_code == 503
    assert error.to_dict()["error"] == "model_cooldown_capacity"
    assert error.to_dict()["retry_after"] == 3


@pytest.mark.parametrize("raw", [0, -4])
def test_retry_after_never_below_one(raw: int) -> None:
    assert ModelCooldownExhausted(raw).retry_after == 1


@pytest.mark.parametrize("raw", [1.5, "3", True, None])
def test_retry_after_must_be_an_int(raw: object) -> None:
    with pytest.raises(TypeError):
        ModelCooldownExhausted(raw)  # type: ignore[arg-type]


def test_api_error_body_is_payload_plus_message() -> None:
    error = APIError("nope", 418, {"error": "teapot"})
    assert error.to_dict() == {"error": "teapot", "message": "nope"}
    assert APIError("x").status_code == 500
