"""Issue 12's scenarios (tests/helpers/group_scenarios.py) on Apache Kafka 4.x: kohort's consumer behaves as
Java's KafkaConsumer against the reference broker too. 1-node in the default suite (`kafka1`); the
fatal-join retry needs group.max.size=1 (its own 1-node cluster) and the coordinator moves need 3 nodes
(slow suite)."""
import uuid

import pytest

from tests.helpers import group_scenarios as S
from tests.helpers.kafka_cluster import KafkaCluster


def tag() -> str:
    return "kafka-" + uuid.uuid4().hex[:6]


def test_1_metadata_driven_rejoin(kafka1):
    S.metadata_driven_rejoin(kafka1.bootstrap, tag())


def test_3_commit_after_rebalance(kafka1):
    S.commit_after_rebalance(kafka1.bootstrap, tag())


def test_5_poll_after_max_poll_interval(kafka1):
    S.poll_after_max_poll_interval(kafka1.bootstrap, tag())


def test_7_illegal_generation_keeps_member_id(kafka1):
    S.illegal_generation_keeps_member_id(kafka1.bootstrap, tag())


def test_8_committed_offset_validated_after_restart(kafka1):
    S.committed_offset_validated_after_restart(kafka1.bootstrap, tag())


def test_close_leaves_the_group(kafka1):
    S.close_leaves_group(kafka1.bootstrap, tag())


def test_pattern_subscription_follows_topics(kafka1):
    S.pattern_subscription_follows_topics(kafka1.bootstrap, tag())


@pytest.mark.slow
def test_4_join_retried_after_group_max_size():
    with KafkaCluster(1, extra_config={"group.max.size": 1}) as kc:
        S.join_retried_after_fatal_error(kc.bootstrap, tag())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_2_coordinator_moves_during_processing(kafka3):
    t = tag()
    group = f"cr-{t}"

    def move_coordinator():
        kafka3.restart(kafka3.coordinator(group))     # SIGKILL, the coordinator moves, then it comes back
    S.coordinator_restart_during_processing(kafka3.bootstrap, move_coordinator, t)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_6_slow_member_survives_rebalance(kafka3):
    S.slow_member_survives_rebalance(kafka3.bootstrap, tag())
