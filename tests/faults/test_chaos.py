"""Chaos: the kohort broker is SIGKILLed and restarted again and again while a kohort producer
(acks=all, idempotent) and a kohort consumer group (two members, manual commits of handed records)
keep running; the slow version adds a confluent-kafka, a kafka-python and an aiokafka group (one
member each, a subprocess: tests/helpers/group_member.py) (issue 13). Afterwards:

* every acknowledged record is in the log exactly once (no loss, no duplicate; nothing is in the log
  twice, acknowledged or not);
* every offset a group committed covers only records its members handed to the application: for
  each partition, every offset below the committed one was handed out at least once; every group
  eventually handed out every acknowledged record.

The short version runs in the default suite (3 kills); `-m slow` runs 20. Figures (kills, records,
losses, worst recovery = SIGKILL to the next acknowledged record) are printed:

    pytest tests/faults/test_chaos.py -s -m 'slow or not slow'
"""
from __future__ import annotations

import random
import sys
import threading
import time
import traceback
from collections import Counter

import pytest

from kohort.client.admin import Admin
from kohort.client.consumer import Consumer
from kohort.client.producer import Producer
from kohort.errors import KohortError
from kohort.structs import OffsetAndMetadata, TopicPartition
from tests.helpers.brokers import KohortBroker

TOPIC = "chaos"
GROUP = "chaos-group"
PARTITIONS = 3


class ProducerLoop(threading.Thread):
    def __init__(self, bootstrap: str, rate: int):
        super().__init__(daemon=True, name="chaos-producer")
        self.bootstrap, self.rate = bootstrap, rate
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.acked: list[tuple[float, bytes]] = []
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0
        self.error: BaseException | None = None
        self.left = None

    def run(self) -> None:
        try:
            with Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 5, "delivery.timeout.ms": 120000, "request.timeout.ms": 5000,
                           "max.block.ms": 120000, "reconnect.backoff.ms": 50}) as p:
                i = 0
                t0 = time.monotonic()
                while not self.halt.is_set():
                    value = b"v%08d" % i
                    p.produce(TOPIC, value, on_delivery=lambda err, md, v=value: self._done(err, v))
                    i += 1
                    self.sent = i
                    ahead = i / self.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
                self.left = p.flush(120)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _done(self, err, value: bytes) -> None:
        with self.lock:
            if err is None:
                self.acked.append((time.monotonic(), value))
            else:
                self.failed.append((value, str(err)))

    def first_ack_after(self, t: float) -> float | None:
        with self.lock:
            later = [at for at, _ in self.acked if at > t]
        return min(later) if later else None


class Member(threading.Thread):
    """A group member that hands records to "the application" (a list) and then commits exactly
    those: offset of the last handed record + 1 per partition."""

    def __init__(self, bootstrap: str, n: int):
        super().__init__(daemon=True, name=f"chaos-member-{n}")
        self.bootstrap = bootstrap
        self.halt = threading.Event()
        self.handed: list[tuple[int, int, bytes]] = []
        self.errors = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                          "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                          "heartbeat.interval.ms": 500, "request.timeout.ms": 5000,
                          "default.api.timeout.ms": 5000, "reconnect.backoff.ms": 50})
            try:
                c.subscribe([TOPIC])
                while not self.halt.is_set():
                    try:
                        recs = c.poll(0.2)
                        if not recs:
                            continue
                        last = {}
                        for r in recs:
                            self.handed.append((r.partition, r.offset, r.value))
                            last[r.topic_partition] = r.offset + 1
                        c.commit({tp: OffsetAndMetadata(o) for tp, o in last.items()})
                    except KohortError:
                        self.errors += 1          # the broker is down or the group rebalancing
                        time.sleep(0.1)
            finally:
                c.close(autocommit=False, timeout=5)
        except BaseException:  # noqa: BLE001 - reported by the test
            self.error = traceback.format_exc()
            print(f"{self.name} died:\n{self.error}", file=sys.stderr)


def read_log(bootstrap: str) -> list[tuple[int, int, bytes]]:
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(tps)
        ends = c.end_offsets(tps, timeout=10)
        out = []
        deadline = time.monotonic() + 60
        while any(c.position(tp, timeout=10) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "could not read the log back"
            out += [(r.partition, r.offset, r.value) for r in c.poll(0.5)]
    return out


def chaos(tmp_path, kills: int, rate: int = 1000, seed: int = 13, pause=(0.5, 1.2), peers=()) -> dict:
    """`peers`: other clients (tests/helpers/group_member.py: confluent, kafka-python, aiokafka), each a
    one-member group of its own ("chaos-<client>") in a subprocess, held to the same rule."""
    from tests.interop.test_groups_clients import Member as PeerMember
    rnd = random.Random(seed)
    b = KohortBroker(str(tmp_path / "data"))
    b.start()
    producer = None
    members = []
    peer_members = []
    try:
        with Admin({"bootstrap.servers": b.bootstrap}) as a:
            assert a.create_topics({TOPIC: PARTITIONS})[TOPIC] is None
        producer = ProducerLoop(b.bootstrap, rate)
        members = [Member(b.bootstrap, i) for i in range(2)]
        peer_members = [PeerMember(c, b.bootstrap, f"chaos-{c}", TOPIC) for c in peers]
        for pm in peer_members:     # kafka-python gives up at construction if no broker answers
            deadline = time.monotonic() + 60
            while "READY" not in pm.lines:
                assert time.monotonic() < deadline and pm.proc.poll() is None, f"{pm.client} did not start"
                time.sleep(0.05)
        producer.start()
        for m in members:
            m.start()
        recoveries = []
        for _ in range(kills):
            time.sleep(rnd.uniform(*pause))
            killed_at = time.monotonic()
            b.kill()                                   # SIGKILL
            time.sleep(rnd.uniform(0.0, 0.3))
            b.start()
            deadline = time.monotonic() + 60
            while producer.first_ack_after(killed_at) is None:
                assert time.monotonic() < deadline, "no acknowledgement within 60 s of a restart"
                assert producer.is_alive(), producer.error
                time.sleep(0.01)
            recoveries.append(producer.first_ack_after(killed_at) - killed_at)
        time.sleep(0.3)
        producer.halt.set()
        producer.join(150)
        assert not producer.is_alive() and producer.error is None, producer.error
        acked = {v for _, v in producer.acked}
        # let the group catch up with everything acknowledged, then stop it
        deadline = time.monotonic() + 60
        while {v for m in members for _, _, v in m.handed} < acked:
            assert time.monotonic() < deadline, "the group did not catch up within 60 s"
            assert all(m.is_alive() for m in members), [m.error for m in members]
            time.sleep(0.1)
        acked_text = {v.decode() for v in acked}
        for pm in peer_members:
            while not pm.values() >= acked_text:
                assert time.monotonic() < deadline + 60, f"{pm.client} did not catch up: {pm.lines[-5:]}"
                assert pm.proc.poll() is None, f"{pm.client} exited: {pm.lines[-5:]}"
                time.sleep(0.1)
        for m in members:
            m.halt.set()
        for m in members:
            m.join(30)
            assert not m.is_alive() and m.error is None, m.error
        for pm in peer_members:
            pm.terminate()
        log = read_log(b.bootstrap)
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        with Admin({"bootstrap.servers": b.bootstrap}) as a:
            committed = a.list_group_offsets(GROUP, tps)
            peer_committed = {pm.client: a.list_group_offsets(f"chaos-{pm.client}", tps) for pm in peer_members}
    finally:
        if producer is not None:
            producer.halt.set()
        for m in members:
            m.halt.set()
        for pm in peer_members:
            pm.kill()
        b.stop()
        b.cleanup()

    in_log = Counter(v for _, _, v in log)
    handed = {(p, o) for m in members for p, o, _ in m.handed}
    uncovered = _uncovered(committed, handed)
    for pm in peer_members:
        got = _uncovered(peer_committed[pm.client], {(p, o) for _, p, o, _ in pm.records})
        if got:
            uncovered[pm.client] = got
    return {
        "kills": kills, "produced": producer.sent, "acknowledged": len(acked), "failed": len(producer.failed),
        "in_log": len(log), "lost": len(acked - set(in_log)),
        "duplicated": sum(1 for n in in_log.values() if n > 1),
        "worst_recovery_s": round(max(recoveries), 3), "median_recovery_s": round(sorted(recoveries)[len(recoveries) // 2], 3),
        "handed": len(handed), "committed": {tp.partition: om.offset for tp, om in committed.items() if om},
        "commits_past_handed": uncovered, "member_errors": sum(m.errors for m in members),
        "failures": producer.failed[:3],
        "peers": {pm.client: {"handed": len(pm.records), "commits": pm.commits} for pm in peer_members},
    }


def _uncovered(committed: dict, handed: set) -> dict:
    """{partition: first offsets below the committed one that no member handed out}"""
    out = {}
    for tp, om in committed.items():
        if om is None:
            continue
        missing = [o for o in range(om.offset) if (tp.partition, o) not in handed]
        if missing:
            out[tp.partition] = missing[:5]
    return out


def check(fig: dict) -> None:
    print(f"\nchaos: {fig}")
    assert fig["lost"] == 0
    assert fig["duplicated"] == 0
    assert fig["failed"] == 0, fig["failures"]      # 120 s delivery timeout: every record got through
    assert fig["acknowledged"] == fig["produced"] == fig["in_log"]
    assert fig["commits_past_handed"] == {}
    assert sum(fig["committed"].values()) == fig["in_log"]  # the group caught up and said so


def test_chaos_short(tmp_path):
    check(chaos(tmp_path, kills=3, rate=500, pause=(0.3, 0.8)))


@pytest.mark.slow
def test_chaos_long(tmp_path):
    check(chaos(tmp_path, kills=20, rate=2000, seed=1313, peers=("confluent", "kafka-python", "aiokafka")))
