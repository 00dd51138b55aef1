package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Kafka Streams with processing.guarantee=exactly_once_v2: a word count (flatMapValues, groupBy
 * through a repartition topic, count into a persistent RocksDB store whose changelog topic
 * Streams creates; no record cache, so every count goes out) over 4,000 generated lines of a
 * fixed vocabulary, the counts written to an output topic. The application runs twice. The
 * first instance gets the first half of the input; in its middle a processing step after the
 * output's sink throws once, after waiting until the output record of its transaction is on
 * the broker (seen read_uncommitted): the stream thread dies with that transaction open, the
 * handler replaces it, the transaction is aborted, and the new thread restores the store from
 * the changelog and goes on from the committed offsets. It is closed once the counts of the
 * first half are out. The second half is then written and a second instance with an empty
 * state directory (so it restores the store from the changelog) takes over. After each
 * instance, read_committed: each word's counts in the output are exactly 1, 2, ..., its count
 * in the lines (computed here), the changelog's last count of each word is the same, and the
 * application's committed offsets are the input's end offsets; read_uncommitted, the aborted
 * output record is there too. Streams created the changelog with cleanup.policy=compact
 * and the repartition topic with delete (DescribeConfigs).
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class StreamsEosTest {
    private static final int LINES = 4_000;
    private static final int PARTITIONS = 3;
    private static final Duration PHASE_DEADLINE = Duration.ofSeconds(90);
    private static final String STORE = "word-counts";
    private static final String REPARTITION = "words";
    private static final List<String> VOCABULARY = List.of(
            "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
            "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
            "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "weir", "kafka", "stream", "river",
            "lake", "sea", "ocean", "rain", "snow", "ice", "fog", "mist", "dew", "hail");

    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.start("StreamsEosTest");
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

    /** Line i of the input: 1 to 12 words of the vocabulary, skewed towards its start; the same on every run. */
    private static List<String> lines() {
        Random rnd = new Random(20_240_601L);
        List<String> out = new ArrayList<>();
        for (int i = 0; i < LINES; i++) {
            int n = 1 + rnd.nextInt(12);
            StringBuilder sb = new StringBuilder();
            for (int w = 0; w < n; w++) {
                int k = Math.min(rnd.nextInt(VOCABULARY.size()), rnd.nextInt(VOCABULARY.size()));
                if (w > 0) {
                    sb.append(' ');
                }
                sb.append(VOCABULARY.get(k));
            }
            out.add(sb.toString());
        }
        return out;
    }

    private static Map<String, Long> count(List<String> lines) {
        Map<String, Long> out = new TreeMap<>();
        for (String l : lines) {
            for (String w : l.split(" ")) {
                out.merge(w, 1L, Long::sum);
            }
        }
        return out;
    }

    private static String key(int i) {
        return String.format("line-%05d", i);
    }

    /** Writes lines [from, to), line i keyed "line-i", with the idempotent producer. */
    private static void produce(String topic, List<String> lines, int from, int to) throws Exception {
        try (KafkaProducer<String, String> p = Clients.producer(broker)) {
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = from; i < to; i++) {
                fs.add(p.send(new ProducerRecord<>(topic, key(i), lines.get(i))));
            }
            p.flush();
            for (var f : fs) {
                f.get(60, TimeUnit.SECONDS);
            }
        }
    }

    /**
     * The injected failure: the count of {@code word} reaching {@code at} throws once, after
     * waiting until the output record of that count (written in the open transaction) is on
     * the broker.
     */
    private static final class Poison {
        final String word;
        final long at;
        final AtomicBoolean fired = new AtomicBoolean();
        volatile boolean sawOpenRecord;

        Poison(String word, long at) {
            this.word = word;
            this.at = at;
        }
    }

    /** One instance of the application, with its own state directory. */
    private static final class App implements AutoCloseable {
        final KafkaStreams streams;
        final Path stateDir;
        final List<Throwable> died = new CopyOnWriteArrayList<>();

        App(String appId, String in, String out, Poison poison) throws Exception {
            stateDir = Files.createTempDirectory("weir-compat-streams-");
            StreamsBuilder b = new StreamsBuilder();
            KStream<String, Long> counts = b.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
                    .flatMapValues(v -> Arrays.asList(v.split(" ")))
                    .groupBy((k, w) -> w, Grouped.with(REPARTITION, Serdes.String(), Serdes.String()))
                    .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(STORE)
                            .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                    .toStream();
            counts.to(out, Produced.with(Serdes.String(), Serdes.Long()));
            // After the sink (a node's children run in the order they were added).
            counts.foreach((w, c) -> {
                if (poison != null && w.equals(poison.word) && c == poison.at && poison.fired.compareAndSet(false, true)) {
                    poison.sawOpenRecord = awaitUncommitted(out, w, c);
                    throw new IllegalStateException("injected failure at " + w + "=" + c);
                }
            });
            Properties p = new Properties();
            p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
            p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
            p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
            p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
            p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
            p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10_000);
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), 200);
            // Longer than the injected failure's wait (Streams' own default is 10 s).
            p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 60_000);
            streams = new KafkaStreams(b.build(), p);
            streams.setUncaughtExceptionHandler(e -> {
                died.add(e);
                return StreamThreadExceptionResponse.REPLACE_THREAD;
            });
            streams.start();
        }

        @Override
        public void close() throws Exception {
            try {
                assertTrue(streams.close(Duration.ofSeconds(60)), "Kafka Streams did not close within 60s");
            } finally {
                Broker.deleteTree(stateDir);
            }
        }
    }

    /**
     * Whether the record (word, count) shows in the topic read_uncommitted within 30 s (inside
     * the application's 60 s transaction timeout).
     */
    private static boolean awaitUncommitted(String topic, String word, long count) {
        Map<String, Object> props = consumerProps();
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "compat-streams-poison");
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = c.partitionsFor(topic, Duration.ofSeconds(30)).stream()
                    .map(pi -> new TopicPartition(topic, pi.partition())).toList();
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (System.nanoTime() < deadline) {
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(100))) {
                    if (r.key().equals(word) && r.value() == count) {
                        return true;
                    }
                }
            }
        } catch (RuntimeException e) {
            System.err.println("reading " + topic + " read_uncommitted: " + e);
        }
        return false;
    }

    /**
     * The topic read_committed from the beginning to its end offsets (the last stable offsets):
     * each key's values in order.
     */
    private static Map<String, List<Long>> readCommitted(String topic) throws Exception {
        return read(topic, "read_committed");
    }

    /** The topic read from the beginning to its end offsets under the isolation level: each key's values in order. */
    private static Map<String, List<Long>> read(String topic, String isolation) throws Exception {
        Map<String, List<Long>> out = new TreeMap<>();
        Map<String, Object> props = consumerProps();
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = c.partitionsFor(topic, Duration.ofSeconds(30)).stream()
                    .map(pi -> new TopicPartition(topic, pi.partition())).toList();
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, Duration.ofSeconds(30));
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (tps.stream().anyMatch(tp -> c.position(tp, Duration.ofSeconds(30)) < ends.get(tp))) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError(isolation + " " + topic + ": end offsets " + ends + " not reached within 60s");
                }
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(200))) {
                    out.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r.value());
                }
            }
        }
        return out;
    }

    private static Map<String, Object> consumerProps() {
        Map<String, Object> p = new HashMap<>();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "compat-streams-reader");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 2000);
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15_000);
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, org.apache.kafka.common.serialization.StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, LongDeserializer.class.getName());
        return p;
    }

    private static Map<String, Long> last(Map<String, List<Long>> values) {
        Map<String, Long> out = new TreeMap<>();
        values.forEach((k, vs) -> out.put(k, vs.get(vs.size() - 1)));
        return out;
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

    private static Map<TopicPartition, Long> only(Map<TopicPartition, Long> offsets, String topic) {
        Map<TopicPartition, Long> out = new HashMap<>();
        offsets.forEach((tp, o) -> {
            if (tp.topic().equals(topic)) {
                out.put(tp, o);
            }
        });
        return out;
    }

    /** The input's end offsets (it has no transactions: the high watermarks). */
    private static Map<TopicPartition, Long> ends(String topic) throws Exception {
        Map<TopicPartition, Long> out = new HashMap<>();
        TxnClients.latest(admin, topic, PARTITIONS, org.apache.kafka.common.IsolationLevel.READ_UNCOMMITTED)
                .forEach((q, o) -> out.put(new TopicPartition(topic, q), o));
        return out;
    }

    /**
     * Waits until the application has committed the input's end offsets and the output's last
     * counts (read_committed, as they come) are the expected ones; fails with the difference at
     * the deadline.
     */
    private static void awaitCounts(String appId, String in, String out, Map<String, Long> want) throws Exception {
        Map<TopicPartition, Long> inEnds = ends(in);
        Map<String, Long> got = new TreeMap<>();
        Map<TopicPartition, Long> done = Map.of();
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(consumerProps())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int q = 0; q < PARTITIONS; q++) {
                tps.add(new TopicPartition(out, q));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + PHASE_DEADLINE.toNanos();
            while (true) {
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(300))) {
                    got.put(r.key(), r.value());
                }
                if (got.equals(want)) {
                    done = only(committed(appId), in);
                    if (done.equals(inEnds)) {
                        return;
                    }
                }
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("within " + PHASE_DEADLINE.toSeconds() + "s: committed input offsets "
                            + only(committed(appId), in) + " (want " + inEnds + "), counts so far differ: "
                            + difference(got, want) + "; " + diagnosis(appId, in, out));
                }
            }
        }
    }

    /**
     * What a Kafka user would look at when an application stops making progress: the group's
     * members and their partitions, the open transactions and the partitions they hold, the
     * last stable offsets against the high watermarks of the topics the application writes.
     */
    private static String diagnosis(String appId, String in, String out) {
        StringBuilder sb = new StringBuilder();
        try {
            var g = admin.describeConsumerGroups(List.of(appId)).describedGroups().get(appId).get(30, TimeUnit.SECONDS);
            sb.append("group ").append(g.groupState()).append(" coordinator ").append(g.coordinator().id()).append(" members [");
            for (var m : g.members()) {
                sb.append(m.clientId()).append(" -> ").append(m.assignment().topicPartitions()).append("; ");
            }
            sb.append("]");
        } catch (Exception e) {
            sb.append("describing the group failed: ").append(e);
        }
        try {
            var listed = admin.listTransactions().all().get(30, TimeUnit.SECONDS);
            for (var l : listed) {
                if (l.state() == org.apache.kafka.clients.admin.TransactionState.COMPLETE_COMMIT
                        || l.state() == org.apache.kafka.clients.admin.TransactionState.COMPLETE_ABORT
                        || l.state() == org.apache.kafka.clients.admin.TransactionState.EMPTY) {
                    continue;
                }
                var d = admin.describeTransactions(List.of(l.transactionalId())).description(l.transactionalId())
                        .get(30, TimeUnit.SECONDS);
                sb.append("; transaction ").append(l.transactionalId()).append(" ").append(d.state())
                        .append(" on ").append(d.topicPartitions());
            }
        } catch (Exception e) {
            sb.append("; listing transactions failed: ").append(e);
        }
        for (String t : List.of(in, out, appId + "-" + STORE + "-changelog", appId + "-" + REPARTITION + "-repartition")) {
            try {
                sb.append("; ").append(t).append(" last stable ")
                        .append(TxnClients.latest(admin, t, PARTITIONS, org.apache.kafka.common.IsolationLevel.READ_COMMITTED))
                        .append(" high watermarks ")
                        .append(TxnClients.latest(admin, t, PARTITIONS, org.apache.kafka.common.IsolationLevel.READ_UNCOMMITTED));
            } catch (Exception e) {
                sb.append("; ").append(t).append(": ").append(e);
            }
        }
        return sb.toString();
    }

    private static String difference(Map<String, Long> got, Map<String, Long> want) {
        List<String> d = new ArrayList<>();
        for (String w : new java.util.TreeSet<>(union(got.keySet(), want.keySet()))) {
            if (!java.util.Objects.equals(got.get(w), want.get(w))) {
                d.add(w + ": got " + got.get(w) + ", want " + want.get(w));
            }
        }
        return d.isEmpty() ? "(none)" : String.join("; ", d);
    }

    private static java.util.Set<String> union(java.util.Set<String> a, java.util.Set<String> b) {
        java.util.Set<String> u = new java.util.HashSet<>(a);
        u.addAll(b);
        return u;
    }

    /**
     * After an instance: read_committed from the start, each word's counts in the output are
     * 1, 2, ..., its expected count, and its last count in the changelog is the expected one.
     */
    private static void checkTopics(String what, String out, String changelog, Map<String, Long> want) throws Exception {
        Map<String, List<Long>> outValues = readCommitted(out);
        assertEquals(want, last(outValues), what + ": the last count of each word in the output (difference: "
                + difference(last(outValues), want) + ")");
        for (Map.Entry<String, List<Long>> e : outValues.entrySet()) {
            List<Long> vs = e.getValue();
            for (int i = 0; i < vs.size(); i++) {
                if (vs.get(i) != i + 1) {
                    throw new AssertionError(what + ": the counts of " + e.getKey() + " in the output are not 1, 2, ..., "
                            + want.get(e.getKey()) + ": #" + i + " is " + vs.get(i) + " (" + vs.size() + " counts)");
                }
            }
        }
        Map<String, Long> stored = last(readCommitted(changelog));
        assertEquals(want, stored, what + ": the last count of each word in the changelog (difference: "
                + difference(stored, want) + ")");
    }

    private static ConfigEntry topicConfig(String topic, String name) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = admin.describeConfigs(List.of(r)).all().get(30, TimeUnit.SECONDS).get(r);
        ConfigEntry e = c.get(name);
        if (e == null) {
            throw new AssertionError(topic + ": DescribeConfigs has no " + name);
        }
        return e;
    }

    @Test
    void wordCountExactlyOnceV2AcrossAFailureAndARestart() throws Exception {
        String in = Clients.unique("streams-in");
        String out = Clients.unique("streams-out");
        String appId = Clients.unique("streams-wordcount");
        String changelog = appId + "-" + STORE + "-changelog";
        String repartition = appId + "-" + REPARTITION + "-repartition";
        Clients.createTopic(admin, in, PARTITIONS);
        Clients.createTopic(admin, out, PARTITIONS);
        List<String> lines = lines();
        int half = LINES / 2;
        Map<String, Long> firstHalf = count(lines.subList(0, half));
        Map<String, Long> all = count(lines);
        String word = VOCABULARY.get(0);
        Poison poison = new Poison(word, firstHalf.get(word) / 2);

        // ---- instance 1: the first half; one processing step throws in its middle -----------
        produce(in, lines, 0, half);
        try (App a = new App(appId, in, out, poison)) {
            awaitCounts(appId, in, out, firstHalf);
            assertTrue(poison.fired.get(), "the injected failure happened");
            assertEquals(1, a.died.size(), "stream threads that died (the injected failure): " + a.died);
            Throwable cause = a.died.get(0);
            while (cause.getCause() != null && !(cause instanceof IllegalStateException)) {
                cause = cause.getCause();
            }
            assertEquals("injected failure at " + word + "=" + poison.at, cause.getMessage(), "the failure: " + a.died.get(0));
        }
        assertTrue(poison.sawOpenRecord, "the output record " + word + "=" + poison.at
                + " of the open transaction did not show read_uncommitted within 30s");
        assertEquals(ends(in), only(committed(appId), in), "committed input offsets after instance 1");
        checkTopics("after instance 1", out, changelog, firstHalf);
        // The aborted transaction's output record is in the log, before the committed one.
        long seen = read(out, "read_uncommitted").getOrDefault(word, List.of()).stream()
                .filter(v -> v == poison.at).count();
        assertTrue(seen >= 2, "read_uncommitted, the output has " + word + "=" + poison.at + " " + seen
                + " times; want the aborted one and the committed one");

        // ---- the topics Streams created ----------------------------------------------------
        ConfigEntry policy = topicConfig(changelog, "cleanup.policy");
        assertEquals("compact", policy.value(), changelog + " cleanup.policy");
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, policy.source(), changelog + " cleanup.policy source");
        assertEquals("delete", topicConfig(repartition, "cleanup.policy").value(), repartition + " cleanup.policy");
        Map<String, TopicDescription> created = admin.describeTopics(List.of(changelog, repartition))
                .allTopicNames().get(30, TimeUnit.SECONDS);
        assertEquals(PARTITIONS, created.get(changelog).partitions().size(), changelog + " partitions");
        assertEquals(PARTITIONS, created.get(repartition).partitions().size(), repartition + " partitions");

        // ---- instance 2: an empty state directory, the second half ---------------------------
        produce(in, lines, half, LINES);
        try (App b = new App(appId, in, out, null)) {
            awaitCounts(appId, in, out, all);
            assertEquals(List.of(), b.died, "stream threads of instance 2 that died");
        }
        assertEquals(ends(in), only(committed(appId), in), "committed input offsets after instance 2");
        checkTopics("after instance 2", out, changelog, all);
    }
}
