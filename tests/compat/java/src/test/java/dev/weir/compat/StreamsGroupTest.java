package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.admin.StreamsGroupDescription;
import org.apache.kafka.clients.admin.StreamsGroupMemberAssignment;
import org.apache.kafka.clients.admin.StreamsGroupMemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Kafka Streams 4.4 with {@code group.protocol=streams} (KIP-1071): the broker creates the
 * internal topics and assigns the tasks.
 *
 * <ul>
 *   <li>A word count (a repartition topic, a count store with its changelog), at-least-once and
 *       exactly_once_v2, with one standby replica of each stateful task (the group config
 *       {@code streams.num.standby.replicas}), scaled from one instance to three and back to one
 *       while input keeps coming: with three instances the group (Admin describeStreamsGroups) is
 *       Stable with three members, each running tasks and no task twice, and each count task has
 *       a standby on another instance; every word's final count is its count in the input
 *       (exactly once; at least that, at-least-once), the committed offsets are the input's end
 *       offsets, and the internal topics the broker created have the input's partition count and
 *       the configs Streams asked for.</li>
 *   <li>A stream-table join (copartitioned topics, a table store), at-least-once and
 *       exactly_once_v2, scaled from one instance to three (one in a JVM of its own, killed with
 *       SIGKILL in the middle of the input and replaced by a new instance) and back to one:
 *       read_committed, every click is joined with its user's region, exactly once (at least
 *       once).</li>
 *   <li>{@code kafka-streams-groups}: list, describe (members, state, offsets), reset-offsets
 *       (dry run and execute), delete.</li>
 * </ul>
 *
 * <p>On a three-broker cluster ({@code WEIR_COMPAT_TARGET=cluster}) the exactly-once runs only.
 */
@Timeout(value = 420, unit = TimeUnit.SECONDS)
class StreamsGroupTest {
    private static final int PARTITIONS = 3;
    private static final Duration DEADLINE = Duration.ofSeconds(120);
    private static final List<String> VOCABULARY = List.of(
            "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
            "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango");

    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.start("StreamsGroupTest");
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

    // ---- the applications --------------------------------------------------------------------

    static Topology wordCount(String in, String out) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(v -> Arrays.asList(v.split(" ")))
                .groupBy((k, w) -> w, Grouped.with("words", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .mapValues(c -> Long.toString(c))
                .to(out, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    /** Clicks (key user, value click id) joined with the users table (key user, value region). */
    static Topology join(String clicks, String users, String out) {
        StreamsBuilder b = new StreamsBuilder();
        KTable<String, String> regions = b.table(users, Consumed.with(Serdes.String(), Serdes.String()),
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("regions")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()));
        b.stream(clicks, Consumed.with(Serdes.String(), Serdes.String()))
                .join(regions, (click, region) -> click + "@" + region)
                .to(out, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    static Properties props(String bootstrap, String appId, String guarantee, Path stateDir) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), 200);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10_000);
        return p;
    }

    /** One instance of an application, with its own state directory. */
    static final class App implements AutoCloseable {
        final KafkaStreams streams;
        final Path stateDir;
        final List<Throwable> died = new CopyOnWriteArrayList<>();

        App(Topology topology, String appId, String guarantee) throws Exception {
            this(topology, broker.bootstrap(), appId, guarantee);
        }

        App(Topology topology, String bootstrap, String appId, String guarantee) throws Exception {
            stateDir = Files.createTempDirectory("weir-compat-streams-group-");
            streams = new KafkaStreams(topology, props(bootstrap, appId, guarantee, stateDir));
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
            assertEquals(List.of(), died, "stream threads that died");
        }
    }

    // ---- input and output ----------------------------------------------------------------------

    static List<String> lines(int n, long seed) {
        Random rnd = new Random(seed);
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int words = 1 + rnd.nextInt(8);
            StringBuilder sb = new StringBuilder();
            for (int w = 0; w < words; w++) {
                if (w > 0) {
                    sb.append(' ');
                }
                sb.append(VOCABULARY.get(rnd.nextInt(VOCABULARY.size())));
            }
            out.add(sb.toString());
        }
        return out;
    }

    static Map<String, Long> count(List<String> lines) {
        Map<String, Long> out = new TreeMap<>();
        for (String l : lines) {
            for (String w : l.split(" ")) {
                out.merge(w, 1L, Long::sum);
            }
        }
        return out;
    }

    static void produce(String topic, List<Map.Entry<String, String>> records) throws Exception {
        try (KafkaProducer<String, String> p = Clients.producer(broker)) {
            List<java.util.concurrent.Future<?>> fs = new ArrayList<>();
            for (var r : records) {
                fs.add(p.send(new ProducerRecord<>(topic, r.getKey(), r.getValue())));
            }
            p.flush();
            for (var f : fs) {
                f.get(60, TimeUnit.SECONDS);
            }
        }
    }

    static void produceLines(String topic, List<String> lines, int from) throws Exception {
        List<Map.Entry<String, String>> records = new ArrayList<>();
        for (int i = 0; i < lines.size(); i++) {
            records.add(Map.entry(String.format("line-%05d", from + i), lines.get(i)));
        }
        produce(topic, records);
    }

    static KafkaConsumer<String, String> reader() {
        Map<String, Object> p = new HashMap<>();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrap());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "compat-streams-group-reader");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 2000);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    /**
     * Reads {@code topic} (read_committed, from the start) into {@code sink} until {@code done}
     * holds of everything read, or fails at the deadline saying {@code what}.
     */
    static List<ConsumerRecord<String, String>> readUntil(String topic, String what,
            Predicate<List<ConsumerRecord<String, String>>> done, String group) throws Exception {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        try (KafkaConsumer<String, String> c = reader()) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int q = 0; q < PARTITIONS; q++) {
                tps.add(new TopicPartition(topic, q));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + DEADLINE.toNanos();
            while (!done.test(got)) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("within " + DEADLINE.toSeconds() + "s: " + what + " (read " + got.size()
                            + " records); " + describe(group));
                }
                c.poll(Duration.ofMillis(300)).forEach(got::add);
            }
        }
        return got;
    }

    static Map<String, Long> lastCounts(List<ConsumerRecord<String, String>> records) {
        Map<String, Long> out = new TreeMap<>();
        for (var r : records) {
            out.put(r.key(), Long.parseLong(r.value()));
        }
        return out;
    }

    static boolean atLeast(Map<String, Long> got, Map<String, Long> want) {
        return want.entrySet().stream().allMatch(e -> got.getOrDefault(e.getKey(), 0L) >= e.getValue());
    }

    static Map<TopicPartition, Long> committed(String group, String topic) throws Exception {
        Map<TopicPartition, Long> out = new TreeMap<>(java.util.Comparator.comparing(TopicPartition::toString));
        admin.listConsumerGroupOffsets(Map.of(group, new ListConsumerGroupOffsetsSpec()))
                .partitionsToOffsetAndMetadata(group).get(30, TimeUnit.SECONDS)
                .forEach((tp, oam) -> {
                    if (oam != null && tp.topic().equals(topic)) {
                        out.put(tp, oam.offset());
                    }
                });
        return out;
    }

    static Map<TopicPartition, Long> ends(String topic) throws Exception {
        Map<TopicPartition, Long> out = new TreeMap<>(java.util.Comparator.comparing(TopicPartition::toString));
        TxnClients.latest(admin, topic, PARTITIONS, org.apache.kafka.common.IsolationLevel.READ_UNCOMMITTED)
                .forEach((q, o) -> out.put(new TopicPartition(topic, q), o));
        return out;
    }

    static void awaitCommitted(String group, String topic) throws Exception {
        Map<TopicPartition, Long> want = ends(topic);
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        while (!committed(group, topic).equals(want)) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError(group + " committed " + committed(group, topic) + ", want " + want + "; "
                        + describe(group));
            }
            Thread.sleep(200);
        }
    }

    static StreamsGroupDescription description(String group) throws Exception {
        return admin.describeStreamsGroups(List.of(group)).all().get(30, TimeUnit.SECONDS).get(group);
    }

    static String describe(String group) {
        try {
            StreamsGroupDescription d = description(group);
            StringBuilder sb = new StringBuilder("group " + group + " " + d.groupState() + " epoch " + d.groupEpoch()
                    + "/" + d.targetAssignmentEpoch() + ": ");
            for (StreamsGroupMemberDescription m : d.members()) {
                sb.append(m.memberId(), 0, 8).append(" epoch ").append(m.memberEpoch()).append(" active ")
                        .append(tasks(m.assignment())).append("; ");
            }
            return sb.toString();
        } catch (Exception e) {
            return "describing " + group + " failed: " + e;
        }
    }

    static Set<String> tasks(StreamsGroupMemberAssignment a) {
        Set<String> out = new TreeSet<>();
        for (var t : a.activeTasks()) {
            for (int p : t.partitions()) {
                out.add(t.subtopologyId() + "_" + p);
            }
        }
        return out;
    }

    /**
     * Waits until the group is Stable with {@code members} members, each running at least one
     * active task, together every one of {@code tasks} tasks once.
     */
    static StreamsGroupDescription awaitStable(String group, int members, int tasks) throws Exception {
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        while (true) {
            StreamsGroupDescription d;
            try {
                d = description(group);
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof org.apache.kafka.common.errors.GroupIdNotFoundException)
                        || System.nanoTime() > deadline) {
                    throw e;
                }
                Thread.sleep(250);
                continue;
            }
            List<String> all = new ArrayList<>();
            boolean everyoneWorks = true;
            for (StreamsGroupMemberDescription m : d.members()) {
                Set<String> t = tasks(m.assignment());
                everyoneWorks &= !t.isEmpty();
                all.addAll(t);
            }
            // Never two members running one task, at any moment.
            assertEquals(new HashSet<>(all).size(), all.size(), "a task run by two members: " + describe(group));
            if (d.groupState() == GroupState.STABLE && d.members().size() == members && everyoneWorks
                    && all.size() == tasks) {
                return d;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("the group did not settle with " + members + " members and " + tasks
                        + " tasks: " + describe(group));
            }
            Thread.sleep(250);
        }
    }

    /**
     * Waits until each task of subtopology {@code sub} has one standby replica, on a member other
     * than the one running it.
     */
    static void awaitStandbys(String group, String sub, int partitions) throws Exception {
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        while (true) {
            Map<Integer, String> active = new HashMap<>();
            Map<Integer, List<String>> standby = new HashMap<>();
            for (StreamsGroupMemberDescription m : description(group).members()) {
                for (var t : m.assignment().activeTasks()) {
                    if (t.subtopologyId().equals(sub)) {
                        t.partitions().forEach(p -> active.put(p, m.memberId()));
                    }
                }
                for (var t : m.assignment().standbyTasks()) {
                    if (t.subtopologyId().equals(sub)) {
                        t.partitions().forEach(p -> standby.computeIfAbsent(p, k -> new ArrayList<>()).add(m.memberId()));
                    }
                }
            }
            boolean done = true;
            for (int p = 0; p < partitions; p++) {
                List<String> s = standby.getOrDefault(p, List.of());
                done &= s.size() == 1 && active.containsKey(p) && !s.contains(active.get(p));
            }
            if (done) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("standby replicas of subtopology " + sub + ": " + standby + ", active " + active);
            }
            Thread.sleep(250);
        }
    }

    // ---- the tests -------------------------------------------------------------------------------

    @ParameterizedTest
    @ValueSource(strings = {StreamsConfig.AT_LEAST_ONCE, StreamsConfig.EXACTLY_ONCE_V2})
    void wordCountScalesFromOneToThreeAndBack(String guarantee) throws Exception {
        boolean exactly = guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2);
        // On a cluster, exactly-once only: what the cluster changes (the coordinator on one
        // broker, topics led by others) is the same for both, and make test's time is counted.
        org.junit.jupiter.api.Assumptions.assumeTrue(exactly || !Target.clusterMode());
        String in = Clients.unique("sg-words-in");
        String out = Clients.unique("sg-words-out");
        String app = Clients.unique("sg-wordcount");
        Clients.createTopic(admin, in, PARTITIONS);
        Clients.createTopic(admin, out, PARTITIONS);
        List<String> all = lines(3_000, 20_261_206L);
        Topology topology = wordCount(in, out);
        int tasks = 2 * PARTITIONS;
        // One standby replica of each stateful task (the counts), a group config.
        var groupConfig = new org.apache.kafka.common.config.ConfigResource(
                org.apache.kafka.common.config.ConfigResource.Type.GROUP, app);
        admin.incrementalAlterConfigs(Map.of(groupConfig, List.of(new org.apache.kafka.clients.admin.AlterConfigOp(
                new org.apache.kafka.clients.admin.ConfigEntry("streams.num.standby.replicas", "1"),
                org.apache.kafka.clients.admin.AlterConfigOp.OpType.SET)))).all().get(30, TimeUnit.SECONDS);

        produceLines(in, all.subList(0, 1_000), 0);
        try (App a = new App(topology, app, guarantee)) {
            Map<String, Long> want1 = count(all.subList(0, 1_000));
            readUntil(out, "the first third's counts", got -> atLeast(lastCounts(got), want1), app);
            awaitStable(app, 1, tasks);

            try (App b = new App(topology, app, guarantee);
                    App c = new App(topology, app, guarantee)) {
                StreamsGroupDescription three = awaitStable(app, 3, tasks);
                for (StreamsGroupMemberDescription m : three.members()) {
                    assertEquals(2, tasks(m.assignment()).size(), "tasks of each of three members: " + describe(app));
                }
                awaitStandbys(app, "1", PARTITIONS);
                produceLines(in, all.subList(1_000, 2_000), 1_000);
                Map<String, Long> want2 = count(all.subList(0, 2_000));
                readUntil(out, "two thirds' counts with three instances", got -> atLeast(lastCounts(got), want2), app);
            }
            awaitStable(app, 1, tasks);
            produceLines(in, all.subList(2_000, 3_000), 2_000);
            Map<String, Long> want = count(all);
            List<ConsumerRecord<String, String>> got =
                    readUntil(out, "every count, back to one instance", r -> atLeast(lastCounts(r), want), app);
            awaitCommitted(app, in);
            long over = want.entrySet().stream().mapToLong(e -> lastCounts(got).get(e.getKey()) - e.getValue()).sum();
            System.out.println("word count scaled 1 -> 3 -> 1, " + guarantee + ": " + over + " words counted more than once");
            if (exactly) {
                assertEquals(want, lastCounts(got), "exactly once: every word's count");
            }
        }

        // The internal topics the broker created, with the input's partitions and Streams' configs.
        String repartition = app + "-words-repartition";
        String changelog = app + "-counts-changelog";
        var described = admin.describeTopics(List.of(repartition, changelog)).allTopicNames().get(30, TimeUnit.SECONDS);
        assertEquals(PARTITIONS, described.get(repartition).partitions().size(), repartition);
        assertEquals(PARTITIONS, described.get(changelog).partitions().size(), changelog);
        var r = new org.apache.kafka.common.config.ConfigResource(org.apache.kafka.common.config.ConfigResource.Type.TOPIC,
                changelog);
        assertEquals("compact", admin.describeConfigs(List.of(r)).all().get(30, TimeUnit.SECONDS).get(r)
                .get("cleanup.policy").value(), changelog + " cleanup.policy");
    }

    @ParameterizedTest
    @ValueSource(strings = {StreamsConfig.AT_LEAST_ONCE, StreamsConfig.EXACTLY_ONCE_V2})
    void joinScalesFromOneToThreeAndBackWithAnInstanceKilled(String guarantee) throws Exception {
        boolean exactly = guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2);
        org.junit.jupiter.api.Assumptions.assumeTrue(exactly || !Target.clusterMode());
        String clicks = Clients.unique("sg-clicks");
        String users = Clients.unique("sg-users");
        String out = Clients.unique("sg-joined");
        String app = Clients.unique("sg-join");
        Clients.createTopic(admin, clicks, PARTITIONS);
        Clients.createTopic(admin, users, PARTITIONS);
        Clients.createTopic(admin, out, PARTITIONS);
        Map<String, String> region = new TreeMap<>();
        List<Map.Entry<String, String>> profile = new ArrayList<>();
        for (int u = 0; u < 30; u++) {
            String user = "user-" + u;
            region.put(user, "region-" + (u % 4));
            profile.add(Map.entry(user, region.get(user)));
        }
        produce(users, profile);
        Topology topology = join(clicks, users, out);
        // Click i by user i % 30, value "click-i".
        java.util.function.BiFunction<Integer, Integer, List<Map.Entry<String, String>>> clicksOf = (from, to) -> {
            List<Map.Entry<String, String>> l = new ArrayList<>();
            for (int i = from; i < to; i++) {
                l.add(Map.entry("user-" + (i % 30), "click-" + i));
            }
            return l;
        };

        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Path workerLog = Files.createTempFile("weir-compat-streams-worker-", ".log");
        Process worker = null;
        try (App a = new App(topology, app, guarantee)) {
            awaitStable(app, 1, PARTITIONS);
            produce(clicks, clicksOf.apply(0, 500));
            readUntil(out, "the first 500 clicks joined", got -> got.size() >= 500, app);
            // Scale out to three: one in a JVM of its own.
            worker = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                    StreamsWorker.class.getName(), broker.bootstrap(), app, clicks, users, out, guarantee)
                    .redirectErrorStream(true).redirectOutput(workerLog.toFile()).start();
            try (App c = new App(topology, app, guarantee)) {
                awaitStable(app, 3, PARTITIONS);
                produce(clicks, clicksOf.apply(500, 1_000));
                readUntil(out, "1000 clicks joined by three instances", got -> got.size() >= 1_000, app);
                // The worker's instance is killed while clicks come in: its open transaction is
                // aborted by its timeout, and its task goes to another instance once its session
                // ends. A new instance replaces it.
                produce(clicks, clicksOf.apply(1_000, 1_250));
                worker.destroyForcibly().waitFor(30, TimeUnit.SECONDS);
                produce(clicks, clicksOf.apply(1_250, 1_500));
                try (App replacement = new App(topology, app, guarantee)) {
                    readUntil(out, "1500 clicks joined after the kill", got -> got.size() >= 1_500, app);
                    awaitStable(app, 3, PARTITIONS);
                }
            }
            // Back to one.
            awaitStable(app, 1, PARTITIONS);
            produce(clicks, clicksOf.apply(1_500, 2_000));
            readUntil(out, "2000 clicks joined", r -> r.size() >= 2_000, app);
            awaitCommitted(app, clicks);
            List<ConsumerRecord<String, String>> got =
                    readUntil(out, "2000 clicks joined", r -> r.size() >= 2_000, app);
            Map<String, Integer> seen = new TreeMap<>();
            for (var r : got) {
                String[] parts = r.value().split("@");
                seen.merge(parts[0], 1, Integer::sum);
                assertEquals(region.get(r.key()), parts[1], "the region joined to " + r.value());
            }
            for (int i = 0; i < 2_000; i++) {
                int n = seen.getOrDefault("click-" + i, 0);
                if (exactly) {
                    assertEquals(1, n, "click-" + i + " joined exactly once");
                } else {
                    assertTrue(n >= 1, "click-" + i + " joined at least once");
                }
            }
            if (exactly) {
                assertEquals(2_000, got.size(), "joined records, read_committed");
            }
            System.out.println("join scaled 1 -> 3 -> 1 with an instance killed, " + guarantee + ": "
                    + (got.size() - 2_000) + " clicks joined more than once");
        } finally {
            if (worker != null) {
                worker.destroyForcibly();
            }
            System.out.println("the killed instance's output:\n" + Files.readString(workerLog));
            Files.deleteIfExists(workerLog);
        }
    }

    @Test
    void kafkaStreamsGroupsListsDescribesResetsAndDeletes() throws Exception {
        // The tools' requests are the same on a cluster: one broker only.
        org.junit.jupiter.api.Assumptions.assumeFalse(Target.clusterMode());
        String in = Clients.unique("sg-cli-in");
        String out = Clients.unique("sg-cli-out");
        String app = Clients.unique("sg-cli");
        Clients.createTopic(admin, in, PARTITIONS);
        Clients.createTopic(admin, out, PARTITIONS);
        List<String> all = lines(300, 7L);
        produceLines(in, all, 0);
        String b = broker.bootstrap();
        try (App a = new App(wordCount(in, out), app, StreamsConfig.AT_LEAST_ONCE)) {
            Map<String, Long> want = count(all);
            readUntil(out, "the counts", got -> atLeast(lastCounts(got), want), app);
            awaitStable(app, 1, 2 * PARTITIONS);
            awaitCommitted(app, in);

            KafkaTool.Run list = KafkaTool.run("streams-groups", b, "--list");
            assertEquals(0, list.exit(), list.output());
            assertTrue(list.output().lines().anyMatch(l -> l.trim().equals(app)), list.output());
            KafkaTool.Run members = KafkaTool.run("streams-groups", b, "--describe", "--group", app, "--members");
            assertEquals(0, members.exit(), members.output());
            assertTrue(members.output().contains("ACTIVE:"), members.output());
            KafkaTool.Run state = KafkaTool.run("streams-groups", b, "--describe", "--group", app, "--state");
            assertEquals(0, state.exit(), state.output());
            assertTrue(state.output().contains("Stable"), state.output());
            KafkaTool.Run offsets = KafkaTool.run("streams-groups", b, "--describe", "--group", app, "--offsets");
            assertEquals(0, offsets.exit(), offsets.output());
            assertTrue(offsets.output().contains(in), offsets.output());
            // A running group's offsets cannot be reset.
            KafkaTool.Run busy = KafkaTool.run("streams-groups", b, "--reset-offsets", "--group", app,
                    "--input-topic", in, "--to-earliest", "--execute");
            assertTrue(busy.exit() != 0 || busy.output().toLowerCase().contains("not empty")
                    || busy.output().toLowerCase().contains("inactive"), busy.output());
        }
        // Empty now: reset to the start, then delete.
        KafkaTool.Run dry = KafkaTool.run("streams-groups", b, "--reset-offsets", "--group", app,
                "--input-topic", in, "--to-earliest", "--dry-run");
        assertEquals(0, dry.exit(), dry.output());
        KafkaTool.Run reset = KafkaTool.run("streams-groups", b, "--reset-offsets", "--group", app,
                "--input-topic", in, "--to-earliest", "--execute");
        assertEquals(0, reset.exit(), reset.output());
        Map<TopicPartition, Long> zero = new TreeMap<>(java.util.Comparator.comparing(TopicPartition::toString));
        for (int q = 0; q < PARTITIONS; q++) {
            zero.put(new TopicPartition(in, q), 0L);
        }
        assertEquals(zero, committed(app, in), "offsets after --reset-offsets --to-earliest");
        KafkaTool.Run delete = KafkaTool.run("streams-groups", b, "--delete", "--group", app);
        assertEquals(0, delete.exit(), delete.output());
        KafkaTool.Run after = KafkaTool.run("streams-groups", b, "--list");
        assertTrue(after.output().lines().noneMatch(l -> l.trim().equals(app)), after.output());
    }

    /**
     * One instance of the join application in a JVM of its own (for
     * {@link #joinScalesFromOneToThreeAndBackWithAnInstanceKilled}): runs until killed.
     */
    public static final class StreamsWorker {
        public static void main(String[] args) throws Exception {
            Path dir = Files.createTempDirectory("weir-compat-streams-worker-");
            KafkaStreams s = new KafkaStreams(join(args[2], args[3], args[4]),
                    props(args[0], args[1], args[5], dir));
            s.start();
            System.out.println("STARTED");
            System.out.flush();
            Thread.sleep(Long.MAX_VALUE);
        }
    }
}
