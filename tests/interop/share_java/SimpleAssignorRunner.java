// Runs Apache Kafka's share-group SimpleAssignor on scenarios read as JSON lines on stdin:
//   {"members": {"<id>": {"topics": ["<base64 topic id>", ...], "current": {"<topic id>": [p, ...]}}},
//    "partitions": {"<topic id>": <count>}, "assignable": {"<topic id>": [p, ...]}}
// and prints one JSON line per scenario: {"<member id>": {"<topic id>": [p, ...]}} or {"error": ...}.
// Used by tests/interop/test_share_kafka_codec.py to compare kohort's simple assignor with Kafka's.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.GroupSpec;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberSubscription;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.SimpleAssignor;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;

public class SimpleAssignorRunner {
    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            ObjectNode out = mapper.createObjectNode();
            try {
                JsonNode sc = mapper.readTree(line);
                Map<String, Set<Uuid>> subs = new LinkedHashMap<>();
                Map<String, Map<Uuid, Set<Integer>>> current = new LinkedHashMap<>();
                for (Iterator<Map.Entry<String, JsonNode>> it = sc.get("members").fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> e = it.next();
                    Set<Uuid> topics = new HashSet<>();
                    e.getValue().get("topics").forEach(t -> topics.add(Uuid.fromString(t.asText())));
                    subs.put(e.getKey(), topics);
                    current.put(e.getKey(), partitionMap(e.getValue().get("current")));
                }
                Map<Uuid, Integer> counts = new HashMap<>();
                sc.get("partitions").fields().forEachRemaining(e -> counts.put(Uuid.fromString(e.getKey()), e.getValue().asInt()));
                Map<Uuid, Set<Integer>> assignable = partitionMap(sc.get("assignable"));
                Set<Set<Uuid>> distinct = new HashSet<>(subs.values());
                SubscriptionType type = distinct.size() <= 1 ? SubscriptionType.HOMOGENEOUS : SubscriptionType.HETEROGENEOUS;
                GroupSpec spec = new GroupSpec() {
                    public Collection<String> memberIds() { return subs.keySet(); }
                    public SubscriptionType subscriptionType() { return type; }
                    public boolean isPartitionAssigned(Uuid t, int p) {
                        return current.values().stream().anyMatch(a -> a.getOrDefault(t, Set.of()).contains(p));
                    }
                    public boolean isPartitionAssignable(Uuid t, int p) { return assignable.getOrDefault(t, Set.of()).contains(p); }
                    public MemberSubscription memberSubscription(String m) {
                        return new MemberSubscription() {
                            public Optional<String> rackId() { return Optional.empty(); }
                            public Optional<String> instanceId() { return Optional.empty(); }
                            public Set<Uuid> subscribedTopicIds() { return subs.get(m); }
                        };
                    }
                    public MemberAssignment memberAssignment(String m) { return () -> current.get(m); }
                };
                SubscribedTopicDescriber describer = new SubscribedTopicDescriber() {
                    public int numPartitions(Uuid t) { return counts.getOrDefault(t, -1); }
                    public Set<String> racksForPartition(Uuid t, int p) { return Set.of(); }
                };
                GroupAssignment result = new SimpleAssignor().assign(spec, describer);
                for (Map.Entry<String, MemberAssignment> e : result.members().entrySet()) {
                    ObjectNode m = out.putObject(e.getKey());
                    for (Map.Entry<Uuid, Set<Integer>> tp : e.getValue().partitions().entrySet()) {
                        if (tp.getValue().isEmpty()) continue;
                        ArrayNode ps = m.putArray(tp.getKey().toString());
                        new TreeSet<>(tp.getValue()).forEach(ps::add);
                    }
                }
            } catch (Throwable t) {
                out.removeAll();
                out.put("error", t.toString());
            }
            System.out.println(mapper.writeValueAsString(out));
            System.out.flush();
        }
    }

    private static Map<Uuid, Set<Integer>> partitionMap(JsonNode node) {
        Map<Uuid, Set<Integer>> out = new HashMap<>();
        if (node == null) return out;
        node.fields().forEachRemaining(e -> {
            Set<Integer> ps = new HashSet<>();
            e.getValue().forEach(p -> ps.add(p.asInt()));
            out.put(Uuid.fromString(e.getKey()), ps);
        });
        return out;
    }
}
