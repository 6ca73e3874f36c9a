// The Java KafkaProducer (Apache Kafka's own client) in bench/cases/txn.py's transactional rows.
//
//   java -cp '.peers/kafka-lib/*:bench/out/java' TxnBench BOOTSTRAP TOPIC RECORDS SIZE PER_TXN
//
// acks=all, linger.ms 5, a fresh transactional.id; initTransactions() before the clock, then
// beginTransaction / PER_TXN send() / commitTransaction repeated until RECORDS are committed. The
// client speaks transactions v2 (KIP-890) where the broker finalized transaction.version 2, else v1.
// Value = SIZE bytes (half random, half repetitive, as the Python benches).
// Prints "TXN_S <seconds> TXNS <count> SLOW <count>": SLOW counts the transactions that took 15 ms
// or more longer than the run's median one (begin to the return of commit).
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.util.Arrays;
import java.util.Properties;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicReference;

public class TxnBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int n = Integer.parseInt(args[2]), size = Integer.parseInt(args[3]), perTxn = Integer.parseInt(args[4]);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "bench-java-" + UUID.randomUUID().toString().substring(0, 8));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        byte[] value = new byte[size];
        new Random(7).nextBytes(value);
        Arrays.fill(value, size / 2, size, (byte) 'x');
        AtomicReference<Exception> failed = new AtomicReference<>();
        int txns = (n + perTxn - 1) / perTxn;
        long[] took = new long[txns];
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.partitionsFor(topic);
            producer.initTransactions();
            long t = System.nanoTime();
            int done = 0;
            for (int i = 0; i < txns; i++) {
                int k = Math.min(perTxn, n - done);
                long tb = System.nanoTime();
                producer.beginTransaction();
                for (int j = 0; j < k; j++) {
                    producer.send(new ProducerRecord<>(topic, null, value), (md, e) -> {
                        if (e != null) failed.compareAndSet(null, e);
                    });
                }
                producer.commitTransaction();
                took[i] = System.nanoTime() - tb;
                done += k;
            }
            double dt = (System.nanoTime() - t) / 1e9;
            if (failed.get() != null) {
                System.err.println("a send failed: " + failed.get());
                System.exit(1);
            }
            long[] sorted = took.clone();
            Arrays.sort(sorted);
            long limit = sorted[txns / 2] + 15_000_000L;
            int slow = 0;
            for (long x : took) if (x >= limit) slow++;
            System.out.println("TXN_S " + dt + " TXNS " + txns + " SLOW " + slow);
        }
    }
}
