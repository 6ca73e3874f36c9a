// Java's KafkaShareConsumer (Apache Kafka's own client, KIP-932) for bench/cases/share.py.
//
//   java -cp '.peers/kafka-lib/*:bench/out/java' ShareBench members   BOOTSTRAP TOPIC GROUP N
//   java -cp '.peers/kafka-lib/*:bench/out/java' ShareBench redeliver BOOTSTRAP TOPIC GROUP ROUNDS
//
// members: N implicit-mode share consumers, each on a thread of its own, constructed and subscribed,
// then "READY"; they start polling at the line "go" on stdin and stop at "stop" (each closes, which
// acknowledges its last batch). Prints "N <records> <t_first> <t_last>" at most every 50 ms while the
// count grows and "CLOSED <records> <t_first> <t_last>" once all are closed -- the same lines as
// share.py's Python member, times from System.nanoTime() (CLOCK_MONOTONIC on Linux, the clock of
// Python's time.monotonic()).
// redeliver: one explicit-mode share consumer; each round a KafkaProducer sends one record, the
// consumer polls it, and the time from acknowledge(RELEASE) + commitSync() until poll() returns the same
// offset again is taken; the record is then accepted. Round 0 is not timed. Prints "SAMPLES <ms>...".
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

public class ShareBench {
    static double now() {
        return System.nanoTime() / 1e9;
    }

    static KafkaShareConsumer<byte[], byte[]> consumer(String bootstrap, String group, String ackMode) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", ackMode);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        return new KafkaShareConsumer<>(p);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2], group = args[3];
        int n = Integer.parseInt(args[4]);
        if (mode.equals("members")) {
            members(bootstrap, topic, group, n);
        } else if (mode.equals("redeliver")) {
            redeliver(bootstrap, topic, group, n);
        } else {
            throw new IllegalArgumentException("mode must be members or redeliver, got " + mode);
        }
    }

    static void members(String bootstrap, String topic, String group, int n) throws Exception {
        AtomicLong records = new AtomicLong();
        AtomicLong firstNs = new AtomicLong(Long.MAX_VALUE);
        AtomicLong lastNs = new AtomicLong(0);
        AtomicBoolean stop = new AtomicBoolean(false);
        CountDownLatch go = new CountDownLatch(1);
        CountDownLatch subscribed = new CountDownLatch(n);
        CountDownLatch closed = new CountDownLatch(n);
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
        for (int i = 0; i < n; i++) {
            Thread t = new Thread(() -> {
                boolean counted = false;
                try (KafkaShareConsumer<byte[], byte[]> c = consumer(bootstrap, group, "implicit")) {
                    c.subscribe(Collections.singletonList(topic));
                    subscribed.countDown();
                    counted = true;
                    go.await();
                    while (!stop.get()) {
                        int got = c.poll(Duration.ofMillis(100)).count();
                        if (got > 0) {
                            long t1 = System.nanoTime();
                            firstNs.accumulateAndGet(t1, Math::min);
                            lastNs.accumulateAndGet(t1, Math::max);
                            records.addAndGet(got);
                        }
                    }
                } catch (Throwable e) {
                    failures.add(e);
                    if (!counted) subscribed.countDown();     // READY comes, then the failure is reported
                } finally {
                    closed.countDown();
                }
            });
            t.setDaemon(true);
            t.start();
            threads.add(t);
        }
        subscribed.await();
        if (!failures.isEmpty()) throw new RuntimeException(failures.get(0));
        System.out.println("READY");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        Thread reader = new Thread(() -> {
            try {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("go")) go.countDown();
                    if (line.trim().equals("stop")) break;
                }
            } catch (Exception e) {
                failures.add(e);
            }
            go.countDown();
            stop.set(true);
        });
        reader.setDaemon(true);
        reader.start();
        go.await();
        long reported = 0;
        while (!stop.get()) {
            long got = records.get();
            if (got != reported) {
                line("N", got, firstNs.get(), lastNs.get());
                reported = got;
            }
            if (!failures.isEmpty()) throw new RuntimeException(failures.get(0));
            Thread.sleep(50);
        }
        closed.await();
        if (!failures.isEmpty()) throw new RuntimeException(failures.get(0));
        line("CLOSED", records.get(), firstNs.get(), lastNs.get());
    }

    static void line(String what, long records, long firstNs, long lastNs) {
        double first = records == 0 ? 0.0 : firstNs / 1e9;
        double last = records == 0 ? 0.0 : lastNs / 1e9;
        System.out.println(what + " " + records + " " + first + " " + last);
        System.out.flush();
    }

    static ConsumerRecord<byte[], byte[]> pollFor(KafkaShareConsumer<byte[], byte[]> c, long offset) {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                if (offset < 0 || r.offset() == offset) return r;
                throw new IllegalStateException("offset " + r.offset() + " delivered while waiting for " + offset);
            }
        }
        throw new IllegalStateException("no record within 30 s (waiting for offset " + offset + ")");
    }

    static void commit(KafkaShareConsumer<byte[], byte[]> c) {
        Map<TopicIdPartition, Optional<KafkaException>> res = c.commitSync(Duration.ofSeconds(30));
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : res.entrySet()) {
            if (e.getValue().isPresent()) throw new IllegalStateException("commitSync " + e.getKey() + ": " + e.getValue().get());
        }
    }

    static void redeliver(String bootstrap, String topic, String group, int rounds) throws Exception {
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("linger.ms", "0");
        pp.put("key.serializer", ByteArraySerializer.class.getName());
        pp.put("value.serializer", ByteArraySerializer.class.getName());
        byte[] value = new byte[100];
        StringBuilder out = new StringBuilder("SAMPLES");
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(pp);
             KafkaShareConsumer<byte[], byte[]> c = consumer(bootstrap, group, "explicit")) {
            c.subscribe(Collections.singletonList(topic));
            for (int i = 0; i <= rounds; i++) {
                prod.send(new ProducerRecord<>(topic, 0, null, value)).get();
                ConsumerRecord<byte[], byte[]> r = pollFor(c, -1);
                long t0 = System.nanoTime();
                c.acknowledge(r, AcknowledgeType.RELEASE);
                commit(c);
                ConsumerRecord<byte[], byte[]> again = pollFor(c, r.offset());
                long t1 = System.nanoTime();
                c.acknowledge(again, AcknowledgeType.ACCEPT);
                commit(c);
                if (i > 0) out.append(' ').append((t1 - t0) / 1e6);
            }
        }
        System.out.println(out);
        System.out.flush();
    }
}
