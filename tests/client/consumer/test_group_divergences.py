"""Issue 12: kohort's consumer against Java's KafkaConsumer semantics, on kohort broker.

The scenarios live in tests/helpers/group_scenarios.py as functions of a bootstrap string (the main session
re-runs them on Apache Kafka). Each failed on the consumer (and, for item 8, the broker) before
issue 12; see the scenario's docstring for what it did. On Apache Kafka 4.3.1 (1 node) the consumer
before issue 12 failed 1-7 likewise; 8's client half passed there, because Kafka's Fetch answers the
diverging epoch that kohort broker did not, and the fetcher already truncated on it.
"""
import time

import pytest

from tests.helpers import group_scenarios as S
from tests.helpers.brokers import KohortBroker, kohort_broker  # noqa: F401


def test_1_metadata_driven_rejoin(kohort_broker):
    S.metadata_driven_rejoin(kohort_broker.bootstrap, "k")


def _restart_after_a_second(broker):
    """Stop the broker (SIGTERM), start it again a second later on the same port and data."""
    def restart():
        broker.stop()
        time.sleep(1)
        broker.start()
    return restart


def test_2_coordinator_restart_during_processing(kohort_broker):
    S.coordinator_restart_during_processing(kohort_broker.bootstrap, _restart_after_a_second(kohort_broker), "k")


@pytest.mark.slow
def test_2_coordinator_restart_during_processing_confluent_kafka(kohort_broker):
    """The reference on the same broker and scenario: librdkafka keeps its partitions, no callback."""
    S.ck_coordinator_restart_during_processing(kohort_broker.bootstrap, _restart_after_a_second(kohort_broker), "k")


def test_3_commit_after_rebalance(kohort_broker):
    S.commit_after_rebalance(kohort_broker.bootstrap, "k")


def test_4_join_retried_after_group_max_size():
    with KohortBroker(config={"group.max.size": 1}) as b:
        S.join_retried_after_fatal_error(b.bootstrap, "k")


def test_5_poll_after_max_poll_interval(kohort_broker):
    S.poll_after_max_poll_interval(kohort_broker.bootstrap, "k")


@pytest.mark.slow
def test_6_slow_member_survives_rebalance(kohort_broker):
    S.slow_member_survives_rebalance(kohort_broker.bootstrap, "k")


def test_7_illegal_generation_keeps_member_id(kohort_broker):
    S.illegal_generation_keeps_member_id(kohort_broker.bootstrap, "k")


def test_8_committed_offset_validated_after_restart(kohort_broker):
    S.committed_offset_validated_after_restart(kohort_broker.bootstrap, "k")


def test_8_fetch_diverging_epoch(kohort_broker):
    S.fetch_diverging_epoch(kohort_broker.bootstrap, "k")


def test_8_leader_epoch_bumps_on_restart(kohort_broker):
    S.leader_epoch_bumps_on_restart(kohort_broker.bootstrap, kohort_broker.restart, "k")


def test_close_leaves_the_group(kohort_broker):
    S.close_leaves_group(kohort_broker.bootstrap, "k")


def test_pattern_subscription_follows_topics(kohort_broker):
    S.pattern_subscription_follows_topics(kohort_broker.bootstrap, "k")
