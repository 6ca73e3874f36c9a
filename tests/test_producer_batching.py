"""Producer batching and request pipelining (issue 17): what keeps one busy partition fast, checked
as behaviour (requests in flight, batch sizes), never as timing."""
import pytest

from kohort.client.producer import Producer
from tests.scripted_broker import ScriptedCluster


@pytest.fixture
def cluster():
    c = ScriptedCluster(1, {"t": 1})
    yield c
    c.close()


@pytest.mark.timeout(60)
def test_backlog_of_one_partition_goes_out_max_in_flight_at_a_time(cluster):
    """A backlog of full batches for one partition fills max.in.flight requests at once (Java's
    Sender loops while batches are sendable); it used to send one request per round trip."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "batch.size": 200,
                  "max.in.flight.requests.per.connection": 5})
    try:
        p.produce("t", b"first").result(10)          # metadata and producer id out of the way
        cluster.gather = 5                           # the broker answers once 5 requests have come
        with p.sender.io_lock:                       # we drive the I/O: none while the backlog builds up
            futs = [p.produce("t", b"%06d" % i) for i in range(400)]
            before = p.sender.stats["requests"]
            p.sender.prepare()                       # one round of the sender
            assert p.sender.stats["requests"] - before == 5
        assert p.flush(15) == 0
        assert all(f.exception(0) is None for f in futs)
        assert cluster.most_gathered >= 5
        assert cluster.values("t", 0) == [b"first"] + [b"%06d" % i for i in range(400)]
    finally:
        p.close(5)
