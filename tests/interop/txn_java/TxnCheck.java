// Apache Kafka Java producer transactions against a broker (tests/interop/test_txn_clients.py compiles and runs it):
// abort, commit, zombie fencing by a second producer with the same transactional.id. JSON lines on stdout.
import java.util.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.errors.ProducerFencedException;

public class TxnCheck {
    static KafkaProducer<String, String> make(String bs, String tid) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("transactional.id", tid);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }
    public static void main(String[] a) throws Exception {
        String bs = a[0], topic = a[1];
        KafkaProducer<String, String> p = make(bs, "jcheck");
        p.initTransactions();
        p.beginTransaction();
        for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(topic, 0, null, "aborted-" + i)).get();
        p.abortTransaction();
        System.out.println("{\"aborted\": true}");
        p.beginTransaction();
        for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(topic, 0, null, "committed-" + i));
        p.commitTransaction();
        System.out.println("{\"committed\": true}");
        p.beginTransaction();
        p.send(new ProducerRecord<>(topic, 0, null, "zombie")).get();
        KafkaProducer<String, String> q = make(bs, "jcheck");
        q.initTransactions();
        try {
            p.commitTransaction();
            System.out.println("{\"zombie_commit\": \"succeeded\"}");
        } catch (ProducerFencedException e) {
            System.out.println("{\"zombie_commit\": \"fenced\"}");
        } catch (Exception e) {
            System.out.println("{\"zombie_commit\": \"" + e.getClass().getName() + "\"}");
        }
        p.close();
        q.beginTransaction();
        q.send(new ProducerRecord<>(topic, 0, null, "new-0"));
        q.commitTransaction();
        q.close();
        System.out.println("{\"done\": true}");
    }
}
