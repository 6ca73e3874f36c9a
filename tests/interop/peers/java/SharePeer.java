// The share-group side of kohort's Java interop tests: Apache Kafka's own KafkaShareConsumer (KIP-932) as a
// member of a share group, driven by tests/helpers/peers.py's JavaSharePeer. It prints one JSON object per line on
// stdout and closes cleanly (releasing what it holds) when it reads the line "stop" on stdin.
// Compiled on first use by tests/helpers/peers.py (javac against .peers/kafka-lib, into a temporary folder).
//
//   java SharePeer --bootstrap B --topic T[,T2] --group G [--client-id ID]
//                  [--ack-mode explicit|implicit] [--acquire-mode batch_optimized|record_limit]
//                  [--max-poll-records N] [--commit sync|async|poll]
//                  [--fetch-min-bytes N] [--fetch-max-wait-ms MS]
//                  [--release SPEC] [--release-until N] [--reject SPEC] [--renew SPEC] [--hold SPEC]
//                  [--sleep-ms MS]
//
//   SPEC is "*" (every record) or a comma-separated list of PARTITION:OFFSET (any subscribed topic).
//   Explicit mode (the default) acknowledges every record of a poll: RELEASE for records of --release while
//   their delivery count is at most --release-until (default 1; a large value releases until the broker's
//   delivery count limit archives them), REJECT for records of --reject, RENEW (KIP-1222: keep the record,
//   its lock restarts, a later poll hands it out again) the first time a record of --renew is seen in this
//   process, ACCEPT for the rest. Records of
//   --hold are left unacknowledged: the peer acknowledges the others of that poll, then stops polling
//   and keeps its locks until they expire or it is stopped/killed. --sleep-ms waits that long after the
//   first poll that returned records before acknowledging them (so their locks can expire first).
//   --commit sync: commitSync() after each poll (default); async: commitAsync(); poll: the acknowledgements
//   ride on the next poll's ShareFetch. Implicit mode: the next poll ACCEPTs the previous batch.
//
//   events: started {client_id}
//           record {topic, partition, offset, delivery_count, ack: ACCEPT|RELEASE|REJECT|RENEW|HOLD|IMPLICIT}
//           acked {topic, partition, offsets, error}   -- the broker's answer, from the
//                                                        AcknowledgementCommitCallback (error null: done)
//           committed {results: {"topic-partition": null | error}}   -- commitSync's answer
//           holding {records}, error {error}, closed {records}, fatal {error}
//   Every event carries mono_ns: System.nanoTime() when it was printed (on Linux the clock of Python's
//   time.monotonic(), so the fault harness puts the peer's deliveries on its own timeline).
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class SharePeer {
    static final Object OUT = new Object();
    static final AtomicBoolean STOP = new AtomicBoolean(false);

    static String q(String s) {
        if (s == null) return "null";
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
            System.out.println("{\"event\":" + q(event) + ",\"mono_ns\":" + System.nanoTime()
                    + (body.isEmpty() ? "" : "," + body) + "}");
            System.out.flush();
        }
    }

    static Map<String, String> parse(String[] args) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) throw new IllegalArgumentException("unexpected argument " + a);
            String key = a.substring(2);
            if (i + 1 < args.length && !args[i + 1].startsWith("--")) m.put(key, args[++i]);
            else m.put(key, "true");
        }
        return m;
    }

    /** A record selection: "*" or PARTITION:OFFSET[,PARTITION:OFFSET...]; empty when not given. */
    static final class Spec {
        final boolean all;
        final Set<String> keys = new HashSet<>();

        Spec(String text) {
            all = "*".equals(text);
            if (text != null && !all) {
                for (String part : text.split(",")) {
                    String[] po = part.trim().split(":");
                    if (po.length != 2) throw new IllegalArgumentException("bad record spec " + part + " (PARTITION:OFFSET)");
                    keys.add(Integer.parseInt(po[0]) + ":" + Long.parseLong(po[1]));
                }
            }
        }

        boolean has(ConsumerRecord<?, ?> r) {
            return all || keys.contains(r.partition() + ":" + r.offset());
        }
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

    static void sleep(long ms) {
        try { Thread.sleep(ms); } catch (InterruptedException ignored) { }
    }

    public static void main(String[] args) {
        try {
            watchStdin();
            run(parse(args));
        } catch (Throwable e) {
            emit("fatal", "\"error\":" + q(e.toString()));
            System.exit(2);
        }
        System.exit(0);
    }

    static void run(Map<String, String> o) {
        String ackMode = o.getOrDefault("ack-mode", "explicit");
        if (!ackMode.equals("explicit") && !ackMode.equals("implicit"))
            throw new IllegalArgumentException("--ack-mode explicit|implicit");
        String commit = o.getOrDefault("commit", "sync");
        if (!Arrays.asList("sync", "async", "poll").contains(commit))
            throw new IllegalArgumentException("--commit sync|async|poll");
        Spec release = new Spec(o.get("release"));
        Spec reject = new Spec(o.get("reject"));
        Spec hold = new Spec(o.get("hold"));
        Spec renew = new Spec(o.get("renew"));
        Set<String> renewed = new HashSet<>();
        int releaseUntil = Integer.parseInt(o.getOrDefault("release-until", "1"));
        long sleepMs = Long.parseLong(o.getOrDefault("sleep-ms", "0"));
        String clientId = o.getOrDefault("client-id", "share-peer");

        Properties p = new Properties();
        p.put("bootstrap.servers", o.get("bootstrap"));
        p.put("group.id", o.get("group"));
        p.put("client.id", clientId);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("share.acknowledgement.mode", ackMode);
        if (o.containsKey("acquire-mode")) p.put("share.acquire.mode", o.get("acquire-mode"));
        if (o.containsKey("max-poll-records")) p.put("max.poll.records", o.get("max-poll-records"));
        if (o.containsKey("fetch-min-bytes")) p.put("fetch.min.bytes", o.get("fetch-min-bytes"));
        if (o.containsKey("fetch-max-wait-ms")) p.put("fetch.max.wait.ms", o.get("fetch-max-wait-ms"));

        long total = 0;
        boolean slept = false;
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p);
        try {
            c.setAcknowledgementCommitCallback((Map<TopicIdPartition, Set<Long>> offsets, Exception e) -> {
                for (Map.Entry<TopicIdPartition, Set<Long>> en : offsets.entrySet()) {
                    StringBuilder b = new StringBuilder();
                    for (Long off : new TreeSet<>(en.getValue())) {
                        if (b.length() > 0) b.append(',');
                        b.append(off);
                    }
                    emit("acked", "\"topic\":" + q(en.getKey().topic()) + ",\"partition\":" + en.getKey().partition()
                            + ",\"offsets\":[" + b + "],\"error\":" + (e == null ? "null" : q(e.toString())));
                }
            });
            c.subscribe(Arrays.asList(o.get("topic").split(",")));
            emit("started", "\"client_id\":" + q(clientId));
            boolean holding = false;
            while (!STOP.get()) {
                if (holding) {
                    sleep(100);
                    continue;
                }
                ConsumerRecords<String, String> rs;
                try {
                    rs = c.poll(Duration.ofMillis(200));
                } catch (org.apache.kafka.common.errors.WakeupException e) {
                    break;
                } catch (RuntimeException e) {
                    emit("error", "\"error\":" + q(e.toString()));
                    sleep(200);
                    continue;
                }
                if (rs.isEmpty()) continue;
                total += rs.count();
                if (sleepMs > 0 && !slept) {
                    slept = true;
                    sleep(sleepMs);
                }
                int held = 0;
                for (ConsumerRecord<String, String> r : rs) {
                    int dc = r.deliveryCount().map(Short::intValue).orElse(-1);
                    String ack;
                    if (ackMode.equals("implicit")) {
                        ack = "IMPLICIT";
                    } else if (hold.has(r)) {
                        ack = "HOLD";
                        held++;
                    } else if (renew.has(r) && renewed.add(r.topic() + "-" + r.partition() + ":" + r.offset())) {
                        ack = "RENEW";
                        c.acknowledge(r, AcknowledgeType.RENEW);
                    } else if (reject.has(r)) {
                        ack = "REJECT";
                        c.acknowledge(r, AcknowledgeType.REJECT);
                    } else if (release.has(r) && dc <= releaseUntil) {
                        ack = "RELEASE";
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                    } else {
                        ack = "ACCEPT";
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                    emit("record", "\"topic\":" + q(r.topic()) + ",\"partition\":" + r.partition() + ",\"offset\":"
                            + r.offset() + ",\"delivery_count\":" + dc + ",\"ack\":" + q(ack) + ",\"value\":" + q(r.value()));
                }
                if (ackMode.equals("explicit")) {
                    if (commit.equals("sync") || held > 0) {
                        Map<TopicIdPartition, Optional<KafkaException>> res = c.commitSync(Duration.ofSeconds(30));
                        StringBuilder b = new StringBuilder();
                        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> en : res.entrySet()) {
                            if (b.length() > 0) b.append(',');
                            b.append(q(en.getKey().topic() + "-" + en.getKey().partition())).append(':')
                                    .append(en.getValue().map(e -> q(e.toString())).orElse("null"));
                        }
                        emit("committed", "\"results\":{" + b + "}");
                    } else if (commit.equals("async")) {
                        c.commitAsync();
                    }
                }
                if (held > 0) {
                    holding = true;
                    emit("holding", "\"records\":" + held);
                }
            }
        } finally {
            c.close(Duration.ofSeconds(30));
        }
        emit("closed", "\"records\":" + total);
    }
}
