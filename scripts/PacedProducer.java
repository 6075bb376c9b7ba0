// The latency bench's load: pre-encoded (key, value) pairs sent to Kafka at a steady rate by
// Kafka's own Java client. kafka-python spends about 30 us of CPU a record to send; on the
// bench's two cores that is over half a core at half the job's maximum rate, taken from the job
// it measures. Production producers run elsewhere, so the bench's should cost next to nothing.
//
// Run as a single source file (JDK 11+), with the Kafka distribution's jars on the classpath:
//   java -cp '.services/kafka/lib/*' scripts/PacedProducer.java BOOTSTRAP TOPIC RATE PAIRS_FILE
// PAIRS_FILE holds, per record, a big-endian int32 key length, the key, an int32 value length
// and the value. Keyed records go to the partition Kafka's default partitioner picks (murmur2
// of the key), the same partition kafka-python's default picks.

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.FileInputStream;
import java.io.IOException;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class PacedProducer {
    private static final double PACE_S = 0.005;  // sleep only when this far ahead

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: PacedProducer BOOTSTRAP TOPIC RATE PAIRS_FILE");
            System.exit(2);
        }
        String topic = args[1];
        double rate = Double.parseDouble(args[2]);
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("enable.idempotence", "true");
        props.put("acks", "all");
        props.put("linger.ms", "20");
        props.put("batch.size", Integer.toString(512 * 1024));
        props.put("max.request.size", Integer.toString(2 * 1024 * 1024));
        AtomicReference<Exception> failed = new AtomicReference<>();
        long sent = 0;
        long started = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                props, new ByteArraySerializer(), new ByteArraySerializer());
             DataInputStream in = new DataInputStream(
                     new BufferedInputStream(new FileInputStream(args[3]), 1 << 20))) {
            while (failed.get() == null) {
                byte[] key = read(in);
                if (key == null) {
                    break;
                }
                byte[] value = read(in);
                producer.send(new ProducerRecord<>(topic, key, value), (meta, error) -> {
                    if (error != null) {
                        failed.compareAndSet(null, error);
                    }
                });
                sent++;
                double ahead = sent / rate - (System.nanoTime() - started) / 1e9;
                if (ahead > PACE_S) {
                    Thread.sleep((long) (ahead * 1000));
                }
            }
            producer.flush();
        }
        if (failed.get() != null) {
            System.err.println("producing to " + topic + " failed: " + failed.get());
            System.exit(1);
        }
        double took = (System.nanoTime() - started) / 1e9;
        System.out.printf("sent %d records in %.1fs (%.0f/s)%n", sent, took, sent / took);
    }

    /** One length-prefixed field, or null at the end of the file. */
    private static byte[] read(DataInputStream in) throws IOException {
        int length;
        try {
            length = in.readInt();
        } catch (EOFException end) {
            return null;
        }
        byte[] bytes = new byte[length];
        in.readFully(bytes);
        return bytes;
    }
}
