"""What every group machine shares: its group type, its timers and its appends waiting to be stored.

A group machine (`ClassicGroupCoordinator`, `ConsumerGroups`, and the next group type the same way)
is pure: every entry point takes `now_ms` and returns an Outcome (kohort.broker.coordinator.model).
`GroupMachine` is the plumbing under each of them:

* timers: `_arm` records a key's deadline (and an argument the machine reads back when it fires) and
  puts a SetTimer carrying the machine's `TIMER_NAMESPACE` in the Outcome; `_disarm` a CancelTimer.
  The runtime keys its timer table by (namespace, key) and fires a key on the machine owning that
  namespace, so two machines' keys never collide and no key has to be recognised by its spelling.
* pending appends: `_hold` issues an `AppendToken` (namespace, sequence number) for records to store
  and keeps what the machine needs when they are stored (a callback, a held response); the runtime
  reports each token back to the machine of its namespace with `on_append_done`.

Group types are Kafka's (`GroupType`, as its group-coordinator's Group.GroupType).
"""
from __future__ import annotations

import abc
import enum
from typing import Any, ClassVar, Mapping, NamedTuple

from .model import Append, CancelTimer, Outcome, Record, SetTimer


class GroupType(str, enum.Enum):
    """The kinds of group a coordinator serves (Kafka's Group.GroupType; ListGroups' group_type)."""
    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"


class AppendToken(NamedTuple):
    """Names one Append until its records are stored: the machine (by timer namespace) and its
    sequence number there."""
    namespace: str
    seq: int


class GroupMachine(abc.ABC):
    """Base of the group machines: timer table and pending appends (see the module docstring)."""

    GROUP_TYPE: ClassVar[GroupType]
    TIMER_NAMESPACE: ClassVar[str]
    SERDE: ClassVar[Any]          # its records' RecordSerde (kohort.broker.coordinator.serde)

    def __init__(self) -> None:
        self._timers: dict[tuple, tuple[int, Any]] = {}      # key -> (deadline, argument)
        self._pending: dict[AppendToken, Any] = {}          # token -> what completes it
        self._next_token_seq = 1

    # -- timers ------------------------------------------------------------------------------------
    def _arm(self, out: Outcome, key: tuple, deadline: int, arg: Any = None) -> None:
        self._timers[key] = (deadline, arg)
        out.timers.append(SetTimer(key, deadline, self.TIMER_NAMESPACE))

    def _disarm(self, out: Outcome, key: tuple) -> None:
        if self._timers.pop(key, None) is not None:
            out.timers.append(CancelTimer(key, self.TIMER_NAMESPACE))

    def _take_due(self, key: tuple, now_ms: int) -> tuple[int, Any] | None:
        """The (deadline, argument) of `key` if it is armed and due, removing it; None for a key that
        was cancelled, re-armed later or fires early (the runtime may be lazy about cancellations)."""
        armed = self._timers.get(key)
        if armed is None or now_ms < armed[0]:
            return None
        del self._timers[key]
        return armed

    def _disarm_all(self, out: Outcome) -> None:
        for key in list(self._timers):
            self._disarm(out, key)

    def timer_deadlines(self) -> dict[tuple, int]:
        """The armed timers (key -> deadline); the runtime's view must match after applying outcomes."""
        return {k: d for k, (d, _) in self._timers.items()}

    # -- appends -----------------------------------------------------------------------------------
    def _hold(self, out: Outcome, records: list[Record] | tuple, pending: Any,
              producer: tuple[int, int] | None = None) -> AppendToken:
        """Append `records` (as one transactional batch of `producer` when given), keeping `pending`
        until `on_append_done` reports the token."""
        token = AppendToken(self.TIMER_NAMESPACE, self._next_token_seq)
        self._next_token_seq += 1
        self._pending[token] = pending
        out.appends.append(Append(token, tuple(records), producer))
        return token

    def pending_tokens(self) -> list[AppendToken]:
        return sorted(self._pending)

    # -- what every machine answers (the runtime's calls) --------------------------------------------
    @abc.abstractmethod
    def replay(self, record: Any, producer_id: int = -1) -> None:
        """Rebuild state from one stored record at load (`producer_id` >= 0: in a transactional batch
        of that producer with no marker yet)."""

    @abc.abstractmethod
    def on_loaded(self, now_ms: int, topics: Mapping[str, int] | None = None) -> Outcome:
        """Loading finished (`topics`: name -> partition count as of now): serve, arm timers."""

    @abc.abstractmethod
    def on_append_done(self, token: AppendToken, error_code: int, now_ms: int) -> Outcome:
        """The records of Append `token` were stored (error_code 0) or not (a storage error code)."""

    @abc.abstractmethod
    def fire_timer(self, key: tuple, now_ms: int) -> Outcome:
        """Timer `key` of this machine's namespace expired (ignored unless armed and due)."""

    @abc.abstractmethod
    def unload(self) -> Outcome:
        """Stop serving: answer what is held, drop the timers."""
