"""After a restart kohort broker leads every partition in a new leader epoch (issue 12); like Kafka's
makeLeader it records that epoch at each log's end at once, so a consumer naming the current epoch
(Fetch last_fetched_epoch, OffsetForLeaderEpoch) is served. Before, the epoch was unknown to a log
until something was appended in it, and kohort's consumer, seeking to the beginning after a restart,
got OFFSET_OUT_OF_RANGE and jumped to the end: every record skipped (found by the demo test)."""
from kohort.client.consumer import Consumer
from kohort.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest as OFLE
from kohort.structs import TopicPartition
from tests.helpers.brokers import KohortBroker
from tests.helpers.peers import create_topic, produce
from tests.helpers.rawclient import RawClient


def _read_from_beginning(bs: str, topic: str) -> list:
    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": bs}) as c:
        c.assign([tp])
        c.seek_to_beginning([tp])
        got = []
        for _ in range(20):
            got.extend(c.poll(0.5))
            if len(got) >= 100:
                break
    return got


def test_consumer_reads_from_the_beginning_after_a_restart(tmp_path):
    with KohortBroker(str(tmp_path / "data")) as b:
        assert create_topic(b.bootstrap, "epochs", 1) == 1
        produce(b.bootstrap, "epochs", 100, partitions=1)
        assert len(_read_from_beginning(b.bootstrap, "epochs")) == 100
        b.restart()
        got = _read_from_beginning(b.bootstrap, "epochs")
        assert [r.offset for r in got] == list(range(100))
        c = RawClient(b.bootstrap)
        try:
            T = OFLE.OffsetForLeaderTopic
            md_epoch = max(r.leader_epoch for r in got) + 1          # the epoch of this run
            resp = c.request(OFLE(replica_id=-1, topics=[T(topic="epochs", partitions=[
                T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=md_epoch)])]))
            part = resp.topics[0].partitions[0]
            assert (part.error_code, part.leader_epoch, part.end_offset) == (0, md_epoch, 100)
        finally:
            c.close()
