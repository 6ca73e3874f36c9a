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

    def before_poll(self) -> None:
        """The application polls again: implicit mode accepts what it left; explicit mode refuses
        while records are unacknowledged."""
        if self.mode == IMPLICIT:
            for tp, offs in self._delivered.items():
                if offs:
                    self._pending.setdefault(tp, {}).update(dict.fromkeys(offs, ACCEPT))
                    offs.clear()
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
        return any(self._pending.values())

    def unacknowledged(self, tp: Hashable) -> set[int]:
        return set(self._delivered.get(tp, ()))

    def take(self, tp: Hashable) -> list[AckBatch]:
        """The acknowledgement batches of `tp` to send now (they are no longer pending)."""
        pend = self._pending.pop(tp, {})
        return batches_of(pend)

    def take_all(self) -> dict[Hashable, list[AckBatch]]:
        return {tp: self.take(tp) for tp in list(self._pending) if self._pending[tp]}

    def contains_renew(self) -> bool:
        return any(t == RENEW for p in self._pending.values() for t in p.values())

    def drop_partition(self, tp: Hashable) -> None:
        """The partition left the assignment or its session ended: its records are the broker's again."""
        self._delivered.pop(tp, None)
        self._pending.pop(tp, None)


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
