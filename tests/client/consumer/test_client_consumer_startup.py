"""Consumer start-up latency: the first poll() after assign() must not sit out its wait slice
while the metadata and ListOffsets it needs have already arrived (it used to lose 0.5 s there)."""
import time

from kohort import Consumer
from kohort.structs import TopicPartition
from tests.helpers.peers import create_topic, mock_cluster, produce  # noqa: F401


def test_first_records_arrive_without_waiting_out_the_poll_slice(mock_cluster):
    n = create_topic(mock_cluster, "startup-a", 1)
    produce(mock_cluster, "startup-a", 50, partitions=n)
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition("startup-a", p) for p in range(n)])
        t = time.monotonic()
        recs = []
        while not recs and time.monotonic() - t < 5:
            recs = c.poll(5.0)
        elapsed = time.monotonic() - t
        assert recs
        # metadata -> ListOffsets -> Fetch take a few ms here; the old stall was >= 0.5 s
        assert elapsed < 0.4, f"first records after {elapsed:.3f}s"
