package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Exactly-once consume-transform-produce: a read_committed group member and a transactional
 * producer copy 20,000 numbered records from an input topic to an output topic, one
 * transaction per poll, the consumed offsets committed with the transaction
 * (sendOffsetsToTransaction with the consumer's group metadata). The application dies mid-way
 * twice (once abandoned with its transaction open and its records written, once closed with
 * Duration.ZERO before committing); each time a new instance with the same transactional.id
 * fences the old one (whose commit then fails with ProducerFencedException). With a single
 * broker (the class owns it) the broker is also stopped (SIGTERM) once while a transaction is
 * open, its records and offsets sent, and started again; the commit waits for it (or, if the
 * commit fails, a new instance takes over). With WEIR_COMPAT_TARGET=cluster that step is left out. At the end, read_committed, each output
 * partition holds its input partition's records exactly once, in order.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class ExactlyOnceTest {
    private static final int RECORDS = 20_000;
    private static final int PARTITIONS = 3;
    private static final Duration DEADLINE = Duration.ofSeconds(240);

    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.start("ExactlyOnceTest");
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

    /** One instance of the application: a read_committed group member and a transactional producer. */
    static final class App {
        final String name;
        final KafkaProducer<String, String> producer;
        final KafkaConsumer<String, String> consumer;

        App(String name, String group, String txnId, String in) {
            this.name = name;
            // The producer first: its InitProducerId fences the previous instance and aborts
            // its open transaction, whose offsets the consumer would otherwise wait for.
            this.producer = TxnClients.transactional(broker, txnId, Map.of(
                    ProducerConfig.CLIENT_ID_CONFIG, name,
                    ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60_000));
            this.consumer = Clients.consumer(broker, group, name, Map.of(
                    ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                    ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 500));
            consumer.subscribe(List.of(in));
        }

        /** Dies: the producer is closed at once (nothing committed, nothing aborted), the consumer leaves the group. */
        void crash() {
            try {
                producer.close(Duration.ZERO);
            } catch (RuntimeException ignored) {
                // dying anyway
            }
            try {
                consumer.close(Duration.ofSeconds(5));
            } catch (RuntimeException ignored) {
                // dying anyway
            }
        }
    }

    @Test
    void consumeTransformProduceExactlyOnceAcrossFencingAndRestart() throws Exception {
        String in = Clients.unique("eos-in");
        String out = Clients.unique("eos-out");
        String group = Clients.unique("eos-group");
        String txnId = Clients.unique("eos-txn");
        Clients.createTopic(admin, in, PARTITIONS);
        Clients.createTopic(admin, out, PARTITIONS);

        // ---- the input: 20,000 numbered records, idempotent producer ----------------------
        Map<Integer, List<String>> input = new HashMap<>();
        Map<TopicPartition, Long> ends = new HashMap<>();
        try (KafkaProducer<String, String> p = Clients.producer(broker)) {
            List<Map.Entry<Integer, String>> rs = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                rs.add(Map.entry(i % PARTITIONS, String.format("v-%05d", i)));
            }
            List<RecordMetadata> acked = TxnClients.send(p, in, rs);
            List<Integer> order = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                order.add(i);
            }
            order.sort(Comparator.comparing((Integer i) -> acked.get(i).partition()).thenComparing(i -> acked.get(i).offset()));
            for (int i : order) {
                input.computeIfAbsent(acked.get(i).partition(), k -> new ArrayList<>()).add(rs.get(i).getValue());
            }
        }
        for (int q = 0; q < PARTITIONS; q++) {
            ends.put(new TopicPartition(in, q), (long) input.get(q).size());
        }

        // ---- the application, killed twice, the broker restarted once -------------------
        final int abandonAt = RECORDS / 5;       // 20 %: left with an open transaction, fenced
        final int restartAt = RECORDS * 2 / 5;   // 40 %: the broker restarts mid-transaction (single broker only)
        final int closeAt = RECORDS * 3 / 5;     // 60 %: closed with Duration.ZERO before commit
        Broker single = broker instanceof Broker b ? b : null;
        AtomicReference<Exception> restartError = new AtomicReference<>();
        Thread restarter = null;
        int instances = 0;
        int unplanned = 0;
        long copied = 0; // records of committed transactions (the kill schedule's clock)
        int transactions = 0;
        boolean abandoned = false;
        boolean closedAtOnce = false;
        long deadline = System.nanoTime() + DEADLINE.toNanos();

        App app = newApp(++instances, group, txnId, in, deadline);
        try {
            while (true) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("not done within " + DEADLINE.toSeconds() + "s: " + copied + " records copied by "
                            + transactions + " committed transactions, committed offsets " + committed(group));
                }
                try {
                    ConsumerRecords<String, String> rs = app.consumer.poll(Duration.ofMillis(200));
                    if (rs.isEmpty()) {
                        if ((restarter == null || !restarter.isAlive()) && ends.equals(committedOrNull(group))) {
                            break;
                        }
                        continue;
                    }
                    app.producer.beginTransaction();
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (ConsumerRecord<String, String> r : rs) {
                        app.producer.send(new ProducerRecord<>(out, r.partition(), r.key(), "copy-" + r.value()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    app.producer.sendOffsetsToTransaction(offsets, app.consumer.groupMetadata());

                    if (!abandoned && copied >= abandonAt) {
                        // Killed mid-transaction, its records written: the process hangs (a zombie).
                        abandoned = true;
                        app.producer.flush();
                        app.consumer.close(Duration.ofSeconds(5));
                        KafkaProducer<String, String> zombie = app.producer;
                        app = newApp(++instances, group, txnId, in, deadline);
                        // The new instance fenced it: the zombie cannot commit.
                        KafkaException e = assertThrows(KafkaException.class, zombie::commitTransaction,
                                "the fenced instance committed");
                        assertInstanceOf(ProducerFencedException.class, e, "the fenced instance's commit: " + e);
                        zombie.close(Duration.ZERO);
                        continue;
                    }
                    if (single != null && restarter == null && copied >= restartAt) {
                        // The broker goes down with this transaction open (its records written, the
                        // group's offsets sent) and comes back; the commit below waits for it.
                        app.producer.flush();
                        System.err.println("restarting the broker after " + copied + " records copied, with a transaction of "
                                + rs.count() + " open");
                        long t0 = System.nanoTime();
                        single.stop();
                        restarter = new Thread(() -> {
                            try {
                                single.start();
                                System.err.println("broker stopped and started again in " + (System.nanoTime() - t0) / 1_000_000 + " ms");
                            } catch (Exception e) {
                                restartError.set(e);
                            }
                        }, "restart-broker");
                        restarter.start();
                    }
                    if (!closedAtOnce && copied >= closeAt) {
                        // Killed before committing: nothing flushed, nothing aborted.
                        closedAtOnce = true;
                        app.crash();
                        app = newApp(++instances, group, txnId, in, deadline);
                        continue;
                    }
                    app.producer.commitTransaction();
                    copied += rs.count();
                    transactions++;
                } catch (KafkaException e) {
                    // Anything else (the broker restarting): this instance dies, a new one takes over.
                    unplanned++;
                    System.err.println("instance " + app.name + " failed: " + e + "; starting another");
                    app.crash();
                    app = newApp(++instances, group, txnId, in, deadline);
                }
            }
        } finally {
            app.crash();
            if (restarter != null) {
                restarter.join(TimeUnit.MINUTES.toMillis(2));
            }
        }
        System.err.println("copied " + RECORDS + " records: " + transactions + " committed transactions, " + instances
                + " instances, " + unplanned + " unplanned failures, broker restarted: " + (restarter != null));
        assertTrue(abandoned && closedAtOnce, "both kills happened");
        if (single != null) {
            assertTrue(restarter != null, "the broker was restarted");
            assertNull(restartError.get(), "broker restart failed: " + restartError.get());
        }
        assertEquals(ends, committed(group), "the group's committed offsets");

        // ---- the output, read_committed: each input record once, in order ----------------
        TxnClients.awaitSettled(admin, out, PARTITIONS);
        TxnClients.writeEnd(broker, out, PARTITIONS);
        List<ConsumerRecord<String, String>> rc = TxnClients.readToEnd(broker, out, PARTITIONS, IsolationLevel.READ_COMMITTED);
        for (int q = 0; q < PARTITIONS; q++) {
            List<String> got = new ArrayList<>();
            for (ConsumerRecord<String, String> r : rc) {
                if (r.partition() == q && !TxnClients.END.equals(r.value())) {
                    got.add(r.value());
                }
            }
            List<String> want = input.get(q).stream().map(v -> "copy-" + v).toList();
            if (!got.equals(want)) {
                throw new AssertionError("output partition " + q + ": " + got.size() + " records, "
                        + got.stream().distinct().count() + " distinct; want " + want.size() + " = input partition " + q
                        + " in order" + firstDifference(got, want));
            }
        }
        // The aborted attempts are in the log: read_uncommitted sees more than the input.
        List<String> ru = TxnClients.values(TxnClients.readToEnd(broker, out, PARTITIONS, IsolationLevel.READ_UNCOMMITTED));
        assertTrue(ru.size() > RECORDS, "read_uncommitted: " + ru.size() + " records, want the aborted ones too");
    }

    private static String firstDifference(List<String> got, List<String> want) {
        for (int i = 0; i < Math.min(got.size(), want.size()); i++) {
            if (!got.get(i).equals(want.get(i))) {
                return "; first difference at #" + i + ": " + got.get(i) + ", want " + want.get(i);
            }
        }
        return "";
    }

    /** A new instance; while the broker is down (restarting), tries again until the deadline. */
    private static App newApp(int n, String group, String txnId, String in, long deadline) throws InterruptedException {
        while (true) {
            try {
                return new App("eos-app-" + n, group, txnId, in);
            } catch (KafkaException e) {
                if (System.nanoTime() > deadline) {
                    throw e;
                }
                System.err.println("starting instance " + n + ": " + e + "; again");
                Thread.sleep(500);
            }
        }
    }

    private static Map<TopicPartition, Long> committed(String group) throws Exception {
        Map<TopicPartition, Long> out = new HashMap<>();
        admin.listConsumerGroupOffsets(Map.of(group, new ListConsumerGroupOffsetsSpec()),
                        new ListConsumerGroupOffsetsOptions().requireStable(true))
                .partitionsToOffsetAndMetadata(group).get(30, TimeUnit.SECONDS)
                .forEach((tp, oam) -> {
                    if (oam != null) {
                        out.put(tp, oam.offset());
                    }
                });
        return out;
    }

    /** committed(group), or null if the broker does not answer now (it may be restarting). */
    private static Map<TopicPartition, Long> committedOrNull(String group) {
        try {
            return committed(group);
        } catch (Exception e) {
            return null;
        }
    }
}
