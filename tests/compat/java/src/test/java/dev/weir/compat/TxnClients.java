package dev.weir.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;

/** Helpers of the transaction tests: transactional producers, isolation-level readers, offsets. */
final class TxnClients {
    /** The value of the last record written to each partition: a reader that got it got everything before it. */
    static final String END = "end";

    private TxnClients() {}

    /** A transactional producer (idempotent, acks=all), initialized: InitProducerId with its transactional.id. */
    static KafkaProducer<String, String> transactional(Target b, String txnId, Map<String, Object> extra) {
        Map<String, Object> p = new HashMap<>();
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "compat-txn-" + txnId);
        p.putAll(extra);
        KafkaProducer<String, String> producer = Clients.producer(b, p);
        try {
            producer.initTransactions();
        } catch (RuntimeException e) {
            producer.close(Duration.ZERO);
            throw e;
        }
        return producer;
    }

    static KafkaProducer<String, String> transactional(Target b, String txnId) {
        return transactional(b, txnId, Map.of());
    }

    /** Sends (partition, value) records with no key, waits for every acknowledgement, returns them in order. */
    static List<RecordMetadata> send(KafkaProducer<String, String> p, String topic, List<Map.Entry<Integer, String>> rs)
            throws Exception {
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        for (Map.Entry<Integer, String> r : rs) {
            fs.add(p.send(new ProducerRecord<>(topic, r.getKey(), null, r.getValue())));
        }
        p.flush();
        List<RecordMetadata> out = new ArrayList<>();
        for (Future<RecordMetadata> f : fs) {
            out.add(f.get(60, TimeUnit.SECONDS));
        }
        return out;
    }

    /** n records "prefix-i", spread round-robin over the partitions. */
    static List<Map.Entry<Integer, String>> records(String prefix, int n, int partitions) {
        List<Map.Entry<Integer, String>> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(Map.entry(i % partitions, prefix + "-" + i));
        }
        return out;
    }

    /** Writes END (idempotent, not transactional) as the last record of every partition. */
    static void writeEnd(Target b, String topic, int partitions) throws Exception {
        try (KafkaProducer<String, String> p = Clients.producer(b)) {
            List<Map.Entry<Integer, String>> rs = new ArrayList<>();
            for (int i = 0; i < partitions; i++) {
                rs.add(Map.entry(i, END));
            }
            send(p, topic, rs);
        }
    }

    /**
     * Every record of the topic from offset 0 as a consumer with the isolation level gets it
     * (no group), up to and including the END record of each partition, in delivery order.
     */
    static List<ConsumerRecord<String, String>> readToEnd(Target b, String topic, int partitions, IsolationLevel level)
            throws Exception {
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < partitions; i++) {
            tps.add(new TopicPartition(topic, i));
        }
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        Set<Integer> ended = new HashSet<>();
        try (KafkaConsumer<String, String> c = Clients.consumer(b, null, "compat-txn-reader", Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, level.toString(),
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 2000))) {
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (ended.size() < partitions) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError(level + ": END not reached in every partition of " + topic
                            + " within 60s (ended " + ended + ", " + out.size() + " records)");
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    if (ended.contains(r.partition())) {
                        throw new AssertionError(level + ": a record after END in " + topic + "-" + r.partition());
                    }
                    out.add(r);
                    if (END.equals(r.value())) {
                        ended.add(r.partition());
                    }
                }
            }
        }
        return out;
    }

    /** The values of the records, END records left out. */
    static List<String> values(List<ConsumerRecord<String, String>> rs) {
        List<String> out = new ArrayList<>();
        for (ConsumerRecord<String, String> r : rs) {
            if (!END.equals(r.value())) {
                out.add(r.value());
            }
        }
        return out;
    }

    /** ListOffsets latest of every partition under the isolation level. */
    static Map<Integer, Long> latest(Admin admin, String topic, int partitions, IsolationLevel level) throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (int i = 0; i < partitions; i++) {
            req.put(new TopicPartition(topic, i), OffsetSpec.latest());
        }
        Map<Integer, Long> out = new HashMap<>();
        admin.listOffsets(req, new ListOffsetsOptions(level)).all().get(30, TimeUnit.SECONDS)
                .forEach((tp, info) -> out.put(tp.partition(), info.offset()));
        return out;
    }

    /**
     * Waits (up to 30 s: the broker writes a transaction's markers after answering EndTxn)
     * until no transaction is open on the topic: ListOffsets latest is the same under
     * READ_COMMITTED (the last stable offset) and READ_UNCOMMITTED (the high watermark).
     * Returns the offsets.
     */
    /**
     * Waits (up to 30 s) until the topic's last stable offsets and high watermarks are both
     * {@code want}, and returns the high watermarks last seen. A transaction's markers follow
     * the answer to its EndTxn (in Kafka as in Weir), and a partition closes the transaction
     * when it appends the marker, a moment before the marker is durable and counted in the high
     * watermark: "last stable offsets equal high watermarks" alone can be seen just before it.
     */
    static Map<Integer, Long> awaitOffsets(Admin admin, String topic, int partitions, Map<Integer, Long> want)
            throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (true) {
            Map<Integer, Long> lso = latest(admin, topic, partitions, IsolationLevel.READ_COMMITTED);
            Map<Integer, Long> hw = latest(admin, topic, partitions, IsolationLevel.READ_UNCOMMITTED);
            if ((lso.equals(want) && hw.equals(want)) || System.nanoTime() > deadline) {
                return hw;
            }
            Thread.sleep(20);
        }
    }

    static Map<Integer, Long> awaitSettled(Admin admin, String topic, int partitions) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (true) {
            Map<Integer, Long> lso = latest(admin, topic, partitions, IsolationLevel.READ_COMMITTED);
            Map<Integer, Long> hw = latest(admin, topic, partitions, IsolationLevel.READ_UNCOMMITTED);
            if (lso.equals(hw)) {
                return hw;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError(topic + ": last stable offsets " + lso + " != high watermarks " + hw);
            }
            Thread.sleep(100);
        }
    }
}
