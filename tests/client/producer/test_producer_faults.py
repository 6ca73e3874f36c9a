"""Producer under scripted broker faults (tests/helpers/scripted_broker.py, real sockets): leader moves and
metadata refresh, retriable errors, lost responses, lost producer state, sequence gaps, fatal errors,
delivery timeouts — never a duplicate, never a reordering, never a silent loss."""
import time

import pytest

from kohort.client.producer import Producer
from kohort.errors import KafkaError, KafkaTimeoutError
from tests.helpers.scripted_broker import ScriptedCluster


@pytest.fixture
def cluster():
    clusters = []

    def make(n=1, topics=None):
        c = ScriptedCluster(n, topics or {"t": 1})
        clusters.append(c)
        return c
    yield make
    for c in clusters:
        c.close()


def produce_values(p, start, n, topic="t", **kw):
    return [p.produce(topic, b"%06d" % i, **kw) for i in range(start, start + n)]


def expect(values, n):
    assert values == [b"%06d" % i for i in range(n)]


@pytest.mark.timeout(30)
def test_leader_move_refreshes_metadata_and_resends(cluster):
    c = cluster(2)
    p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 1, "retry.backoff.ms": 20})
    f1 = produce_values(p, 0, 100)
    p.flush(10)
    c.move_leader("t", 0, 1)
    f2 = produce_values(p, 100, 100)
    assert p.flush(10) == 0
    assert all(f.exception(0) is None for f in f1 + f2)
    expect(c.values("t", 0), 200)
    assert p.sender.stats["retries"] >= 1
    assert p._topics["t"].leaders[0] == 1
    p.close()


@pytest.mark.timeout(30)
def test_retriable_errors_are_retried_in_order(cluster):
    c = cluster()
    c.fail_next("t", 0, 7, n=3)          # REQUEST_TIMED_OUT
    p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0, "batch.size": 200, "retry.backoff.ms": 10})
    futs = produce_values(p, 0, 300)
    assert p.flush(10) == 0
    assert all(f.exception(0) is None for f in futs)
    expect(c.values("t", 0), 300)
    # offsets reported are where the records are
    assert [f.result(0).offset for f in futs] == list(range(300))
    p.close()


# lz4: batches compressed on the native sealer, requests drained ahead and numbered as they leave it
@pytest.mark.timeout(30)
@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_lost_response_after_append_is_not_a_duplicate(cluster, codec):
    c = cluster()
    p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0, "batch.size": 300,
                  "reconnect.backoff.ms": 10, "retry.backoff.ms": 10, "compression.type": codec})
    produce_values(p, 0, 50)
    p.flush(10)
    c.drop_after_append(2)               # written, then the connection dies before the response
    futs = produce_values(p, 50, 250)
    assert p.flush(15) == 0
    assert all(f.exception(0) is None for f in futs)
    expect(c.values("t", 0), 300)        # nothing written twice
    assert [f.result(0).offset for f in futs] == list(range(50, 300))
    assert p.sender.stats["disconnects"] >= 1
    p.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_unknown_producer_id_bumps_and_renumbers(cluster, codec):
    c = cluster()
    p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0, "batch.size": 300, "retry.backoff.ms": 10,
                  "compression.type": codec})
    produce_values(p, 0, 100)
    p.flush(10)
    first_pid = p.sender.producer_id
    c.forget_producers()
    futs = produce_values(p, 100, 200)
    assert p.flush(10) == 0
    assert all(f.exception(0) is None for f in futs)
    expect(c.values("t", 0), 300)
    assert p.sender.producer_id != first_pid and p.sender.stats["epoch_bumps"] >= 1
    p.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_failure_of_first_in_flight_batch_keeps_order_of_later_ones(cluster, codec):
    c = cluster()
    p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0, "batch.size": 120,
                  "max.in.flight.requests.per.connection": 5, "retry.backoff.ms": 30, "compression.type": codec})
    produce_values(p, 0, 10)
    p.flush(10)
    c.fail_next("t", 0, 19)              # NOT_ENOUGH_REPLICAS for the next batch; later ones go out of order
    c.gather, c.gather_rounds = 4, 1     # the broker answers once 4 requests are in flight (that once)
    futs = produce_values(p, 10, 400)
    assert p.flush(20) == 0
    assert all(f.exception(0) is None for f in futs)
    expect(c.values("t", 0), 410)
    # the failed batch and the 3 in flight behind it (OUT_OF_ORDER_SEQUENCE_NUMBER) were all resent
    assert p.sender.stats["retries"] >= 4, p.sender.stats
    assert p.sender.stats["epoch_bumps"] == 0
    p.close()


@pytest.mark.timeout(30)
def test_fatal_error_fails_only_that_batch(cluster):
    c = cluster(1, {"t": 2})
    c.fail_next("t", 1, 87)              # INVALID_RECORD: not retriable
    p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 5})
    bad = p.produce("t", b"x", partition=1)
    good = p.produce("t", b"y", partition=0)
    p.flush(10)
    err = bad.exception(0)
    assert isinstance(err, KafkaError) and err.name == "INVALID_RECORD" and "t[1]" in str(err)
    assert good.result(0).offset == 0
    # the partition recovers: the next record goes through (sequence restarts after the gap)
    again = p.produce("t", b"z", partition=1)
    p.flush(10)
    assert again.exception(0) is None and c.values("t", 1) == [b"z"]
    p.close()


@pytest.mark.timeout(30)
def test_delivery_timeout_fails_records_that_cannot_be_delivered(cluster):
    c = cluster()
    c.fail_next("t", 0, 7, n=10_000)     # always REQUEST_TIMED_OUT
    p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0, "delivery.timeout.ms": 600,
                  "request.timeout.ms": 300, "retry.backoff.ms": 50})
    t0 = time.monotonic()
    f = p.produce("t", b"x")
    p.flush(10)
    assert 0.5 < time.monotonic() - t0 < 5
    err = f.exception(0)
    # expired while waiting to be retried (KIP-91), or failed by the last retry's answer past the deadline
    assert isinstance(err, KafkaTimeoutError) or (isinstance(err, KafkaError) and err.name == "REQUEST_TIMED_OUT")
    p.close()


@pytest.mark.timeout(30)
def test_missing_topic_is_a_clear_error(cluster):
    c = cluster()
    p = Producer({"bootstrap.servers": c.bootstrap, "max.block.ms": 500})
    with pytest.raises(KafkaError, match="'nope'.*kohort topics create nope"):
        p.produce("nope", b"x")
    with pytest.raises(Exception, match="partitions 0..0; partition 3 does not exist"):
        p.produce("t", b"x", partition=3)
    p.close()


@pytest.mark.timeout(30)
def test_acks_zero_sends_without_responses(cluster):
    c = cluster()
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": 0, "linger.ms": 0})
    futs = produce_values(p, 0, 100)
    p.flush(10)
    assert all(f.result(0).offset == -1 for f in futs)
    deadline = time.time() + 5
    while len(c.values("t", 0)) < 100 and time.time() < deadline:
        time.sleep(0.02)
    expect(c.values("t", 0), 100)
    p.close()


def test_buffer_memory_full_raises_after_max_block(cluster):
    c = cluster()
    c.fail_next("t", 0, 7, n=10_000)
    p = Producer({"bootstrap.servers": c.bootstrap, "buffer.memory": 40_000, "batch.size": 16384,
                  "max.block.ms": 300, "retry.backoff.ms": 200})
    with pytest.raises(KafkaTimeoutError, match="buffer.memory"):
        for i in range(10_000):
            p.produce("t", b"x" * 1000)
    p.close(1)


def test_record_larger_than_max_request_size_is_refused_at_once(cluster):
    from kohort.errors import MessageTooLargeError
    c = cluster()
    p = Producer({"bootstrap.servers": c.bootstrap, "max.request.size": 1000})
    with pytest.raises(MessageTooLargeError, match="max.request.size=1000"):
        p.produce("t", b"x" * 2000)
    assert p.produce("t", b"x" * 500).result(5).offset == 0
    p.close()


@pytest.mark.timeout(60)
def test_many_threads_produce_concurrently(cluster):
    import threading
    c = cluster(2, {"t": 4})
    p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 1, "batch.size": 2000})
    per_thread = 3000
    futs = {}

    def work(tid):
        futs[tid] = [p.produce("t", b"%d-%06d" % (tid, i), key=b"k%d" % tid) for i in range(per_thread)]
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.flush(20) == 0
    p.close()
    assert all(f.exception(0) is None for fs in futs.values() for f in fs)
    logged = [v for part in range(4) for v in c.values("t", part)]
    assert len(logged) == 4 * per_thread and len(set(logged)) == len(logged)
    for tid in range(4):         # one key per thread: one partition, in the order produced
        part = futs[tid][0].result(0).partition
        mine = [v for v in c.values("t", part) if v.startswith(b"%d-" % tid)]
        assert mine == [b"%d-%06d" % (tid, i) for i in range(per_thread)]


@pytest.mark.timeout(30)
def test_broker_without_producer_ids(cluster):
    c = cluster()
    del c.versions[22]                   # no InitProducerId
    p = Producer({"bootstrap.servers": c.bootstrap})
    assert p.produce("t", b"x").result(5).offset == 0     # idempotence was only the default
    assert not p.idempotent
    p.close()
    p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True})
    with pytest.raises(Exception, match="enable.idempotence=true but .* cannot give producer ids"):
        p.produce("t", b"y").result(5)
    p.close(1)


@pytest.mark.timeout(30)
def test_retried_batch_expires_when_the_leader_never_comes_back(cluster):
    c = cluster(2)
    p = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0, "delivery.timeout.ms": 800,
                  "request.timeout.ms": 300, "retry.backoff.ms": 50})
    assert p.produce("t", b"a").result(5).offset == 0
    c.move_leader("t", 0, 5)             # a node that does not exist: no leader to send to
    f = p.produce("t", b"b")
    assert p.flush(10) == 0
    assert isinstance(f.exception(0), KafkaTimeoutError) and "delivery.timeout.ms=800" in str(f.exception(0))
    c.move_leader("t", 0, 1)             # the leader is back: the producer carries on, no gap
    assert p.produce("t", b"c").result(5).offset == 1
    assert c.values("t", 0) == [b"a", b"c"]
    p.close()
