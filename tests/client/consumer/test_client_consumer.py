"""Consumer without group management (assign) against real brokers: librdkafka's mock cluster and Tansu."""
import time

import pytest

from kohort import Consumer
from kohort.client.consumer.offsets import NoOffsetForPartitionError
from kohort.client.config import ConfigError
from kohort.structs import TopicPartition
from tests.helpers.peers import create_topic, mock_cluster, produce  # noqa: F401

N = 3000


@pytest.fixture(scope="module")
def topic(mock_cluster):
    n = create_topic(mock_cluster, "cons-a", 4)
    produce(mock_cluster, "cons-a", N, partitions=n, headers=[("h", b"v")])
    return "cons-a", n


def drain(c, want, timeout=10.0):
    out = []
    end = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < end:
        out.extend(c.poll(0.2))
    return out


def test_assign_and_consume_everything(mock_cluster, topic):
    name, n = topic
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest",
                   "max.poll.records": 700}) as c:
        c.assign([TopicPartition(name, p) for p in range(n)])
        first = c.poll(5.0)
        assert 0 < len(first) <= 700
        recs = first + drain(c, N - len(first))
        assert len(recs) == N
        assert sorted(int(r.value[:r.value.index(b"x")]) for r in recs) == list(range(N))
        r = recs[0]
        assert r.topic == name and r.key == f"k{int(r.value[:r.value.index(b'x')])}".encode()
        assert r.headers == [("h", b"v")] and r.timestamp > 0 and r.timestamp_type == 0
        assert r.leader_epoch is None or r.leader_epoch >= 0
        # per-partition order
        for p in range(n):
            offs = [x.offset for x in recs if x.partition == p]
            assert offs == list(range(len(offs)))
        assert all(v == 0 for v in c.lag().values())
        assert sum(c.position(TopicPartition(name, p)) for p in range(n)) == N
        assert c.poll(0.3) == []


def test_seek_and_positions(mock_cluster, topic):
    name, _ = topic
    tp = TopicPartition(name, 1)
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "latest"}) as c:
        c.assign([tp])
        end = c.position(tp)
        assert end == c.end_offsets([tp])[tp] > 0
        assert c.poll(0.3) == []
        c.seek(tp, end - 5)
        got = drain(c, 5)
        assert [r.offset for r in got] == list(range(end - 5, end))
        c.seek_to_beginning([tp])
        assert c.position(tp) == 0
        assert drain(c, 1)[0].offset == 0
        c.seek_to_end()
        assert c.position(tp) == end
        with pytest.raises(Exception, match="not assigned"):
            c.seek(TopicPartition(name, 99), 0)


def test_pause_resume(mock_cluster, topic):
    name, n = topic
    tps = [TopicPartition(name, p) for p in range(n)]
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest"}) as c:
        c.assign(tps)
        c.pause(tps[:1])
        recs = drain(c, N, timeout=3)
        assert recs and {r.partition for r in recs} == {tp.partition for tp in tps[1:]}
        assert c.paused() == {tps[0]}
        c.resume(tps[:1])
        more = drain(c, 1)
        assert more and {r.partition for r in more} == {0}


def test_offsets_for_times_future_timestamp_is_none(mock_cluster, topic):
    # (the mock cluster answers only the -1/-2 special timestamps; real lookups are tested on Tansu)
    name, _ = topic
    tp = TopicPartition(name, 0)
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest"}) as c:
        assert c.offsets_for_times({tp: int(time.time() * 1000) + 3_600_000})[tp] is None
        assert c.beginning_offsets([tp]) == {tp: 0}
        with pytest.raises(Exception, match="negative timestamp"):
            c.offsets_for_times({tp: -5})


def test_auto_offset_reset_none_names_the_partitions(mock_cluster, topic):
    name, _ = topic
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "none"}) as c:
        c.assign([TopicPartition(name, 2)])
        with pytest.raises(NoOffsetForPartitionError, match=f"{name}-2.*auto.offset.reset=none"):
            c.poll(1.0)


def test_out_of_range_position_resets(mock_cluster, topic):
    name, _ = topic
    tp = TopicPartition(name, 3)
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        c.seek(tp, 10_000_000)
        recs = drain(c, 1)
        assert recs and recs[0].offset == 0


def test_iteration_and_closed_consumer(mock_cluster, topic):
    name, _ = topic
    c = Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(name, 0)])
    first = next(iter(c))
    assert first.offset == 0
    c.close()
    with pytest.raises(Exception, match="closed"):
        c.poll(0)


def test_config_errors_up_front():
    with pytest.raises(ConfigError, match="did you mean 'group.id'"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.idd": "x"})


def test_tansu_assign_and_consume(tansu):
    create_topic(tansu, "tansu-cons", 2)
    produce(tansu, "tansu-cons", 500, partitions=2)
    with Consumer({"bootstrap.servers": tansu, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition("tansu-cons", 0), TopicPartition("tansu-cons", 1)])
        recs = drain(c, 500, timeout=15)
        assert len(recs) == 500
        assert sorted(int(r.value[:r.value.index(b"x")]) for r in recs) == list(range(500))
        tp = TopicPartition("tansu-cons", 0)
        mine = [r for r in recs if r.partition == 0]
        mid = mine[len(mine) // 2]
        got = c.offsets_for_times({tp: mid.timestamp})[tp]
        # Tansu answers at batch granularity (the batch's base offset and max timestamp)
        assert got is not None and got.offset <= mid.offset


def test_max_poll_records_hands_out_a_batch_in_parts_with_exact_positions(mock_cluster, topic):
    """poll() decodes only what it hands out: a few records of a batch, then the rest from the very
    next offset, the position always the next record to hand out, also across pause/resume and a
    seek into the middle of a batch."""
    name, _ = topic
    tp = TopicPartition(name, 2)
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest",
                   "max.poll.records": 7}) as c:
        c.assign([tp])
        end = c.end_offsets([tp])[tp]
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 30 and time.monotonic() < deadline:
            recs = c.poll(0.2)
            assert len(recs) <= 7
            got += recs
            if recs:
                assert c.position(tp) == recs[-1].offset + 1
        assert [r.offset for r in got] == list(range(len(got)))
        c.pause([tp])
        assert c.poll(0.2) == [] and c.position(tp) == len(got)
        c.resume([tp])
        nxt = drain(c, 1)
        assert nxt and nxt[0].offset == len(got) and c.position(tp) == nxt[-1].offset + 1
        c.seek(tp, end - 10)
        tail = drain(c, 10)
        assert [r.offset for r in tail] == list(range(end - 10, end)) and c.position(tp) == end


def test_a_poll_that_uses_up_buffered_answers_fetches_again_before_it_returns(mock_cluster):
    """A partition held back at its pipelining limit (two answers buffered, no Fetch in flight) is
    fetched again from inside the poll() that uses up one of its answers, so the broker works while
    that poll decodes the rest, not only once it has returned."""
    from kohort.client.producer import Producer
    create_topic(mock_cluster, "cons-refill", 1)     # the mock cluster may make more: partition 0 is read
    with Producer({"bootstrap.servers": mock_cluster, "linger.ms": 0}) as p:
        for i in range(6):                  # six batches of one record: one answer each below
            p.produce("cons-refill", b"r%d" % i, partition=0)
            p.flush()
    tp = TopicPartition("cons-refill", 0)
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest",
                   "max.partition.fetch.bytes": 1, "fetch.max.wait.ms": 500}) as c:
        c.assign([tp])
        first = []
        deadline = time.monotonic() + 10
        while not first and time.monotonic() < deadline:
            first = c.poll(0.2, max_records=1)
        assert [r.offset for r in first] == [0]
        f = c._fetcher
        while time.monotonic() < deadline:
            with f.lock:
                if len(f._buffer) >= 2 and not f._inflight:
                    break
            time.sleep(0.01)
        else:
            pytest.fail("the fetcher never reached its pipelining limit")
        got = f.collect(100)                # what poll() does before its own send_fetches()
        assert [r.offset for r in got][0] == 1 and len(got) >= 1
        with f.lock:
            assert f._inflight or f._buffer, "no Fetch was sent while the buffered answers were used up"


def test_an_answers_next_fetch_is_on_the_wire_before_poll_is_woken(mock_cluster):
    """When a Fetch answer is buffered and the partition is below its pipelining limit, the next Fetch
    is written (from the answer's callback on the I/O thread) before poll() is woken: a woken
    application thread would otherwise hold the fetcher's lock and the GIL while the I/O thread
    waits to send it."""
    import threading

    from kohort.client.producer import Producer
    from kohort.protocol.messages.fetch import FetchRequest
    create_topic(mock_cluster, "cons-order", 1)
    with Producer({"bootstrap.servers": mock_cluster, "linger.ms": 0}) as p:
        for i in range(4):                  # four batches of one record: one answer each below
            p.produce("cons-order", b"o%d" % i, partition=0)
            p.flush()
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest",
                   "max.partition.fetch.bytes": 1, "fetch.max.wait.ms": 500}) as c:
        f, net = c._fetcher, c._network
        seen = []       # at each wake-up of poll() for an answer: a Fetch written and unanswered?

        class Recording(threading.Condition):
            def notify_all(self):
                if threading.current_thread() is net._thread:
                    seen.append(any(h.request.API_KEY == FetchRequest.API_KEY for conn in list(net._conns.values())
                                    for h in conn.proto.in_flight_handles()))
                super().notify_all()
        f._cond = Recording(f.lock)
        c.assign([TopicPartition("cons-order", 0)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 4 and time.monotonic() < deadline:
            got += c.poll(0.2)
        assert [r.value for r in got] == [b"o0", b"o1", b"o2", b"o3"]
        # not every answer: one arriving at the pipelining limit sends none, and one read while
        # other work waits in the I/O thread's queue (metadata at start-up) has its Fetch queued
        # behind that work
        assert any(seen), seen


def test_an_answer_of_fetch_max_bytes_is_followed_by_a_fetch_for_the_room_left(mock_cluster):
    """Without poll(), the fetcher keeps a Fetch going while what is buffered stays below two answers'
    worth (2 x fetch.max.bytes), each Fetch asking for the room left: an answer that fills
    fetch.max.bytes is followed at once by the next Fetch, so the broker is not idle while the
    application decodes it."""
    from kohort.client.producer import Producer
    from kohort.protocol.records import build_batch
    batch = len(build_batch([(None, b"x" * 1000, None, int(time.time() * 1000))]))
    create_topic(mock_cluster, "cons-room", 2)
    with Producer({"bootstrap.servers": mock_cluster, "linger.ms": 0}) as p:
        for i in range(16):                 # eight batches of one 1000-byte record per partition
            p.produce("cons-room", b"x" * 1000, partition=i % 2)
            p.flush()
    # one batch per partition per answer: an answer holds two batches, fetch.max.bytes exactly
    with Consumer({"bootstrap.servers": mock_cluster, "auto.offset.reset": "earliest",
                   "max.partition.fetch.bytes": batch, "fetch.max.bytes": 2 * batch,
                   "fetch.max.wait.ms": 100}) as c:
        f = c._fetcher
        asked = []      # (max_bytes of the next Fetch or None, bytes buffered then)
        request_max_bytes = f._request_max_bytes

        def recording():        # called with the fetcher's lock held
            mb = request_max_bytes()
            asked.append((mb, sum(f._buffered_bytes.values())))
            return mb
        f._request_max_bytes = recording
        c.assign([TopicPartition("cons-room", 0), TopicPartition("cons-room", 1)])
        first = []
        deadline = time.monotonic() + 10
        while not first and time.monotonic() < deadline:
            first = c.poll(0.2, max_records=1)
        assert len(first) == 1
        while time.monotonic() < deadline:          # no poll() from here on
            with f.lock:
                if sum(f._buffered_bytes.values()) >= 4 * batch and not f._inflight:
                    break
            time.sleep(0.01)
        with f.lock:
            buffered = sum(f._buffered_bytes.values())
        # both partitions at their own limit (two answers' worth each), over fetch.max.bytes in all
        assert buffered == 4 * batch, (buffered, asked)
        assert all(mb == (min(2 * batch, 4 * batch - have) if 4 * batch - have >= batch else None)
                   for mb, have in asked), asked
        assert any(mb is not None and have >= 2 * batch for mb, have in asked), asked
