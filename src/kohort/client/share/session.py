"""A share consumer's share session with one partition leader (KIP-932), pure: which partitions the
session holds, its epoch, and the ShareFetch / ShareAcknowledge requests that carry the
acknowledgements (Java's ShareSessionHandler). No I/O here; the consumer's fetcher sends what it builds.

* Epoch 0 opens the session with every partition wanted from this leader; acknowledgements cannot
  ride on it (the broker answers INVALID_REQUEST), so those pending then fail locally with
  INVALID_SHARE_SESSION_EPOCH (the records go back to the broker when their locks expire).
* Epoch n > 0 adds the partitions new to the session (Topics) and removes the ones no longer wanted
  (ForgottenTopicsData); partitions with acknowledgements are listed too. After an answer the epoch
  is n + 1 (after Integer.MAX_VALUE: 1).
* SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH (and SHARE_SESSION_LIMIT_REACHED for a fetch)
  restart the session at epoch 0; the acknowledgements of that request failed.
* Closing sends the pending acknowledgements with epoch -1 (ShareAcknowledge), which also releases
  what the member still holds on that leader.
* v2 (Kafka 4.2+) carries the acquire mode (KIP-1206) and IsRenewAck (KIP-1222); a request with RENEW
  acknowledgements fetches nothing (MaxWaitMs = MinBytes = MaxBytes = MaxRecords = 0).
"""
from __future__ import annotations

import uuid as _uuid
from dataclasses import dataclass
from typing import Iterable, Mapping

from kohort.client.share.acknowledgements import RENEW, AckBatch
from kohort.errors import ErrorCode
from kohort.protocol.messages.share_acknowledge import ShareAcknowledgeRequest
from kohort.protocol.messages.share_fetch import FINAL_EPOCH, INITIAL_EPOCH, ShareFetchRequest

TopicIdPartition = tuple[_uuid.UUID, int]
INT32_MAX = (1 << 31) - 1
RESTART_ERRORS = frozenset({ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH})
FETCH_RESTART_ERRORS = RESTART_ERRORS | {ErrorCode.SHARE_SESSION_LIMIT_REACHED}


@dataclass(frozen=True)
class FetchLimits:
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52428800
    max_records: int = 500            # max.poll.records
    batch_size: int = 500
    acquire_mode: int = 0             # share.acquire.mode: 0 batch_optimized, 1 record_limit


@dataclass(frozen=True)
class Built:
    """A request and the acknowledgements it carries (or that failed without being sent)."""
    request: object | None
    acks: dict[TopicIdPartition, list[AckBatch]]
    failed: dict[TopicIdPartition, list[AckBatch]]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


class ShareSession:
    def __init__(self, group_id: str, member_id: str, version: int = 2):
        if version not in (1, 2):
            raise ValueError(f"ShareFetch/ShareAcknowledge version must be 1 or 2, got {version}")
        self.group_id = group_id
        self.member_id = member_id
        self.version = version
        self.epoch = INITIAL_EPOCH
        self.partitions: set[TopicIdPartition] = set()
        self._sent: set[TopicIdPartition] = set()        # partitions of the request in flight

    def build_fetch(self, wanted: Iterable[TopicIdPartition], acks: Mapping[TopicIdPartition, list[AckBatch]],
                    limits: FetchLimits = FetchLimits()) -> Built:
        wanted = set(wanted)
        acks = {tp: list(b) for tp, b in acks.items() if b}
        failed: dict[TopicIdPartition, list[AckBatch]] = {}
        if self.epoch == INITIAL_EPOCH:
            failed, acks = acks, {}
            listed = sorted(wanted, key=_order)
            forgotten: list[TopicIdPartition] = []
        else:
            listed = sorted((wanted - self.partitions) | set(acks), key=_order)
            forgotten = sorted(self.partitions - wanted, key=_order)
        renew = any(t == RENEW for bs in acks.values() for b in bs for t in b.acknowledge_types)
        if renew and self.version < 2:
            raise ValueError("RENEW acknowledgements need ShareFetch v2")
        R = ShareFetchRequest
        req = R(group_id=self.group_id, member_id=self.member_id, share_session_epoch=self.epoch,
                max_wait_ms=0 if renew else limits.max_wait_ms, min_bytes=0 if renew else limits.min_bytes,
                max_bytes=0 if renew else limits.max_bytes, max_records=0 if renew else limits.max_records,
                batch_size=limits.batch_size, share_acquire_mode=limits.acquire_mode if self.version >= 2 else 0,
                is_renew_ack=renew,
                topics=_topics(R.FetchTopic, R.FetchTopic.FetchPartition, listed, acks),
                forgotten_topics_data=[R.ForgottenTopic(topic_id=t, partitions=sorted(p for tt, p in forgotten if tt == t))
                                       for t in sorted({t for t, _ in forgotten}, key=str)])
        self._sent = wanted
        return Built(req, acks, failed)

    def build_acknowledge(self, acks: Mapping[TopicIdPartition, list[AckBatch]], closing: bool = False) -> Built:
        """commit_sync/commit_async (current epoch) or close (-1). Nothing to send: request None."""
        acks = {tp: list(b) for tp, b in acks.items() if b}
        if not closing and self.epoch == INITIAL_EPOCH:
            return Built(None, {}, acks)
        if not acks and not closing:
            return Built(None, {}, {})
        renew = any(t == RENEW for bs in acks.values() for b in bs for t in b.acknowledge_types)
        if renew and self.version < 2:
            raise ValueError("RENEW acknowledgements need ShareAcknowledge v2")
        R = ShareAcknowledgeRequest
        req = R(group_id=self.group_id, member_id=self.member_id,
                share_session_epoch=FINAL_EPOCH if closing else self.epoch, is_renew_ack=renew,
                topics=_topics(R.AcknowledgeTopic, R.AcknowledgeTopic.AcknowledgePartition,
                               sorted(acks, key=_order), acks))
        self._sent = set(self.partitions)
        return Built(req, acks, {})

    def handle_response(self, error_code: int, fetch: bool = True) -> None:
        """The top-level error of the answer to the last request built."""
        restart = FETCH_RESTART_ERRORS if fetch else RESTART_ERRORS
        if error_code in restart:
            self.epoch = INITIAL_EPOCH
            self.partitions = set()
            return
        if error_code != 0:
            return
        if fetch:
            self.partitions = set(self._sent)
        self.epoch = next_epoch(self.epoch)

    def closed(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.partitions = set()


def _order(tp: TopicIdPartition):
    return (str(tp[0]), tp[1])


def _topics(topic_cls, part_cls, listed: list[TopicIdPartition], acks: Mapping[TopicIdPartition, list[AckBatch]]):
    """One entry per topic id (librdkafka may repeat a topic; kohort never does)."""
    out = []
    for t in sorted({t for t, _ in listed}, key=str):
        parts = [part_cls(partition_index=p, acknowledgement_batches=[
            part_cls.AcknowledgementBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                          acknowledge_types=list(b.acknowledge_types)) for b in acks.get((t, p), ())])
            for tt, p in listed if tt == t]
        out.append(topic_cls(topic_id=t, partitions=parts))
    return out
