// A Java consumer (kafka-clients 4.1) that measures end-to-end latency of the records `weir
// perf` produces: their first 8 bytes are the send time in microseconds since the epoch
// (little-endian), as `weir perf`'s own consumer reads them. For a consumer of many
// partitions with the Java client, which uses fetch sessions (KIP-227) where librdkafka, the
// consumer of `weir perf`, has none.
//
//   kafka.sh tool tools/kafka/EndToEndConsumer.java BOOTSTRAP TOPIC WARMUP_S DURATION_S
//
// Subscribes as a fresh group from the latest offsets, polls through the warm-up, then
// records the latency of every record received during the measured period and prints one
// line: records, polls, p50, p99, p99.9 and max in milliseconds.
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.UUID;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class EndToEndConsumer {
    public static void main(String[] args) {
        if (args.length != 4) {
            System.err.println("usage: EndToEndConsumer BOOTSTRAP TOPIC WARMUP_S DURATION_S");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "e2e-" + UUID.randomUUID());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        long warmupEnd = System.nanoTime() + Long.parseLong(args[2]) * 1_000_000_000L;
        long end = warmupEnd + Long.parseLong(args[3]) * 1_000_000_000L;
        long[] lat = new long[1 << 20];
        int n = 0;
        long polls = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(args[1]));
            while (System.nanoTime() < end) {
                ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(100));
                boolean measuring = System.nanoTime() >= warmupEnd;
                if (measuring) {
                    polls++;
                }
                java.time.Instant now = java.time.Instant.now();
                long nowUs = now.getEpochSecond() * 1_000_000L + now.getNano() / 1000;
                for (ConsumerRecord<byte[], byte[]> r : rs) {
                    byte[] v = r.value();
                    if (!measuring || v == null || v.length < 8) {
                        continue;
                    }
                    long sent = ByteBuffer.wrap(v, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
                    if (n == lat.length) {
                        lat = Arrays.copyOf(lat, lat.length * 2);
                    }
                    lat[n++] = nowUs - sent;
                }
            }
        }
        Arrays.sort(lat, 0, n);
        System.out.printf("records %d polls %d e2e_ms p50 %.1f p99 %.1f p99.9 %.1f max %.1f%n",
                n, polls, at(lat, n, 0.50), at(lat, n, 0.99), at(lat, n, 0.999),
                n == 0 ? 0.0 : lat[n - 1] / 1000.0);
    }

    static double at(long[] sorted, int n, double q) {
        if (n == 0) {
            return 0.0;
        }
        return sorted[Math.min(n - 1, (int) (q * n))] / 1000.0;
    }
}
