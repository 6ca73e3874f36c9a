"""The acknowledgement bookkeeping of a share consumer (KIP-932), pure: which delivered records the
application has acknowledged how, and the per-partition AcknowledgementBatches that go out on the
next ShareFetch (piggybacked) or in a ShareAcknowledge (commit_sync/commit_async, close).

* `share.acknowledgement.mode` implicit (default): the next poll ACCEPTs every record of the previous
  batch the application did not acknowledge itself. explicit: a poll while delivered records are
  unacknowledged is an error (Java's IllegalStateException), and `acknowledge` must name each record.
* Offsets inside acquired ranges with no record in the data (control records, compacted away) are
  acknowledged GAP by the consumer itself.
* Types: ACCEPT 1, RELEASE 2, REJECT 3, RENEW 4 (KIP-1222; a RENEWed record stays the application's:
  it is delivered again by a later poll with its lock renewed, and needs IsRenewAck, ShareFetch v2).
* Batches: contiguous offsets of one type form one AcknowledgementBatch with a single type (what
  librdkafka sends and Kafka accepts from every client).
* Implicit mode keeps what a poll hands out in contiguous offset runs (`handed_out_range`) and
  accepts them as runs: a poll of n records costs O(1), not n set and dict entries. Per-offset
  entries (GAPs, REJECTs of undecodable records, explicit acknowledgements) stay in a dict and win
  over a run covering the same offset.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable

from kohort.errors import KohortError

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
IMPLICIT, EXPLICIT = "implicit", "explicit"
_NAMES = {GAP: "GAP", ACCEPT: "ACCEPT", RELEASE: "RELEASE", REJECT: "REJECT", RENEW: "RENEW"}


class IllegalStateError(KohortError):
    """An acknowledgement the consumer's state does not allow (Java: IllegalStateException)."""


@dataclass(frozen=True)
class AckBatch:
    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


class Acknowledgements:
    """Delivered records and their acknowledgements, per partition (any hashable partition key)."""

    def __init__(self, mode: str = IMPLICIT, renew_supported: bool = True):
        if mode not in (IMPLICIT, EXPLICIT):
            raise ValueError(f"share.acknowledgement.mode must be implicit or explicit, got {mode!r}")
        self.mode = mode
        self.renew_supported = renew_supported
        self._delivered: dict[Hashable, set[int]] = {}     # handed to the application, not yet acknowledged
        self._pending: dict[Hashable, dict[int, int]] = {}  # acknowledged, not yet sent: offset -> type
        # implicit mode: the same as runs of offsets [first, last], handed out / ACCEPTed, not yet sent
        self._delivered_runs: dict[Hashable, list[list[int]]] = {}
        self._accepted_runs: dict[Hashable, list[list[int]]] = {}

    # -- delivery ------------------------------------------------------------------------------------------
    def delivered(self, tp: Hashable, acquired: Iterable[tuple[int, int]], record_offsets: Iterable[int]) -> None:
        """A ShareFetch answer gave the application `record_offsets` of partition `tp` out of the
        `acquired` ranges (first, last); acquired offsets without a record are GAP-acknowledged."""
        have = set(record_offsets)
        pend = self._pending.setdefault(tp, {})
        mine = self._delivered.setdefault(tp, set())
        for first, last in acquired:
            for o in range(first, last + 1):
                if o in have:
                    mine.add(o)
                else:
                    pend[o] = GAP

    def handed_out(self, tp: Hashable, record_offsets: Iterable[int]) -> None:
        """Records of partition `tp` given to the application (every offset a record: `delivered`
        without GAPs)."""
        mine = self._delivered.get(tp)
        if mine is None:
            mine = self._delivered[tp] = set()
        mine.update(record_offsets)

    def handed_out_range(self, tp: Hashable, first: int, last: int) -> None:
        """Records at every offset from `first` to `last` of partition `tp` given to the application."""
        if self.mode != IMPLICIT:
            self.handed_out(tp, range(first, last + 1))
            return
        _add_run(self._delivered_runs, tp, first, last)

    def holding(self) -> bool:
        """Records handed to the application and not acknowledged yet."""
        return any(self._delivered.values()) or any(self._delivered_runs.values())

    def before_poll(self) -> None:
        """The application polls again: implicit mode accepts what it left; explicit mode refuses
        while records are unacknowledged."""
        if self.mode == IMPLICIT:
            for tp, offs in self._delivered.items():
                if offs:
                    self._pending.setdefault(tp, {}).update(dict.fromkeys(offs, ACCEPT))
                    offs.clear()
            if self._delivered_runs:
                for tp, runs in self._delivered_runs.items():
                    for first, last in runs:
                        _add_run(self._accepted_runs, tp, first, last)
                self._delivered_runs.clear()
            return
        left = sum(len(v) for v in self._delivered.values())
        if left:
            raise IllegalStateError(f"{left} delivered records are not acknowledged "
                                    "(share.acknowledgement.mode=explicit)")

    def acknowledge(self, tp: Hashable, offset: int, ack_type: int = ACCEPT) -> None:
        if ack_type not in (ACCEPT, RELEASE, REJECT, RENEW):
            raise ValueError(f"acknowledge type must be ACCEPT, RELEASE, REJECT or RENEW, got {ack_type!r}")
        if ack_type == RENEW and not self.renew_supported:
            raise IllegalStateError("RENEW needs ShareFetch/ShareAcknowledge v2 (KIP-1222)")
        mine = self._delivered.get(tp, set())
        if offset not in mine:
            raise IllegalStateError(f"record at offset {offset} of {tp} was not delivered or is already "
                                    "acknowledged")
        mine.discard(offset)
        self._pending.setdefault(tp, {})[offset] = ack_type

    # -- what goes out -----------------------------------------------------------------------------------------
    def has_pending(self) -> bool:
        return any(self._pending.values()) or any(self._accepted_runs.values())

    def pending_partitions(self) -> list[Hashable]:
        """The partitions with acknowledgements waiting to be sent."""
        out = [tp for tp, p in self._pending.items() if p]
        out.extend(tp for tp, r in self._accepted_runs.items() if r and not self._pending.get(tp))
        return out

    def unacknowledged(self, tp: Hashable) -> set[int]:
        out = set(self._delivered.get(tp, ()))
        for first, last in self._delivered_runs.get(tp, ()):
            out.update(range(first, last + 1))
        return out

    def take(self, tp: Hashable) -> list[AckBatch]:
        """The acknowledgement batches of `tp` to send now (they are no longer pending)."""
        pend = self._pending.pop(tp, {})
        runs = self._accepted_runs.pop(tp, None)
        if not runs:
            return batches_of(pend)
        if not pend:
            return [AckBatch(first, last, (ACCEPT,)) for first, last in sorted(runs)]
        merged: dict[int, int] = {}
        for first, last in runs:
            merged.update(dict.fromkeys(range(first, last + 1), ACCEPT))
        merged.update(pend)
        return batches_of(merged)

    def take_all(self) -> dict[Hashable, list[AckBatch]]:
        return {tp: b for tp in self.pending_partitions() for b in (self.take(tp),) if b}

    def contains_renew(self) -> bool:
        return any(t == RENEW for p in self._pending.values() for t in p.values())

    def drop_partition(self, tp: Hashable) -> None:
        """The partition left the assignment or its session ended: its records are the broker's again."""
        self._delivered.pop(tp, None)
        self._pending.pop(tp, None)
        self._delivered_runs.pop(tp, None)
        self._accepted_runs.pop(tp, None)


def _add_run(runs_by_tp: dict, tp: Hashable, first: int, last: int) -> None:
    """Offsets `first`..`last` added to `tp`'s runs, joined to the last run when they continue it."""
    runs = runs_by_tp.get(tp)
    if runs is None:
        runs_by_tp[tp] = [[first, last]]
    elif runs[-1][1] == first - 1:
        runs[-1][1] = last
    else:
        runs.append([first, last])


def batches_of(types_by_offset: dict[int, int]) -> list[AckBatch]:
    """Contiguous offsets of one type as one AckBatch each, in offset order."""
    if not types_by_offset:
        return []
    lo, hi = min(types_by_offset), max(types_by_offset)
    if hi - lo + 1 == len(types_by_offset):
        kinds = set(types_by_offset.values())
        if len(kinds) == 1:               # the common case: one range, one type (an implicit poll's records)
            return [AckBatch(lo, hi, (kinds.pop(),))]
    out: list[AckBatch] = []
    for o in sorted(types_by_offset):
        t = types_by_offset[o]
        if out and out[-1].last_offset == o - 1 and out[-1].acknowledge_types == (t,):
            out[-1] = AckBatch(out[-1].first_offset, o, (t,))
        else:
            out.append(AckBatch(o, o, (t,)))
    return out


def type_name(t: int) -> str:
    return _NAMES.get(t, str(t))
