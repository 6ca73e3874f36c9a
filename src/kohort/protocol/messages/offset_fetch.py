"""OffsetFetch (API key 9), v0-v10. Read a group's committed offsets.

v0 read from ZooKeeper, v1+ from __consumer_offsets; v2 allows a null topics array (= all topics) and a
top-level error_code; v3 throttle_time_ms; v5 committed_leader_epoch (KIP-320); v6 first flexible
version (KIP-482); v7 require_stable (KIP-447); v8 several groups per request (KIP-709: the top-level
group_id/topics move into `groups`); v9 member_id/member_epoch for KIP-848 members; v10 topic ids
replace topic names (KIP-848). Kafka 4.x brokers accept v1+ (KIP-896).
"""
from kohort.protocol.schema import BOOL, INT16, INT32, INT64, STRING, UUID, Array, ArrayOf, Message, f


class OffsetFetchRequest(Message):
    API_KEY = 9
    VALID = "0-10"
    FLEXIBLE = "6+"
    SCHEMA = [
        f("group_id", STRING, "0-7"),
        f("topics", ArrayOf("Topic", [
            f("name", STRING, "0-7"),
            f("partition_indexes", Array(INT32), "0-7"),
        ]), "0-7", nullable="2-7"),
        f("groups", ArrayOf("Group", [
            f("group_id", STRING, "8+"),
            f("member_id", STRING, "9+", nullable="9+", default=None),
            f("member_epoch", INT32, "9+", default=-1),
            f("topics", ArrayOf("Topics", [
                f("name", STRING, "8-9"),
                f("topic_id", UUID, "10+"),
                f("partition_indexes", Array(INT32), "8+"),
            ]), "8+", nullable="8+"),
        ]), "8+"),
        f("require_stable", BOOL, "7+"),
    ]


class OffsetFetchResponse(Message):
    API_KEY = 9
    VALID = "0-10"
    FLEXIBLE = "6+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "3+"),
        f("topics", ArrayOf("Topic", [
            f("name", STRING, "0-7"),
            f("partitions", ArrayOf("Partition", [
                f("partition_index", INT32, "0-7"),
                f("committed_offset", INT64, "0-7"),
                f("committed_leader_epoch", INT32, "5-7", default=-1),
                f("metadata", STRING, "0-7", nullable="0-7"),
                f("error_code", INT16, "0-7"),
            ]), "0-7"),
        ]), "0-7"),
        f("error_code", INT16, "2-7"),
        f("groups", ArrayOf("Group", [
            f("group_id", STRING, "8+"),
            f("topics", ArrayOf("Topics", [
                f("name", STRING, "8-9"),
                f("topic_id", UUID, "10+"),
                f("partitions", ArrayOf("Partitions", [
                    f("partition_index", INT32, "8+"),
                    f("committed_offset", INT64, "8+"),
                    f("committed_leader_epoch", INT32, "8+", default=-1),
                    f("metadata", STRING, "8+", nullable="8+"),
                    f("error_code", INT16, "8+"),
                ]), "8+"),
            ]), "8+"),
            f("error_code", INT16, "8+"),
        ]), "8+"),
    ]
