import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Share-group consumption for bench/share.py: CONSUMERS share consumers of GROUP (explicit
 * acknowledgement) read TOPIC until RECORDS distinct records were delivered; each poll's records
 * are accepted and committed with commitSync, whose duration is the acknowledgement latency.
 * Prints one JSON line: records, seconds, records/s, commitSync p50/p99/max in ms, polls,
 * records delivered more than once.
 *
 *   java -cp "$(tools/kafka/kafka.sh classpath)" tools/kafka/ShareBench.java BOOTSTRAP TOPIC GROUP CONSUMERS RECORDS
 */
public class ShareBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int consumers = Integer.parseInt(args[3]);
        long records = Long.parseLong(args[4]);
        Set<String> seen = ConcurrentHashMap.newKeySet();
        AtomicLong again = new AtomicLong(), polls = new AtomicLong();
        List<Long> commits = Collections.synchronizedList(new ArrayList<>());
        long deadline = System.nanoTime() + Duration.ofSeconds(300).toNanos();
        long start = System.nanoTime();
        AtomicLong done = new AtomicLong(0);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            Thread t = new Thread(() -> {
                Map<String, Object> c = new HashMap<>();
                c.put("bootstrap.servers", bootstrap);
                c.put("group.id", group);
                c.put("share.acknowledgement.mode", "explicit");
                try (KafkaShareConsumer<byte[], byte[]> sc =
                        new KafkaShareConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                    sc.subscribe(List.of(topic));
                    while (seen.size() < records && System.nanoTime() < deadline) {
                        var got = sc.poll(Duration.ofMillis(100));
                        if (got.isEmpty()) {
                            continue;
                        }
                        polls.incrementAndGet();
                        for (ConsumerRecord<byte[], byte[]> r : got) {
                            if (!seen.add(r.partition() + "@" + r.offset())) {
                                again.incrementAndGet();
                            }
                            sc.acknowledge(r, AcknowledgeType.ACCEPT);
                        }
                        long t0 = System.nanoTime();
                        sc.commitSync(Duration.ofSeconds(30));
                        commits.add(System.nanoTime() - t0);
                    }
                    done.compareAndSet(0, System.nanoTime());
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        double seconds = ((done.get() == 0 ? System.nanoTime() : done.get()) - start) / 1e9;
        List<Long> sorted = new ArrayList<>(commits);
        Collections.sort(sorted);
        System.out.printf("{\"records\": %d, \"seconds\": %.3f, \"records_per_sec\": %.1f, "
                + "\"commit_p50_ms\": %.2f, \"commit_p99_ms\": %.2f, \"commit_max_ms\": %.2f, "
                + "\"polls\": %d, \"delivered_again\": %d}%n",
                seen.size(), seconds, seen.size() / seconds, pct(sorted, 0.50), pct(sorted, 0.99),
                pct(sorted, 1.0), polls.get(), again.get());
    }

    static double pct(List<Long> sorted, double q) {
        if (sorted.isEmpty()) {
            return -1;
        }
        int i = (int) Math.min(sorted.size() - 1, Math.ceil(q * sorted.size()) - 1);
        return sorted.get(Math.max(0, i)) / 1e6;
    }
}
