"""The Apache Kafka test bed's cluster ids: kafka-storage format reads an id starting with "-" as an
option and refuses to format, which made KafkaCluster fail to start about once in 64 runs."""
from __future__ import annotations

import base64

from tests.helpers.kafka_cluster import new_cluster_id


def test_cluster_ids_are_16_random_bytes_never_starting_with_a_dash():
    ids = [new_cluster_id() for _ in range(3000)]
    assert not [i for i in ids if i.startswith("-")]
    assert len(set(ids)) == len(ids)
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
