"""What the store asks of a shared backend, and how it reads one lookup's answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, NamedTuple, Protocol

from ..arguments import require_str
from ..digests import PreparedHmac, credential_message
from ..evidence.learn import LearnedWindow

__all__ = [
    "FLEET_COUNTERS",
    "Announced",
    "OperatorMarks",
    "SharedAttempt",
    "SharedObservations",
    "SharedStart",
    "Sharing",
    "shared_releases",
]

FLEET_COUNTERS = ("exhausted_total", "capacity_rejections_total", "escalated_total", "probes_total")
"""The counters every process also adds to the shared state, for the fleet's totals."""


class SharedStart(NamedTuple):
    """A shared admission's answer; times are monotonic, 0.0 for none."""

    position: int | None  # the candidate admitted, or `None`
    probe: bool
    overflow: float
    holds: list[float]  # per candidate: until when it is held (0.0: free), when none was admitted
    lease: str  # the attempt's lease in the shared state, to end it with
    learned: LearnedWindow | None = None  # the fleet's estimate for the admitted key's scope
    refilled: Refilled | None = None  # the counter only its refill had room in, fleet-wide
    limited: int = 0  # when none was admitted: the candidates a declared window held


class SharedWindow(NamedTuple):
    """One declared window as the shared admission counts it: `need` is what one more
    request needs left, `amount` what it counts; it rolls in slots of `width` seconds, or
    (`ends` given, monotonic) is a calendar day that ends then."""

    id: str
    limit: int
    need: int
    amount: int
    width: float
    ends: float | None


class Reading(NamedTuple):
    """A usage reading as workers share it: credit left and its limit (`None`: not known),
    when it resets and when it was read (monotonic; `None`: no reset said)."""

    remaining: float | None
    limit: float | None
    resets_at: float | None
    read_at: float


class AdmissionTerms(NamedTuple):
    """How a shared admission chooses and what it counts: spread order or configured, the
    request's cost in tokens (`None`: unknown), the windows declared for its provider."""

    spread: bool
    cost: int | None = None
    windows: Sequence[SharedWindow] = ()


Refilled = Literal["requests", "tokens"]
"""A counter an attempt was admitted by only because it refills continuously: its owner's
last answer showed it at 0 or short, and only the refill since gave it room."""

Announced = tuple[int, float, int | None]
"""A budget as an answer announced it: remaining, reset (monotonic), the limit if given."""


@dataclass
class SharedAttempt:
    """An attempt admitted through the shared state, and what its end will write there: its
    answer's cooldown or clearing, its siblings' cooldowns and its budgets ride on the same
    round trip as its release."""

    lease: str
    entry: str  # shared hex id: credential + scope
    owner: str  # the budgets' shared id: the entry, or its account's
    cost: int | None  # tokens held in flight
    max_seconds: int
    now: float  # the latest time this attempt's bookkeeping saw
    write: tuple[Literal["record", "clear"], str, float] | None = None  # id, deadline or sent_at
    budget: Announced | None = None  # requests
    learned: LearnedWindow | None = None  # the estimate after its answer, for the fleet
    tokens: Announced | None = None
    stamp: float | None = None  # when its request started (its budgets are as of then)
    siblings: list[tuple[str, float]] = field(default_factory=list)  # (id, deadline)

    @property
    def member(self) -> str:
        """The attempt's lease in the shared state, naming what it holds in flight."""
        member = f"{self.lease}:{self.entry}"
        if self.owner != self.entry or self.cost is not None:
            member += f":{self.owner}:{self.cost or 0}"
        return member


class OperatorMarks(NamedTuple):
    """What operators did fleet-wide: drained ids, and recent clears (id -> when, monotonic;
    an id is a credential's, or a credential's and one scope's)."""

    drained: frozenset[str]
    clears: dict[str, float]
    refills: Mapping[str, str] = MappingProxyType({})  # refill id -> what was learned


class SharedObservations(Protocol):
    """What the store needs from a shared backend (`cooldown.shared.RedisObservations`).

    Entries are hex ids; times are the caller's monotonic seconds. A backend that cannot
    answer returns `None` from `lookup` and never raises.
    """

    def record(
        self, entry: str, deadline: float, now: float, max_seconds: int, foreign: str | None = None
    ) -> bool:
        """Keep the later deadline; `foreign` names the provider (a hex id) of an entry whose
        key its pool does not hold, kept apart and bounded: whether that dropped another."""

    def clear(self, entry: str, now: float, sent_at: float) -> None: ...

    def lookup(
        self, entries: Sequence[str], now: float, max_seconds: int
    ) -> tuple[list[float | None], float] | None: ...

    def live_entries(self, now: float) -> list[str] | None: ...

    def start(
        self,
        candidates: Sequence[tuple[str, str, str]],
        now: float,
        max_seconds: int,
        lease_until: float,
        terms: AdmissionTerms,
    ) -> SharedStart | None: ...

    def end(self, attempt: SharedAttempt, *, served: bool) -> None: ...

    def add_to_fleet(self, counter: str, now: float) -> None: ...

    def fleet_counts(self, now: float) -> dict[str, int] | None: ...

    def stats(self) -> dict[str, int | bool]: ...

    def drain(self, credential: str, now: float, *, drained: bool) -> bool | None: ...

    def operator_marks(self, now: float) -> OperatorMarks | None: ...

    def forget_credential(self, credential: str, scope: str | None, now: float) -> None: ...

    def mark_quota(self, credential: str, deadline: float, now: float) -> None: ...

    def quota_marks(self, now: float) -> dict[str, float] | None: ...

    def forget_quota(self, credential: str, now: float) -> None: ...

    def declared_slots(
        self, fields: Sequence[str], now: float
    ) -> dict[str, list[tuple[float, float]]] | None:
        """The fleet's live slots of these declared windows (`"<owner id>|<window id>"`):
        (when each leaves its window, what it counted), by field; `None` when Redis does not
        answer."""

    def keep_reading(self, credential: str, reading: Reading, now: float) -> None:
        """Keep a usage reading of the credential for every worker's status."""

    def readings(self, credentials: Sequence[str], now: float) -> dict[str, Reading] | None:
        """The fleet's last usage reading of each credential that has one."""

    def take_lease(self, name: str, seconds: float, now: float) -> bool | None:
        """Take the fleet's lease `name` (a hex id) for `seconds` unless another process
        holds it: whether this one now does; `None` when Redis did not answer."""

    def pending_actions(self) -> frozenset[str]:
        """Credential ids with an operator's action (drain, undrain, clear) Redis has not
        taken yet: it is retried until Redis does."""

    def note_refill(self, readings: Mapping[str, str], now: float) -> None: ...


class Sharing(NamedTuple):
    backend: SharedObservations
    digest: PreparedHmac  # keyed by the shared secret, not the store's salt


def shared_releases(
    sharing: Sharing,
    prefix: bytes,
    keys: Sequence[str],
    scope: bytes | None,
    now: float,
    max_seconds: int,
) -> tuple[dict[str, tuple[float, float]], float]:
    """Per key, its shared credential-wide and scope deadlines; and the shared overflow.

    One round trip; when the backend does not answer, nothing (the local answer stands).
    """
    digest = sharing.digest
    scope_digest = b"" if scope is None else digest(scope)
    entries: list[str] = []
    for key in keys:
        credential = digest(credential_message(prefix, require_str(key, "each key")))
        entries.append(credential.hex())
        if scope_digest:
            entries.append((credential + scope_digest).hex())
    answer = sharing.backend.lookup(entries, now, max_seconds)
    if answer is None:
        return {}, 0.0
    deadlines, overflow = answer
    per_key = 2 if scope_digest else 1
    releases = {}
    for index, key in enumerate(keys):
        wide = deadlines[index * per_key]
        scoped = deadlines[index * per_key + 1] if scope_digest else None
        releases[key] = (wide or 0.0, scoped or 0.0)
    return releases, overflow
