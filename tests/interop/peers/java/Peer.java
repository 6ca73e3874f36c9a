// The Java side of kohort's interop tests: Apache Kafka's own Java client (kafka-clients) acting as a
// group member or an idempotent producer, driven by tests/helpers/kafka_cluster.py's JavaPeer. It prints one
// JSON object per line on stdout (events) and stops cleanly when it reads the line "stop" on stdin.
// Compiled by `make peers` into .peers/java (javac against .peers/kafka-lib).
//
//   java Peer consume --bootstrap B --topic T[,T2] --group G [--protocol classic|consumer]
//                     [--assignor NAME] [--instance-id ID] [--commit sync|auto|none] [--from earliest|latest]
//                     [--max-records N] [--session-timeout-ms MS] [--max-poll-interval-ms MS]
//                     [--poll-sleep-ms MS] [--offsets]
//       events: started {protocol, mono_ns}, assigned/revoked/lost {partitions, mono_ns},
//               records {count, total, [offsets]}, committed {offsets}, commit_failed {error}, error {error},
//               closed {total}; mono_ns is System.nanoTime() when the callback ran (CLOCK_MONOTONIC on
//               Linux, the clock of Python's time.monotonic())
//   java Peer produce --bootstrap B --topic T --count N [--size BYTES] [--acks all] [--prefix P]
//       values are PREFIX-i; events: progress {acked, failed}, done {acked, failed, errors}
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class Peer {
    static final Object OUT = new Object();
    static final AtomicBoolean STOP = new AtomicBoolean(false);

    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static void emit(String event, String body) {
        synchronized (OUT) {
            System.out.println("{\"event\":" + q(event) + (body.isEmpty() ? "" : "," + body) + "}");
            System.out.flush();
        }
    }

    static String parts(Collection<TopicPartition> tps) {
        StringBuilder b = new StringBuilder("\"partitions\":[");
        boolean first = true;
        for (TopicPartition tp : tps) {
            if (!first) b.append(',');
            first = false;
            b.append(q(tp.topic() + "-" + tp.partition()));
        }
        return b.append(']').toString();
    }

    static String mono() {
        return ",\"mono_ns\":" + System.nanoTime();
    }

    static String offsets(Map<TopicPartition, Long> m) {
        StringBuilder b = new StringBuilder("{");
        boolean first = true;
        for (Map.Entry<TopicPartition, Long> e : m.entrySet()) {
            if (!first) b.append(',');
            first = false;
            b.append(q(e.getKey().topic() + "-" + e.getKey().partition())).append(':').append(e.getValue());
        }
        return b.append('}').toString();
    }

    static Map<String, String> parse(String[] args, int from) {
        Map<String, String> m = new HashMap<>();
        for (int i = from; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) throw new IllegalArgumentException("unexpected argument " + a);
            String key = a.substring(2);
            if (i + 1 < args.length && !args[i + 1].startsWith("--")) m.put(key, args[++i]);
            else m.put(key, "true");
        }
        return m;
    }

    static void watchStdin() {
        Thread t = new Thread(() -> {
            try (Scanner in = new Scanner(System.in)) {
                while (in.hasNextLine()) {
                    if (in.nextLine().trim().equals("stop")) break;
                }
            } catch (Exception ignored) {
            }
            STOP.set(true);
        });
        t.setDaemon(true);
        t.start();
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 0) throw new IllegalArgumentException("mode: consume | produce");
        Map<String, String> o = parse(args, 1);
        watchStdin();
        try {
            switch (args[0]) {
                case "consume": consume(o); break;
                case "produce": produce(o); break;
                default: throw new IllegalArgumentException("unknown mode " + args[0]);
            }
        } catch (Throwable e) {
            emit("fatal", "\"error\":" + q(e.toString()));
            System.exit(2);
        }
        System.exit(0);
    }

    static void consume(Map<String, String> o) {
        Properties p = new Properties();
        p.put("bootstrap.servers", o.get("bootstrap"));
        p.put("group.id", o.get("group"));
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("auto.offset.reset", o.getOrDefault("from", "earliest"));
        String commit = o.getOrDefault("commit", "sync");
        p.put("enable.auto.commit", commit.equals("auto") ? "true" : "false");
        String protocol = o.getOrDefault("protocol", "classic");
        p.put("group.protocol", protocol);
        if (o.containsKey("assignor")) {
            if (protocol.equals("consumer")) p.put("group.remote.assignor", o.get("assignor"));
            else p.put("partition.assignment.strategy", o.get("assignor"));
        }
        if (o.containsKey("instance-id")) p.put("group.instance.id", o.get("instance-id"));
        if (o.containsKey("session-timeout-ms")) p.put("session.timeout.ms", o.get("session-timeout-ms"));
        if (o.containsKey("max-poll-interval-ms")) p.put("max.poll.interval.ms", o.get("max-poll-interval-ms"));
        if (o.containsKey("isolation")) p.put("isolation.level", o.get("isolation"));
        long maxRecords = Long.parseLong(o.getOrDefault("max-records", "-1"));
        long pollSleep = Long.parseLong(o.getOrDefault("poll-sleep-ms", "0"));
        boolean withOffsets = o.containsKey("offsets");
        long total = 0;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(Arrays.asList(o.get("topic").split(",")), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> ps) { emit("revoked", parts(ps) + mono()); }
                public void onPartitionsAssigned(Collection<TopicPartition> ps) { emit("assigned", parts(ps) + mono()); }
                public void onPartitionsLost(Collection<TopicPartition> ps) { emit("lost", parts(ps) + mono()); }
            });
            emit("started", "\"protocol\":" + q(protocol) + mono());
            while (!STOP.get() && (maxRecords < 0 || total < maxRecords)) {
                ConsumerRecords<String, String> rs;
                try {
                    rs = c.poll(Duration.ofMillis(200));
                } catch (org.apache.kafka.common.errors.WakeupException e) {
                    break;
                } catch (RuntimeException e) {
                    emit("error", "\"error\":" + q(e.toString()));
                    continue;
                }
                if (rs.isEmpty()) continue;
                total += rs.count();
                Map<TopicPartition, Long> next = new HashMap<>();
                StringBuilder offs = new StringBuilder();
                for (ConsumerRecord<String, String> r : rs) {
                    next.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
                    if (withOffsets) {
                        if (offs.length() > 0) offs.append(',');
                        offs.append(q(r.topic() + "-" + r.partition() + "@" + r.offset()));
                    }
                }
                emit("records", "\"count\":" + rs.count() + ",\"total\":" + total
                        + (withOffsets ? ",\"offsets\":[" + offs + "]" : ""));
                if (pollSleep > 0) {
                    try { Thread.sleep(pollSleep); } catch (InterruptedException ignored) { }
                }
                if (commit.equals("sync")) {
                    Map<TopicPartition, OffsetAndMetadata> om = new HashMap<>();
                    next.forEach((tp, off) -> om.put(tp, new OffsetAndMetadata(off)));
                    try {
                        c.commitSync(om);
                        emit("committed", "\"offsets\":" + offsets(next));
                    } catch (RuntimeException e) {
                        emit("commit_failed", "\"error\":" + q(e.toString()));
                    }
                }
            }
            emit("closing", "\"total\":" + total);
        }
        emit("closed", "\"total\":" + total);
    }

    static void produce(Map<String, String> o) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", o.get("bootstrap"));
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("acks", o.getOrDefault("acks", "all"));
        p.put("enable.idempotence", o.getOrDefault("idempotence", "true"));
        p.put("linger.ms", o.getOrDefault("linger-ms", "5"));
        p.put("delivery.timeout.ms", o.getOrDefault("delivery-timeout-ms", "120000"));
        if (o.containsKey("compression")) p.put("compression.type", o.get("compression"));
        long count = Long.parseLong(o.getOrDefault("count", "1000"));
        int size = Integer.parseInt(o.getOrDefault("size", "0"));
        String prefix = o.getOrDefault("prefix", "v");
        String topic = o.get("topic");
        String pad = size > 0 ? "x".repeat(size) : "";
        AtomicLong acked = new AtomicLong(), failed = new AtomicLong();
        Set<String> errors = Collections.synchronizedSet(new TreeSet<>());
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(p)) {
            emit("started", "");
            for (long i = 0; i < count && !STOP.get(); i++) {
                String v = prefix + "-" + i + (pad.isEmpty() ? "" : "-" + pad);
                pr.send(new ProducerRecord<>(topic, null, v), (md, e) -> {
                    if (e == null) acked.incrementAndGet();
                    else { failed.incrementAndGet(); errors.add(e.getClass().getSimpleName()); }
                });
                if (i % 10000 == 9999) emit("progress", "\"acked\":" + acked.get() + ",\"failed\":" + failed.get());
            }
            pr.flush();
        }
        StringBuilder es = new StringBuilder();
        for (String e : errors) { if (es.length() > 0) es.append(','); es.append(q(e)); }
        emit("done", "\"acked\":" + acked.get() + ",\"failed\":" + failed.get() + ",\"errors\":[" + es + "]");
    }
}
