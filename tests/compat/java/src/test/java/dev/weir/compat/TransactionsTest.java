package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TransactionalIdNotFoundException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Transactions through the admin client (ListTransactions, DescribeTransactions) and through
 * KafkaConsumer's isolation levels: an aborted transaction is skipped by read_committed and
 * seen by read_uncommitted; an open one holds read_committed end offsets at the last stable offset.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TransactionsTest {
    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.start("TransactionsTest");
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

    private static TransactionListing listed(String txnId, ListTransactionsOptions opts) throws Exception {
        Collection<TransactionListing> all = admin.listTransactions(opts).all().get(30, TimeUnit.SECONDS);
        return all.stream().filter(l -> l.transactionalId().equals(txnId)).findFirst().orElse(null);
    }

    private static TransactionDescription describe(String txnId) throws Exception {
        return admin.describeTransactions(List.of(txnId)).description(txnId).get(30, TimeUnit.SECONDS);
    }

    /** Waits (up to 30 s: the coordinator completes a transaction after EndTxn is answered) for the state. */
    private static TransactionDescription awaitState(String txnId, TransactionState want) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (true) {
            TransactionDescription d = describe(txnId);
            TransactionListing l = listed(txnId, new ListTransactionsOptions());
            if (d.state() == want && l != null && l.state() == want) {
                return d;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError(txnId + ": described " + d.state() + ", listed "
                        + (l == null ? "(not listed)" : l.state()) + "; want " + want);
            }
            Thread.sleep(100);
        }
    }

    private static ProducerState producerIn(TopicPartition tp, long producerId) throws Exception {
        List<ProducerState> ps = admin.describeProducers(List.of(tp)).partitionResult(tp)
                .get(30, TimeUnit.SECONDS).activeProducers();
        return ps.stream().filter(x -> x.producerId() == producerId).findFirst()
                .orElseThrow(() -> new AssertionError("producer " + producerId + " not in " + ps));
    }

    @Test
    void listAndDescribeTransactions() throws Exception {
        String topic = Clients.unique("txn-admin");
        Clients.createTopic(admin, topic, 3);
        String txnId = Clients.unique("txn-admin-id");
        Set<Integer> nodeIds = new HashSet<>();
        for (Node n : admin.describeCluster().nodes().get(30, TimeUnit.SECONDS)) {
            nodeIds.add(n.id());
        }

        try (KafkaProducer<String, String> p = TxnClients.transactional(broker, txnId,
                Map.of("transaction.timeout.ms", 45_000))) {
            // Initialized, no transaction yet: Empty.
            TransactionDescription d0 = describe(txnId);
            assertEquals(TransactionState.EMPTY, d0.state(), "state after initTransactions");
            assertTrue(d0.topicPartitions().isEmpty(), "partitions after initTransactions: " + d0.topicPartitions());
            assertTrue(d0.producerId() >= 0, "producer id " + d0.producerId());
            assertTrue(d0.producerEpoch() >= 0, "producer epoch " + d0.producerEpoch());

            // Open: Ongoing, with the partitions written to.
            p.beginTransaction();
            List<RecordMetadata> sent =
                    TxnClients.send(p, topic, List.of(Map.entry(0, "a"), Map.entry(2, "b"), Map.entry(2, "c")));
            TransactionListing l = listed(txnId, new ListTransactionsOptions());
            assertNotNull(l, "listTransactions does not list " + txnId);
            assertEquals(TransactionState.ONGOING, l.state(), "listed state of the open transaction");
            TransactionDescription d = describe(txnId);
            assertEquals(TransactionState.ONGOING, d.state(), "described state of the open transaction");
            assertEquals(l.producerId(), d.producerId(), "listed and described producer id");
            assertEquals(d0.producerId(), d.producerId(), "producer id");
            assertTrue(d.producerEpoch() >= d0.producerEpoch(), "epoch " + d.producerEpoch());
            assertEquals(Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 2)), d.topicPartitions(),
                    "partitions of the open transaction");
            assertEquals(45_000, d.transactionTimeoutMs(), "transaction timeout");
            assertTrue(d.transactionStartTimeMs().isPresent(), "start time of the open transaction");
            long now = System.currentTimeMillis();
            long started = d.transactionStartTimeMs().getAsLong();
            assertTrue(started > now - 120_000 && started <= now + 5_000, "start time " + started + " (now " + now + ")");
            assertTrue(nodeIds.contains(d.coordinatorId()), "coordinator " + d.coordinatorId() + " in " + nodeIds);

            // Filters: by state and by producer id.
            assertNotNull(listed(txnId, new ListTransactionsOptions().filterStates(List.of(TransactionState.ONGOING))),
                    "listed with filter Ongoing");
            assertNull(listed(txnId, new ListTransactionsOptions().filterStates(
                    List.of(TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT))),
                    "listed with filter CompleteCommit/CompleteAbort while open");
            assertNotNull(listed(txnId, new ListTransactionsOptions().filterProducerIds(Set.of(d.producerId()))),
                    "listed with a filter on its producer id");
            assertNull(listed(txnId, new ListTransactionsOptions().filterProducerIds(Set.of(d.producerId() + 1_000_000))),
                    "listed with a filter on another producer id");

            // DescribeProducers (kafka-transactions describe-producers): the partition's leader
            // knows the producer and where its open transaction starts.
            TopicPartition tp2 = new TopicPartition(topic, 2);
            ProducerState open = producerIn(tp2, d.producerId());
            assertEquals(sent.get(1).offset(), open.currentTransactionStartOffset().orElse(-1L),
                    "first offset of the open transaction in " + tp2);
            assertTrue(open.lastSequence() >= 1, "last sequence " + open.lastSequence());

            // Committed: CompleteCommit, no partitions.
            p.commitTransaction();
            // Markers follow the commit's answer (in Kafka, asynchronously).
            long deadline = System.currentTimeMillis() + 30_000;
            while (producerIn(tp2, d.producerId()).currentTransactionStartOffset().isPresent()) {
                assertTrue(System.currentTimeMillis() < deadline,
                        "the transaction in " + tp2 + " still open 30 s after the commit");
                Thread.sleep(100);
            }
            TransactionDescription dc = awaitState(txnId, TransactionState.COMPLETE_COMMIT);
            assertTrue(dc.topicPartitions().isEmpty(), "partitions after commit: " + dc.topicPartitions());
            assertEquals(d.producerId(), dc.producerId(), "producer id after commit");
            assertNull(listed(txnId, new ListTransactionsOptions().filterStates(List.of(TransactionState.ONGOING))),
                    "listed as Ongoing after commit");

            // Aborted: CompleteAbort.
            p.beginTransaction();
            TxnClients.send(p, topic, List.of(Map.entry(1, "d")));
            assertEquals(Set.of(new TopicPartition(topic, 1)), describe(txnId).topicPartitions(),
                    "partitions of the second transaction");
            p.abortTransaction();
            TransactionDescription da = awaitState(txnId, TransactionState.COMPLETE_ABORT);
            assertTrue(da.topicPartitions().isEmpty(), "partitions after abort: " + da.topicPartitions());
        }

        // A transactional id nobody used.
        String unknown = Clients.unique("txn-nobody");
        ExecutionException e = assertThrows(ExecutionException.class, () -> describe(unknown));
        assertInstanceOf(TransactionalIdNotFoundException.class, e.getCause(), "describe of an unknown id");
        assertNull(listed(unknown, new ListTransactionsOptions()), "an unknown id is not listed");
    }

    @Test
    void abortedTransactionSkippedByReadCommitted() throws Exception {
        final int parts = 2;
        String topic = Clients.unique("txn-aborted");
        Clients.createTopic(admin, topic, parts);
        List<RecordMetadata> acked = new ArrayList<>();
        try (KafkaProducer<String, String> p = TxnClients.transactional(broker, Clients.unique("txn-aborted-id"))) {
            p.beginTransaction();
            acked.addAll(TxnClients.send(p, topic, TxnClients.records("c1", 20, parts)));
            p.commitTransaction();
            p.beginTransaction();
            acked.addAll(TxnClients.send(p, topic, TxnClients.records("ab", 20, parts)));
            p.abortTransaction();
            p.beginTransaction();
            acked.addAll(TxnClients.send(p, topic, TxnClients.records("c2", 10, parts)));
            p.commitTransaction();
        }
        // Per partition: 10 + marker, 10 + marker, 5 + marker.
        for (int q = 0; q < parts; q++) {
            List<Long> offs = new ArrayList<>();
            for (RecordMetadata md : acked) {
                if (md.partition() == q) {
                    offs.add(md.offset());
                }
            }
            List<Long> want = new ArrayList<>();
            for (long o = 0; o < 10; o++) {
                want.add(o);
            }
            for (long o = 11; o < 21; o++) {
                want.add(o);
            }
            for (long o = 22; o < 27; o++) {
                want.add(o);
            }
            assertEquals(want, offs, "acknowledged offsets in partition " + q);
        }
        assertEquals(Map.of(0, 28L, 1, 28L), TxnClients.awaitOffsets(admin, topic, parts, Map.of(0, 28L, 1, 28L)),
                "end offsets (markers at 10, 21, 27)");

        // An open transaction on partition 0 after all that: read_committed end offsets stop at
        // its first offset (the last stable offset), read_uncommitted ones are the high watermark.
        try (KafkaProducer<String, String> open = TxnClients.transactional(broker, Clients.unique("txn-open-id"))) {
            open.beginTransaction();
            List<RecordMetadata> o = TxnClients.send(open, topic, List.of(Map.entry(0, "open-0"), Map.entry(0, "open-1")));
            assertEquals(28, o.get(0).offset(), "first offset of the open transaction");
            acked.addAll(o);
            TopicPartition p0 = new TopicPartition(topic, 0);
            TopicPartition p1 = new TopicPartition(topic, 1);
            try (KafkaConsumer<String, String> rc = Clients.consumer(broker, null, "txn-rc",
                         Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"));
                 KafkaConsumer<String, String> ru = Clients.consumer(broker, null, "txn-ru",
                         Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted"))) {
                assertEquals(Map.of(p0, 28L, p1, 28L), rc.endOffsets(List.of(p0, p1)), "read_committed end offsets");
                assertEquals(Map.of(p0, 30L, p1, 28L), ru.endOffsets(List.of(p0, p1)), "read_uncommitted end offsets");
            }
            assertEquals(Map.of(0, 28L, 1, 28L), TxnClients.latest(admin, topic, parts, IsolationLevel.READ_COMMITTED),
                    "ListOffsets READ_COMMITTED");
            assertEquals(Map.of(0, 30L, 1, 28L), TxnClients.latest(admin, topic, parts, IsolationLevel.READ_UNCOMMITTED),
                    "ListOffsets READ_UNCOMMITTED");
            open.abortTransaction();
        }
        assertEquals(Map.of(0, 31L, 1, 28L), TxnClients.awaitOffsets(admin, topic, parts, Map.of(0, 31L, 1, 28L)),
                "end offsets at the end");
        TxnClients.writeEnd(broker, topic, parts);

        List<String> want = new ArrayList<>();
        TxnClients.records("c1", 20, parts).forEach(r -> want.add(r.getValue()));
        TxnClients.records("c2", 10, parts).forEach(r -> want.add(r.getValue()));
        List<String> wantAll = new ArrayList<>(want);
        TxnClients.records("ab", 20, parts).forEach(r -> wantAll.add(r.getValue()));
        wantAll.addAll(List.of("open-0", "open-1"));

        List<ConsumerRecord<String, String>> rc = TxnClients.readToEnd(broker, topic, parts, IsolationLevel.READ_COMMITTED);
        List<ConsumerRecord<String, String>> ru = TxnClients.readToEnd(broker, topic, parts, IsolationLevel.READ_UNCOMMITTED);
        assertEquals(sorted(want), sorted(TxnClients.values(rc)), "read_committed: the committed records, once each");
        assertEquals(sorted(wantAll), sorted(TxnClients.values(ru)), "read_uncommitted: every record written");
        Set<String> at = new HashSet<>();
        for (RecordMetadata md : acked) {
            at.add(md.partition() + "/" + md.offset());
        }
        for (List<ConsumerRecord<String, String>> rs : List.of(rc, ru)) {
            for (ConsumerRecord<String, String> r : rs) {
                assertNull(r.key(), "a record with a key (a control record?) at " + r.partition() + "/" + r.offset());
            }
        }
        for (List<ConsumerRecord<String, String>> rs : List.of(rc, ru)) {
            for (ConsumerRecord<String, String> r : rs) {
                if (!TxnClients.END.equals(r.value())) {
                    assertTrue(at.contains(r.partition() + "/" + r.offset()),
                            "record at an offset nobody acknowledged: " + r.partition() + "/" + r.offset());
                } else {
                    assertEquals(r.partition() == 0 ? 31 : 28, r.offset(), "END offset in partition " + r.partition());
                }
            }
        }
    }

    private static List<String> sorted(List<String> in) {
        List<String> out = new ArrayList<>(in);
        out.sort(null);
        return out;
    }
}
