"""The shared admission: one round trip that admits for every process at once, over the
candidates the local selection left free (in-flight counts, the probe after a release,
budgets and declared windows all in Redis)."""

from __future__ import annotations

from ..arguments import retry_after
from ..digests import credential_message, credential_prefix, scope_message
from ..errors import ModelCooldownCapacity
from .accounts import account_entries
from .admission import Attempt
from .backend import AdmissionTerms, SharedAttempt, Sharing
from .claims import Claim
from .declared import shared_windows
from .parts import StoreState
from .refusals import Holds, exhausted
from .scope import CallScope

__all__ = ["admit_shared"]


def admit_shared(
    state: StoreState, sharing: Sharing, claim: Claim, call: CallScope
) -> tuple[bool, tuple[str, Attempt] | None]:
    """One round trip: whether the backend answered, and what it admitted (the candidates
    are what the local selection left free, in `claim`)."""
    now, ceiling = claim.now, claim.ceiling
    message = scope_message(call.model, call.quota_bucket)
    assert message is not None  # the selection refuses a claim without one
    prefix, labels = credential_prefix(call.provider), call.accounts or {}
    scope_id = sharing.digest(message)
    keys = [key for key, _, _, _ in claim.candidates]
    owners = account_entries(sharing.digest, prefix, keys, labels, scope_id)
    ids = []
    for key in keys:
        credential = sharing.digest(credential_message(prefix, key))
        entry = credential + scope_id
        ids.append((credential.hex(), entry.hex(), owners.get(key, entry).hex()))
    windows = () if claim.limits is None else shared_windows(claim.limits, now, claim.cost)
    terms = AdmissionTerms(call.order == "spread", claim.cost, windows)
    answer = sharing.backend.start(ids, now, ceiling, now + claim.lease, terms)
    if answer is None:
        return False, None
    if answer.position is not None:
        admitted = claim.candidates[answer.position]
        _, entry_id, owner = ids[answer.position]
        shared = SharedAttempt(
            answer.lease,
            entry_id,
            owner,
            claim.cost,
            ceiling,
            now,
            learned=answer.learned,
            stamp=now,  # the request starts now
        )
        with state.lock:
            attempt = state.admission.start(
                admitted, now, claim.lease, (answer.probe, shared, answer.refilled), claim.cost
            )
            if claim.limits is not None:
                claim.counted(state.admission, attempt, claim.limits)
        return True, (admitted[0], attempt)
    if 0.0 in answer.holds and answer.overflow > now:  # a key is free, the table is full
        with state.lock:
            state.capacity_rejections_total += 1
        sharing.backend.add_to_fleet("capacity_rejections_total", now)
        raise ModelCooldownCapacity(retry_after(answer.overflow, now, ceiling))
    if claim.excluded_free:  # the free keys left were all tried: the last answer stands
        return True, None
    holds = claim.holds or Holds()
    holds.limited += answer.limited
    holds.other += len(answer.holds) - answer.limited
    reason, every_key_spent = holds.reason(state.quota)
    earliest = min(claim.earliest, *answer.holds)
    raise exhausted(earliest, now, ceiling, reason=reason, every_key_spent=every_key_spent)
