// The Java KafkaProducer (Apache Kafka's own client) as the producing half of bench/cases/broker.py's
// Java rows.
//
//   java -cp '.peers/kafka-lib/*:bench/out/java' ProduceBench BOOTSTRAP TOPIC RECORDS SIZE PARTITIONS BATCH_SIZE \
//        [COMPRESSION [keys|null]]
//
// acks=all, idempotent, linger.ms 5, the given batch.size (0: the client's default, 16384) and
// compression.type (default none); key = the record's index (or null keys), value = SIZE bytes (half
// random, half repetitive, as the Python benches); records go round-robin over the partitions.
// Used by bench/cases/broker.py's Java rows (bench_broker.run_one_java) and the producer section's
// java column (bench_producer.run_java).
// Prints "PRODUCE_S <seconds>" from the first send() to the end of flush(), with every send
// acknowledged (a failed send exits non-zero).
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

public class ProduceBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int n = Integer.parseInt(args[2]), size = Integer.parseInt(args[3]);
        int partitions = Integer.parseInt(args[4]), batchSize = Integer.parseInt(args[5]);
        String compression = args.length > 6 ? args[6] : "none";
        boolean keys = args.length <= 7 || !args[7].equals("null");
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        if (batchSize > 0) p.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(batchSize));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Long.toString(256L << 20));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        byte[] value = new byte[size];
        new Random(7).nextBytes(value);
        Arrays.fill(value, size / 2, size, (byte) 'x');
        AtomicLong acked = new AtomicLong();
        AtomicReference<Exception> failed = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.partitionsFor(topic);          // metadata before the clock, as librdkafka has it too
            long t = System.nanoTime();
            for (int i = 0; i < n; i++) {
                byte[] key = keys ? Integer.toString(i).getBytes(StandardCharsets.US_ASCII) : null;
                producer.send(new ProducerRecord<>(topic, i % partitions, key, value), (md, e) -> {
                    if (e != null) failed.compareAndSet(null, e);
                    else acked.incrementAndGet();
                });
            }
            producer.flush();
            double dt = (System.nanoTime() - t) / 1e9;
            if (failed.get() != null || acked.get() != n) {
                System.err.println("acked " + acked.get() + " of " + n + ": " + failed.get());
                System.exit(1);
            }
            System.out.println("PRODUCE_S " + dt);
        }
    }
}
