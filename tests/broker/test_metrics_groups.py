"""`kohort broker --metrics`: group series (state, members, generation/epoch, rebalances) and, per group
and partition, the committed offset and the lag (log end - committed), scraped after real groups
consumed: a kohort classic group with known commits and a confluent-kafka KIP-848 consumer group."""
from __future__ import annotations

import time
import uuid

from kohort.client.admin import Admin
from kohort.client.consumer import Consumer
from kohort.client.producer import Producer
from tests.helpers.brokers import KohortBroker, free_port
from tests.broker.test_broker_metrics import scrape
from tests.broker.coordinator.test_kip848_broker import BROKER_CONFIG, _ck_member, _owned, _records, _wait
from kohort.structs import TopicPartition


def _produce(bs, topic, counts):
    with Admin({"bootstrap.servers": bs}) as a:
        a.create_topics({topic: len(counts)})
    with Producer({"bootstrap.servers": bs}) as p:
        for part, n in counts.items():
            for i in range(n):
                p.produce(topic, b"x%d" % i, partition=part)
        p.flush()


def test_group_and_lag_series_after_real_groups_consume():
    mport = free_port()
    with KohortBroker(config=BROKER_CONFIG, metrics_port=mport) as b:
        bs = b.bootstrap
        topic, group = f"mt-{uuid.uuid4().hex[:6]}", "mt-classic"
        _produce(bs, topic, {0: 60, 1: 40})
        c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        try:
            c.subscribe([topic])
            got = 0
            deadline = time.monotonic() + 30
            while got < 100 and time.monotonic() < deadline:
                got += len(c.poll(0.5))
            assert got == 100
            c.commit({TopicPartition(topic, 0): 50, TopicPartition(topic, 1): 30})
            m = scrape(mport)
            g = f'group="{group}"'
            assert m[f'kohort_group_state{{{g},type="classic",state="Stable"}}'] == 1
            assert m[f'kohort_group_members{{{g}}}'] == 1
            assert m[f'kohort_group_generation{{{g}}}'] >= 1
            assert m[f'kohort_group_rebalances_total{{{g}}}'] >= 1
            assert m[f'kohort_group_committed_offset{{{g},topic="{topic}",partition="0"}}'] == 50
            assert m[f'kohort_group_committed_offset{{{g},topic="{topic}",partition="1"}}'] == 30
            assert m[f'kohort_group_lag{{{g},topic="{topic}",partition="0"}}'] == 10
            assert m[f'kohort_group_lag{{{g},topic="{topic}",partition="1"}}'] == 10
            _produce(bs, f"{topic}-more", {0: 1})            # unrelated: lag of our group unchanged
            with Producer({"bootstrap.servers": bs}) as p:   # 5 more on partition 0: lag grows by 5
                for _ in range(5):
                    p.produce(topic, b"y", partition=0)
            assert scrape(mport)[f'kohort_group_lag{{{g},topic="{topic}",partition="0"}}'] == 15
        finally:
            c.close(autocommit=False)
        m = scrape(mport)
        assert m[f'kohort_group_state{{group="{group}",type="classic",state="Empty"}}'] == 1
        assert m[f'kohort_group_members{{group="{group}"}}'] == 0

        # a KIP-848 consumer group (confluent-kafka, group.protocol=consumer) that consumed everything
        cg = f"mt-848-{uuid.uuid4().hex[:6]}"
        p, lines = _ck_member(bs, cg, topic, seconds=60)
        try:
            assert _wait(lambda: len(_owned(lines)) == 2 and len(_records(lines)) == 105, 40, lambda: None)

            def settled():
                m = scrape(mport)
                return (m.get(f'kohort_group_state{{group="{cg}",type="consumer",state="Stable"}}') == 1
                        and m.get(f'kohort_group_lag{{group="{cg}",topic="{topic}",partition="0"}}') == 0
                        and m.get(f'kohort_group_lag{{group="{cg}",topic="{topic}",partition="1"}}') == 0)
            assert _wait(settled, 20, lambda: None), scrape(mport)
            m = scrape(mport)
            assert m[f'kohort_group_committed_offset{{group="{cg}",topic="{topic}",partition="0"}}'] == 65
            assert m[f'kohort_group_members{{group="{cg}"}}'] == 1
            assert m[f'kohort_group_generation{{group="{cg}"}}'] == m[f'kohort_group_target_assignment_epoch{{group="{cg}"}}'] >= 1
            assert m[f'kohort_group_rebalances_total{{group="{cg}"}}'] >= 1
        finally:
            if p.poll() is None:
                p.kill()
            p.wait(10)
