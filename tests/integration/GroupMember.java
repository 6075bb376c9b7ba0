// A member of a Kafka consumer group for the mirror test (test_group_mirror.py): Kafka's own
// Java consumer subscribes to TOPIC with GROUP under PROTOCOL (consumer: KIP-848's protocol,
// the new group coordinator of Kafka 4; classic: the JoinGroup protocol), prints "joined"
// once it has an assignment, and polls until its stdin closes (the test ends it that way).
//
//   java -cp '.services/kafka/lib/*' tests/integration/GroupMember.java BOOTSTRAP TOPIC GROUP PROTOCOL

import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupMember {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        props.put("group.protocol", args[3]);
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) { }
            } catch (java.io.IOException e) { }
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[1]));
            boolean said = false;
            while (stdin.isAlive()) {
                consumer.poll(Duration.ofMillis(200));
                if (!said && !consumer.assignment().isEmpty()) {
                    System.out.println("joined " + consumer.assignment());
                    System.out.flush();
                    said = true;
                }
            }
        }
    }
}
