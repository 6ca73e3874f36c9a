// The Java KafkaConsumer (Apache Kafka's own client) as a column of bench/cases/consumer.py.
//
//   java -cp '.peers/kafka-lib/*:bench/out/java' ConsumeBench BOOTSTRAP TOPIC PARTITIONS TOTAL
//
// Explicit assignment of partitions 0..PARTITIONS-1 from the beginning, no group, each value
// touched; prints the records/s from just after assign() to the last record, as the Python
// clients of bench_consumer.py measure it (max.poll.records 10000, as kohort's bench run), and the
// seconds from assign() to the first record (FIRST_S: the client's start-up inside that time).
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

public class ConsumeBench {
    public static void main(String[] args) {
        String bootstrap = args[0], topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long total = Long.parseLong(args[3]);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            long t = System.nanoTime();
            c.assign(tps);
            c.seekToBeginning(tps);
            long n = 0, bytes = 0, first = 0;
            while (n < total) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofSeconds(1));
                if (first == 0 && !recs.isEmpty()) first = System.nanoTime();
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    n++;
                    if (r.value() != null) bytes += r.value().length;
                }
            }
            double dt = (System.nanoTime() - t) / 1e9;
            System.out.println("RATE " + (n / dt) + " BYTES " + bytes + " FIRST_S " + (first - t) / 1e9);
        }
    }
}
