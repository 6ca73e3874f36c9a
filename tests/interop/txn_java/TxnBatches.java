// Apache Kafka's Java producer with several batches in flight per transaction
// (tests/interop/test_txn_clients.py compiles and runs it):
//
//   java -cp ... TxnBatches BOOTSTRAP TOPIC TRANSACTIONS RECORDS_PER_TXN
//
// max.in.flight.requests.per.connection 5, linger.ms 5, 2 KiB batches: each transaction spans many
// Produce requests, and the next transaction's first ones reach the broker while the previous one's
// markers are being written. JSON lines on stdout: {"committed": n} then {"done": true}, or
// {"failed": "<exception>"} with exit status 1.
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnBatches {
    public static void main(String[] a) {
        String bootstrap = a[0], topic = a[1];
        int txns = Integer.parseInt(a[2]), perTxn = Integer.parseInt(a[3]);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "batches-" + topic);
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "2048");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        AtomicReference<Exception> failed = new AtomicReference<>();
        int committed = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (int t = 0; t < txns; t++) {
                producer.beginTransaction();
                for (int i = 0; i < perTxn; i++) {
                    producer.send(new ProducerRecord<>(topic, null, String.format("t%d-%05d-%060d", t, i, 0)),
                                  (md, e) -> { if (e != null) failed.compareAndSet(null, e); });
                }
                producer.commitTransaction();
                committed++;
            }
        } catch (Exception e) {
            failed.compareAndSet(null, e);
        }
        System.out.println("{\"committed\": " + committed + "}");
        if (failed.get() != null) {
            System.out.println("{\"failed\": \"" + failed.get().toString().replace("\"", "'").replace("\n", " ") + "\"}");
            System.exit(1);
        }
        System.out.println("{\"done\": true}");
    }
}
