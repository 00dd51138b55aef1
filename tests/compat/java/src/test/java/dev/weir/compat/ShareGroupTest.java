package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Share groups (KIP-932) with Kafka 4.4's {@code KafkaShareConsumer}, against Weir, or against
 * Apache Kafka 4.4 with {@code WEIR_TEST_BROKER=kafka} (its broker minimum lock duration lowered
 * to 1 s so that lock expiry takes seconds, as Weir's group config allows):
 * <ul>
 *   <li>three consumers of one group on a two-partition topic: every record is delivered to one
 *       consumer at a time and accepted exactly once; at least two consumers get records;</li>
 *   <li>explicit acknowledgement: RELEASE gives a record back (delivered again, delivery count
 *       2), REJECT archives it (never delivered again), ACCEPT is final;</li>
 *   <li>a lock that expires (group {@code share.record.lock.duration.ms=2000}) hands the record
 *       to another consumer with delivery count 2;</li>
 *   <li>{@code share.delivery.count.limit=2}: a record released twice is archived, the next
 *       record still comes;</li>
 *   <li>a share consumer killed (its JVM, SIGKILL) holding records: its records go to another
 *       consumer long before their locks would expire (30 s), with delivery count 2;</li>
 *   <li>{@code share.isolation.level=read_committed}: an aborted transaction's records are never
 *       delivered (read_uncommitted: they are);</li>
 *   <li>Kafka 4.4's {@code kafka-share-groups}: --list, --describe (start offsets, state),
 *       --reset-offsets --to-earliest --execute (every record delivered afresh),
 *       --delete-offsets, --delete.</li>
 * </ul>
 * Each group is told {@code share.auto.offset.reset=earliest} through
 * {@code Admin.incrementalAlterConfigs} on a GROUP resource, as Kafka's tools do.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ShareGroupTest {
    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.clusterMode()
                ? Target.start("ShareGroupTest")
                : Broker.start("ShareGroupTest", b -> Map.of(),
                        b -> Map.of("group.share.min.record.lock.duration.ms", "1000"));
        admin = Clients.admin(broker);
    }

    @AfterAll
    static void stop() throws Exception {
        try {
            if (admin != null) {
                admin.close(Duration.ofSeconds(10));
            }
        } finally {
            if (broker != null) {
                broker.close();
            }
        }
    }

    /** Sets group configs (share.auto.offset.reset=earliest and {@code more}). */
    private static void configure(String group, Map<String, String> more) throws Exception {
        List<AlterConfigOp> ops = new ArrayList<>();
        ops.add(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET));
        more.forEach((k, v) -> ops.add(new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET)));
        ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
        admin.incrementalAlterConfigs(Map.of(r, ops)).all().get(30, TimeUnit.SECONDS);
    }

    static KafkaShareConsumer<String, String> consumer(String group, boolean explicit) {
        return consumer(broker.bootstrap(), group, explicit);
    }

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group, boolean explicit) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        return new KafkaShareConsumer<>(c, new StringDeserializer(), new StringDeserializer());
    }

    private static void produce(String topic, int partitions, int from, int to) throws Exception {
        try (KafkaProducer<String, String> p = Clients.producer(broker)) {
            for (int i = from; i < to; i++) {
                p.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i));
            }
            p.flush();
        }
    }

    private static String key(ConsumerRecord<String, String> r) {
        return r.partition() + "@" + r.offset();
    }

    private static short deliveries(ConsumerRecord<String, String> r) {
        return r.deliveryCount().orElse((short) -1);
    }

    @Test
    void everyRecordGoesToOneConsumerAndIsAcceptedOnce() throws Exception {
        String topic = Clients.unique("share-many");
        String group = Clients.unique("sg-many");
        Clients.createTopic(admin, topic, 2);
        configure(group, Map.of());
        int n = 3000;
        Map<String, List<String>> seen = new ConcurrentHashMap<>();
        Map<Integer, Integer> byConsumer = new ConcurrentHashMap<>();
        ExecutorService pool = Executors.newFixedThreadPool(3);
        // Every member in the group before there are records, so that they compete for them (a
        // member alone would take them all).
        java.util.concurrent.CyclicBarrier joined = new java.util.concurrent.CyclicBarrier(4);
        try {
            List<Future<?>> runs = new ArrayList<>();
            for (int c = 0; c < 3; c++) {
                int id = c;
                runs.add(pool.submit(() -> {
                    try (KafkaShareConsumer<String, String> sc = consumer(group, false)) {
                        sc.subscribe(List.of(topic));
                        sc.poll(Duration.ofMillis(1000));
                        joined.await(60, TimeUnit.SECONDS);
                        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
                        while (seen.size() < n && System.nanoTime() < deadline) {
                            for (ConsumerRecord<String, String> r : sc.poll(Duration.ofMillis(500))) {
                                seen.computeIfAbsent(key(r), k -> java.util.Collections.synchronizedList(new ArrayList<>()))
                                        .add(id + ":" + deliveries(r));
                                byConsumer.merge(id, 1, Integer::sum);
                            }
                        }
                        sc.commitSync(Duration.ofSeconds(10));
                    }
                    return null;
                }));
            }
            joined.await(60, TimeUnit.SECONDS);
            produce(topic, 2, 0, n);
            for (Future<?> f : runs) {
                f.get(120, TimeUnit.SECONDS);
            }
        } finally {
            pool.shutdownNow();
        }
        assertEquals(n, seen.size(), "every record delivered");
        Map<String, List<String>> twice = new TreeMap<>();
        seen.forEach((k, v) -> {
            if (v.size() != 1) {
                twice.put(k, v);
            }
        });
        assertTrue(twice.isEmpty(), "records delivered more than once (consumer:delivery): " + twice);
        assertTrue(byConsumer.size() >= 2, "records reached only " + byConsumer);
        // All accepted: a new consumer of the group gets nothing more.
        try (KafkaShareConsumer<String, String> sc = consumer(group, false)) {
            sc.subscribe(List.of(topic));
            int more = 0;
            for (int i = 0; i < 6; i++) {
                more += sc.poll(Duration.ofMillis(500)).count();
            }
            assertEquals(0, more, "records delivered after all were accepted");
        }
    }

    @Test
    void releasedRecordsComeBackAndRejectedOnesDoNot() throws Exception {
        String topic = Clients.unique("share-ack");
        String group = Clients.unique("sg-ack");
        Clients.createTopic(admin, topic, 1);
        configure(group, Map.of());
        produce(topic, 1, 0, 30);
        Map<Long, List<Short>> deliveries = new TreeMap<>();
        try (KafkaShareConsumer<String, String> sc = consumer(group, true)) {
            sc.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            // Done when every record is accepted or rejected: offsets % 3 == 0 are released the
            // first time and accepted the second; % 3 == 1 are rejected; the rest accepted.
            Set<Long> done = new TreeSet<>();
            while (done.size() < 30 && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : sc.poll(Duration.ofMillis(500))) {
                    deliveries.computeIfAbsent(r.offset(), k -> new ArrayList<>()).add(deliveries(r));
                    AcknowledgeType t;
                    if (r.offset() % 3 == 0 && deliveries(r) == 1) {
                        t = AcknowledgeType.RELEASE;
                    } else if (r.offset() % 3 == 1) {
                        t = AcknowledgeType.REJECT;
                        done.add(r.offset());
                    } else {
                        t = AcknowledgeType.ACCEPT;
                        done.add(r.offset());
                    }
                    sc.acknowledge(r, t);
                }
                sc.commitSync(Duration.ofSeconds(10));
            }
            // Nothing else comes: rejected records stay archived.
            for (int i = 0; i < 4; i++) {
                for (ConsumerRecord<String, String> r : sc.poll(Duration.ofMillis(500))) {
                    deliveries.computeIfAbsent(r.offset(), k -> new ArrayList<>()).add(deliveries(r));
                    sc.acknowledge(r, AcknowledgeType.ACCEPT);
                }
            }
        }
        for (long o = 0; o < 30; o++) {
            List<Short> want = o % 3 == 0 ? List.of((short) 1, (short) 2) : List.of((short) 1);
            assertEquals(want, deliveries.get(o), "deliveries of offset " + o);
        }
    }

    @Test
    void anExpiredLockHandsTheRecordToAnotherConsumer() throws Exception {
        String topic = Clients.unique("share-lock");
        String group = Clients.unique("sg-lock");
        Clients.createTopic(admin, topic, 1);
        configure(group, Map.of("share.record.lock.duration.ms", "2000"));
        produce(topic, 1, 0, 5);
        try (KafkaShareConsumer<String, String> a = consumer(group, true);
                KafkaShareConsumer<String, String> b = consumer(group, true)) {
            a.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> held = pollUntil(a, 5, Duration.ofSeconds(30));
            assertEquals(5, held.size(), "a holds every record");
            assertEquals(Optional.of(2000), a.acquisitionLockTimeoutMs(), "the lock duration the broker gave");
            // a neither acknowledges nor polls again: its locks run out.
            b.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> again = pollUntil(b, 5, Duration.ofSeconds(30));
            assertEquals(5, again.size(), "b gets a's records after their locks expired");
            for (ConsumerRecord<String, String> r : again) {
                assertEquals(2, deliveries(r), "delivery count of " + key(r));
                b.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            b.commitSync(Duration.ofSeconds(10));
        }
    }

    @Test
    void renewKeepsRecordsPastTheirLock() throws Exception {
        String topic = Clients.unique("share-renew");
        String group = Clients.unique("sg-renew");
        Clients.createTopic(admin, topic, 1);
        configure(group, Map.of("share.record.lock.duration.ms", "2000"));
        produce(topic, 1, 0, 3);
        try (KafkaShareConsumer<String, String> a = consumer(group, true);
                KafkaShareConsumer<String, String> b = consumer(group, true)) {
            a.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> held = pollUntil(a, 3, Duration.ofSeconds(30));
            assertEquals(3, held.size());
            b.subscribe(List.of(topic));
            // a renews its locks for 5 s, over twice the lock duration (a renewed record comes
            // back from a's next poll, to be acknowledged again): b gets nothing.
            int stolen = 0;
            int renewals = 0;
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (System.nanoTime() < until) {
                for (ConsumerRecord<String, String> r : held) {
                    a.acknowledge(r, AcknowledgeType.RENEW);
                    renewals++;
                }
                held = new ArrayList<>();
                a.poll(Duration.ofMillis(500)).forEach(held::add);
                ConsumerRecords<String, String> got = b.poll(Duration.ofMillis(200));
                stolen += got.count();
                got.forEach(r -> b.acknowledge(r, AcknowledgeType.RELEASE));
            }
            assertEquals(0, stolen, "records renewed by a went to b");
            assertTrue(renewals >= 9, "renewals: " + renewals);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (held.size() < 3 && System.nanoTime() < deadline) {
                a.poll(Duration.ofMillis(300)).forEach(held::add);
            }
            assertEquals(3, held.size(), "the renewed records, back from a's poll");
            for (ConsumerRecord<String, String> r : held) {
                assertEquals(1, deliveries(r), "renewed, not redelivered: " + key(r));
                a.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            a.commitSync(Duration.ofSeconds(10));
        }
    }

    @Test
    void aRecordReleasedUpToTheDeliveryLimitIsArchived() throws Exception {
        String topic = Clients.unique("share-limit");
        String group = Clients.unique("sg-limit");
        Clients.createTopic(admin, topic, 1);
        configure(group, Map.of("share.delivery.count.limit", "2"));
        produce(topic, 1, 0, 1);
        try (KafkaShareConsumer<String, String> sc = consumer(group, true)) {
            sc.subscribe(List.of(topic));
            for (short delivery = 1; delivery <= 2; delivery++) {
                List<ConsumerRecord<String, String>> got = pollUntil(sc, 1, Duration.ofSeconds(30));
                assertEquals(1, got.size(), "delivery " + delivery);
                assertEquals(delivery, deliveries(got.get(0)));
                sc.acknowledge(got.get(0), AcknowledgeType.RELEASE);
                sc.commitSync(Duration.ofSeconds(10));
            }
            produce(topic, 1, 1, 2);
            List<ConsumerRecord<String, String>> next = pollUntil(sc, 1, Duration.ofSeconds(30));
            assertEquals(List.of(1L), next.stream().map(ConsumerRecord::offset).toList(),
                    "offset 0 was archived after two deliveries; offset 1 comes");
            sc.acknowledge(next.get(0), AcknowledgeType.ACCEPT);
            int more = 0;
            for (int i = 0; i < 4; i++) {
                more += sc.poll(Duration.ofMillis(500)).count();
            }
            assertEquals(0, more, "nothing after the archived record");
        }
    }

    @Test
    void aKilledConsumersRecordsGoToAnotherAtOnce() throws Exception {
        String topic = Clients.unique("share-kill");
        String group = Clients.unique("sg-kill");
        Clients.createTopic(admin, topic, 1);
        configure(group, Map.of());
        produce(topic, 1, 0, 10);
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process worker = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                ShareWorker.class.getName(), broker.bootstrap(), group, topic)
                .redirectErrorStream(true).start();
        try (BufferedReader out = new BufferedReader(new InputStreamReader(worker.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            int held = -1;
            while ((line = out.readLine()) != null) {
                if (line.startsWith("HOLDING ")) {
                    held = Integer.parseInt(line.substring(8).trim());
                    break;
                }
            }
            assertEquals(10, held, "the worker holds every record");
            worker.destroyForcibly().waitFor(30, TimeUnit.SECONDS);
        } finally {
            worker.destroyForcibly();
        }
        long killed = System.nanoTime();
        try (KafkaShareConsumer<String, String> sc = consumer(group, true)) {
            sc.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = pollUntil(sc, 10, Duration.ofSeconds(25));
            long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killed);
            assertEquals(10, got.size(), "the killed worker's records, after " + took + " ms");
            for (ConsumerRecord<String, String> r : got) {
                assertEquals(2, deliveries(r), "delivery count of " + key(r));
                sc.acknowledge(r, AcknowledgeType.ACCEPT);
            }
            sc.commitSync(Duration.ofSeconds(10));
        }
    }

    @Test
    void readCommittedShareGroupsSkipAbortedTransactions() throws Exception {
        String topic = Clients.unique("share-txn");
        Clients.createTopic(admin, topic, 1);
        // (transactional() has called initTransactions.)
        try (KafkaProducer<String, String> p = TxnClients.transactional(broker, Clients.unique("share-txn"))) {
            for (String txn : List.of("committed-a", "aborted", "committed-b")) {
                p.beginTransaction();
                for (int i = 0; i < 5; i++) {
                    p.send(new ProducerRecord<>(topic, 0, txn, txn + "-" + i));
                }
                p.flush();
                if (txn.equals("aborted")) {
                    p.abortTransaction();
                } else {
                    p.commitTransaction();
                }
            }
        }
        for (boolean committed : List.of(true, false)) {
            String group = Clients.unique(committed ? "sg-rc" : "sg-ru");
            configure(group, committed ? Map.of("share.isolation.level", "read_committed") : Map.of());
            List<String> values = new ArrayList<>();
            try (KafkaShareConsumer<String, String> sc = consumer(group, false)) {
                sc.subscribe(List.of(topic));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                int want = committed ? 10 : 15;
                while (values.size() < want && System.nanoTime() < deadline) {
                    sc.poll(Duration.ofMillis(300)).forEach(r -> values.add(r.value()));
                }
                for (int i = 0; i < 4; i++) {
                    sc.poll(Duration.ofMillis(300)).forEach(r -> values.add(r.value()));
                }
                sc.commitSync(Duration.ofSeconds(10));
            }
            long aborted = values.stream().filter(v -> v.startsWith("aborted")).count();
            assertEquals(committed ? 10 : 15, values.size(), (committed ? "read_committed: " : "read_uncommitted: ") + values);
            assertEquals(committed ? 0 : 5, aborted, values.toString());
        }
    }

    @Test
    void kafkaShareGroupsListsDescribesResetsAndDeletes() throws Exception {
        String topic = Clients.unique("share-cli");
        String group = Clients.unique("sg-cli");
        Clients.createTopic(admin, topic, 1);
        configure(group, Map.of());
        produce(topic, 1, 0, 10);
        try (KafkaShareConsumer<String, String> sc = consumer(group, false)) {
            sc.subscribe(List.of(topic));
            int got = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (got < 10 && System.nanoTime() < deadline) {
                got += sc.poll(Duration.ofMillis(300)).count();
            }
            assertEquals(10, got);
            sc.commitSync(Duration.ofSeconds(10));
        }
        String b = broker.bootstrap();
        KafkaTool.Run list = KafkaTool.run("share-groups", b, "--list");
        assertEquals(0, list.exit(), list.output());
        assertTrue(list.output().lines().anyMatch(l -> l.trim().equals(group)), list.output());
        // Every record accepted: the start offset at the end of the log (Weir), or the start
        // offset not moved yet with a lag of 0 (Kafka's share coordinator stores the start offset
        // of before the acknowledgement until its next write; its lag counts what is acknowledged).
        List<String> done = awaitStartOffsets(group, topic, List.of("10"));
        assertTrue(done.equals(List.of("10")) || lags(group, topic).equals(List.of("0")), done.toString());
        KafkaTool.Run state = KafkaTool.run("share-groups", b, "--describe", "--group", group, "--state");
        assertTrue(state.output().lines().anyMatch(l -> l.startsWith(group) && l.contains("Empty")), state.output());

        KafkaTool.Run reset = KafkaTool.run("share-groups", b, "--reset-offsets", "--group", group, "--topic", topic,
                "--to-earliest", "--execute");
        assertEquals(0, reset.exit(), reset.output());
        assertEquals(List.of("0"), awaitStartOffsets(group, topic, List.of("0")), "reset to the earliest offset");
        try (KafkaShareConsumer<String, String> sc = consumer(group, false)) {
            sc.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> again = new ArrayList<>();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (again.size() < 10 && System.nanoTime() < deadline) {
                sc.poll(Duration.ofMillis(300)).forEach(again::add);
            }
            assertEquals(10, again.size(), "every record again after the reset");
            assertTrue(again.stream().allMatch(r -> deliveries(r) == 1), "delivered afresh");
            sc.commitSync(Duration.ofSeconds(10));
        }

        KafkaTool.Run deleteOffsets = KafkaTool.run("share-groups", b, "--delete-offsets", "--group", group,
                "--topic", topic);
        assertEquals(0, deleteOffsets.exit(), deleteOffsets.output());
        assertEquals(List.of(), awaitStartOffsets(group, topic, List.of()), "the topic's share-partitions forgotten");
        KafkaTool.Run delete = KafkaTool.run("share-groups", b, "--delete", "--group", group);
        assertEquals(0, delete.exit(), delete.output());
        KafkaTool.Run after = KafkaTool.run("share-groups", b, "--list");
        assertTrue(after.output().lines().noneMatch(l -> l.trim().equals(group)), after.output());
    }

    /**
     * The start offsets kafka-share-groups --describe shows, once they are {@code want} or after
     * 15 s (Kafka's share coordinator writes acknowledgements' outcomes a little after them).
     */
    static List<String> awaitStartOffsets(String group, String topic, List<String> want) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        List<String> got = startOffsets(group, topic);
        while (!got.equals(want) && System.nanoTime() < deadline) {
            Thread.sleep(500);
            got = startOffsets(group, topic);
        }
        return got;
    }

    /** The start offsets kafka-share-groups --describe shows for the topic's partitions. */
    static List<String> startOffsets(String group, String topic) throws Exception {
        return column(group, topic, 3);
    }

    /** The lags kafka-share-groups --describe shows ("-" where the broker does not say). */
    static List<String> lags(String group, String topic) throws Exception {
        return column(group, topic, 4);
    }

    private static List<String> column(String group, String topic, int i) throws Exception {
        KafkaTool.Run d = KafkaTool.run("share-groups", broker.bootstrap(), "--describe", "--group", group);
        assertEquals(0, d.exit(), d.output());
        return d.output().lines()
                .map(l -> l.trim().split("\\s+"))
                .filter(f -> f.length > i && f[0].equals(group) && f[1].equals(topic))
                .map(f -> f[i])
                .toList();
    }

    /**
     * Polls until records come or {@code within} passed; the records of the first poll that had
     * any (an explicit-mode consumer may not poll again before acknowledging them: the tests
     * produce what one poll gets in one batch). {@code n} is what the caller expects.
     */
    static List<ConsumerRecord<String, String>> pollUntil(KafkaShareConsumer<String, String> sc, int n, Duration within) {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        long deadline = System.nanoTime() + within.toNanos();
        while (out.isEmpty() && System.nanoTime() < deadline) {
            for (ConsumerRecord<String, String> r : sc.poll(Duration.ofMillis(300))) {
                out.add(r);
            }
        }
        return out;
    }

    /**
     * A share consumer in a JVM of its own (for {@link #aKilledConsumersRecordsGoToAnotherAtOnce}):
     * polls in explicit mode until it holds 10 records, says so, and waits to be killed.
     */
    public static final class ShareWorker {
        public static void main(String[] args) throws Exception {
            try (KafkaShareConsumer<String, String> sc = consumer(args[0], args[1], true)) {
                sc.subscribe(List.of(args[2]));
                Collection<ConsumerRecord<String, String>> held = pollUntil(sc, 10, Duration.ofSeconds(60));
                System.out.println("HOLDING " + held.size());
                System.out.flush();
                Thread.sleep(Long.MAX_VALUE);
            }
        }
    }
}
