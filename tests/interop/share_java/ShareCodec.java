// Reads "<class> <version> <hex>" lines on stdin; parses each with Apache Kafka's own generated message
// class, and prints one JSON line per input: {"hex": <Kafka's re-serialization>, "json": <Kafka's JSON
// view of the parsed message>, "api_key": <its apiKey(), the record type of coordinator records>} or
// {"error": ...}. Used by tests/interop/test_share_kafka_codec.py.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.common.protocol.Readable;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.HexFormat;

public class ShareCodec {
    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.trim().split(" ");
            ObjectNode out = mapper.createObjectNode();
            try {
                Class<?> cls = Class.forName(parts[0]);
                short version = Short.parseShort(parts[1]);
                byte[] bytes = parts.length > 2 ? HexFormat.of().parseHex(parts[2]) : new byte[0];
                ByteBuffer buf = ByteBuffer.wrap(bytes);
                Message msg = (Message) cls.getConstructor(Readable.class, short.class)
                    .newInstance(new ByteBufferAccessor(buf), version);
                if (buf.remaining() != 0) throw new IllegalStateException(buf.remaining() + " bytes left over");
                ByteBuffer again = MessageUtil.toByteBufferAccessor(msg, version).buffer();
                if (again.position() != 0) again.flip();
                byte[] b = new byte[again.remaining()];
                again.get(b);
                out.put("hex", HexFormat.of().formatHex(b));
                if (msg instanceof org.apache.kafka.common.protocol.ApiMessage)
                    out.put("api_key", ((org.apache.kafka.common.protocol.ApiMessage) msg).apiKey());
                Class<?> conv = Class.forName(parts[0] + "JsonConverter");
                JsonNode json = (JsonNode) conv.getMethod("write", cls, short.class).invoke(null, msg, version);
                out.set("json", json);
            } catch (Throwable t) {
                Throwable c = t.getCause() != null ? t.getCause() : t;
                out.put("error", c.toString());
            }
            System.out.println(mapper.writeValueAsString(out));
            System.out.flush();
        }
    }
}
