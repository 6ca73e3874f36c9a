// The Java KafkaConsumer (Apache Kafka's own client) as a group member for bench/cases/groups.py.
//
//   java -cp '.peers/kafka-lib/*:bench/out/java' GroupBench first  BOOTSTRAP TOPIC GROUP
//   java -cp '.peers/kafka-lib/*:bench/out/java' GroupBench member BOOTSTRAP TOPIC GROUP SESSION_MS HEARTBEAT_MS
//
// first: a consumer (constructed before the clock starts) subscribes at t and polls (50 ms) until a
// record comes; prints "FIRST <ms>".
// member: the same JSON events as groups.py's Python member() (ready, assignment on every change,
// first record of a partition since it was assigned, leaving, closed), each with "t" from
// System.nanoTime() -- CLOCK_MONOTONIC on Linux, the clock of Python's time.monotonic(); a line
// "leave" on stdin makes it close() (LeaveGroup). Default consumer configs otherwise (classic
// protocol, range + cooperative-sticky assignors), auto.offset.reset=earliest.
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;

public class GroupBench {
    static void emit(String body) {
        double t = System.nanoTime() / 1e9;
        System.out.println("{" + body + (body.isEmpty() ? "" : ", ") + "\"t\": " + t + "}");
        System.out.flush();
    }

    static Properties props(String bootstrap, String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return p;
    }

    static List<Integer> partitions(Set<TopicPartition> tps) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        Collections.sort(out);
        return out;
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2], group = args[3];
        if (mode.equals("first")) {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props(bootstrap, group))) {
                long t = System.nanoTime();
                c.subscribe(Collections.singletonList(topic));
                while (System.nanoTime() - t < 60_000_000_000L) {
                    if (!c.poll(Duration.ofMillis(50)).isEmpty()) {
                        System.out.println("FIRST " + (System.nanoTime() - t) / 1e6);
                        return;
                    }
                }
                System.out.println("NONE");
            }
            return;
        }
        if (!mode.equals("member")) throw new IllegalArgumentException("mode must be first or member: " + mode);
        Properties p = props(bootstrap, group);
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, args[4]);
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, args[5]);
        AtomicBoolean leave = new AtomicBoolean();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("leave")) {
                        leave.set(true);
                        return;
                    }
                }
            } catch (Exception e) {
                // stdin closed: the parent is gone; the parent kills this process anyway
            }
        });
        reader.setDaemon(true);
        reader.start();
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
        c.subscribe(Collections.singletonList(topic));
        emit("\"ev\": \"ready\"");
        List<Integer> current = new ArrayList<>();
        Set<Integer> seen = new HashSet<>();
        while (!leave.get()) {
            ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(50));
            List<Integer> a = partitions(c.assignment());
            if (!a.equals(current)) {
                current = a;
                seen.retainAll(a);
                emit("\"ev\": \"assignment\", \"parts\": " + a);
            }
            for (ConsumerRecord<byte[], byte[]> r : recs) {
                int q = r.partition();
                if (current.contains(q) && seen.add(q)) emit("\"ev\": \"first\", \"p\": " + q);
            }
        }
        emit("\"ev\": \"leaving\"");
        c.close();
        emit("\"ev\": \"closed\"");
    }
}
