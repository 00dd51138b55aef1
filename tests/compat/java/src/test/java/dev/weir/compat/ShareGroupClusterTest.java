package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A share group across leader changes (three-broker Weir cluster, {@code WEIR_COMPAT_TARGET=cluster}
 * only): two share consumers accept 1,000 records of a three-partition topic; every partition is
 * moved to another broker (AlterPartitionReassignments) and they accept 1,000 more; the broker
 * leading partition 0 is killed (SIGKILL) and they accept 1,000 more. Every record is delivered;
 * none accepted before a move or the kill is delivered again after it (the share-partitions'
 * states, in the metadata store, went with the partitions); at the end every share-partition's
 * start offset is at the end of its log and a new consumer of the group gets nothing.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class ShareGroupClusterTest {
    private static Cluster cluster;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        assumeTrue(Target.clusterMode(), "a cluster's test (WEIR_COMPAT_TARGET=cluster)");
        cluster = Cluster.start("ShareGroupClusterTest", Cluster.SIZE);
        admin = Clients.admin(cluster);
    }

    @AfterAll
    static void stop() throws Exception {
        try {
            if (admin != null) {
                admin.close(Duration.ofSeconds(10));
            }
        } finally {
            if (cluster != null) {
                cluster.close();
            }
        }
    }

    /** Every delivery of each record: "partition@offset" to its delivery counts, in order. */
    private final Map<String, List<Short>> deliveries = new TreeMap<>();

    @Test
    void recordsAcceptedBeforeAMoveOrAKillStayAccepted() throws Exception {
        String topic = Clients.unique("share-moves");
        String group = Clients.unique("sg-moves");
        Clients.createTopic(admin, topic, 3);
        ConfigResource g = new ConfigResource(ConfigResource.Type.GROUP, group);
        admin.incrementalAlterConfigs(Map.of(g, List.of(new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS);
        try (KafkaShareConsumer<String, String> a = ShareGroupTest.consumer(cluster.bootstrap(), group, false);
                KafkaShareConsumer<String, String> b = ShareGroupTest.consumer(cluster.bootstrap(), group, false);
                KafkaProducer<String, String> producer = Clients.producer(cluster, Map.of("acks", "all"))) {
            a.subscribe(List.of(topic));
            b.subscribe(List.of(topic));
            List<KafkaShareConsumer<String, String>> consumers = List.of(a, b);

            Set<String> first = produce(producer, topic, 0, 1000);
            consume(consumers, first);

            // Every partition to another broker.
            Map<TopicPartition, Optional<NewPartitionReassignment>> moves = new HashMap<>();
            Map<Integer, Integer> before = leaders(topic);
            List<Integer> nodes = new ArrayList<>(cluster.nodes().keySet());
            before.forEach((p, leader) -> {
                int to = nodes.get((nodes.indexOf(leader) + 1) % nodes.size());
                moves.put(new TopicPartition(topic, p), Optional.of(new NewPartitionReassignment(List.of(to))));
            });
            admin.alterPartitionReassignments(moves).all().get(60, TimeUnit.SECONDS);
            awaitLeaders(topic, p -> !before.get(p).equals(leaderOf(topic, p)));

            Set<String> second = produce(producer, topic, 1000, 2000);
            consume(consumers, second);
            assertNotDeliveredAgain(first, "after the move");

            // The broker leading partition 0 dies.
            int victim = leaders(topic).get(0);
            int index = -1;
            for (int i = 0; i < cluster.brokers.size(); i++) {
                if (cluster.brokers.get(i).nodeId == victim) {
                    index = i;
                }
            }
            cluster.kill(index);
            awaitLeaders(topic, p -> {
                Integer l = leaderOf(topic, p);
                return l != null && l != victim;
            });
            Set<String> third = produce(producer, topic, 2000, 3000);
            consume(consumers, third);
            assertNotDeliveredAgain(first, "after the kill");
            assertNotDeliveredAgain(second, "after the kill");
        }
        assertEquals(3000, deliveries.size(), "every record delivered");
        // The group's share-partitions end where the logs end; a new member gets nothing.
        try (KafkaShareConsumer<String, String> c = ShareGroupTest.consumer(cluster.bootstrap(), group, false)) {
            c.subscribe(List.of(topic));
            int more = 0;
            for (int i = 0; i < 10; i++) {
                more += c.poll(Duration.ofMillis(500)).count();
            }
            assertEquals(0, more, "records delivered after all were accepted");
        }
        KafkaTool.Run d = KafkaTool.run("share-groups", cluster.bootstrap(), "--describe", "--group", group);
        List<String> starts = d.output().lines()
                .map(l -> l.trim().split("\\s+"))
                .filter(f -> f.length >= 4 && f[0].equals(group) && f[1].equals(topic))
                .map(f -> f[3])
                .toList();
        assertEquals(List.of("1000", "1000", "1000"), starts, d.output());
    }

    private Set<String> produce(KafkaProducer<String, String> p, String topic, int from, int to) throws Exception {
        Set<String> keys = new HashSet<>();
        List<java.util.concurrent.Future<org.apache.kafka.clients.producer.RecordMetadata>> sent = new ArrayList<>();
        for (int i = from; i < to; i++) {
            sent.add(p.send(new ProducerRecord<>(topic, i % 3, "k" + i, "v" + i)));
        }
        for (var f : sent) {
            var m = f.get(60, TimeUnit.SECONDS);
            keys.add(m.partition() + "@" + m.offset());
        }
        return keys;
    }

    /** Polls both consumers (committing what each got) until every record of {@code wanted} came. */
    private void consume(List<KafkaShareConsumer<String, String>> consumers, Set<String> wanted) {
        Set<String> missing = new HashSet<>(wanted);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (!missing.isEmpty() && System.nanoTime() < deadline) {
            for (KafkaShareConsumer<String, String> c : consumers) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    String k = r.partition() + "@" + r.offset();
                    deliveries.computeIfAbsent(k, x -> new ArrayList<>()).add(r.deliveryCount().orElse((short) -1));
                    missing.remove(k);
                }
                c.commitSync(Duration.ofSeconds(10));
            }
        }
        assertTrue(missing.isEmpty(), missing.size() + " records never delivered, e.g. " + missing.stream().limit(5).toList());
    }

    private void assertNotDeliveredAgain(Set<String> accepted, String when) {
        List<String> again = accepted.stream().filter(k -> deliveries.get(k).size() > 1).sorted().limit(10).toList();
        assertTrue(again.isEmpty(), "records accepted before were delivered again " + when + ": " + again);
    }

    private static Map<Integer, Integer> leaders(String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
        Map<Integer, Integer> out = new TreeMap<>();
        d.partitions().forEach(p -> out.put(p.partition(), p.leader() == null ? null : p.leader().id()));
        return out;
    }

    private static Integer leaderOf(String topic, int partition) {
        try {
            return leaders(topic).get(partition);
        } catch (Exception e) {
            return null;
        }
    }

    private static void awaitLeaders(String topic, java.util.function.IntPredicate moved) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline) {
            if (moved.test(0) && moved.test(1) && moved.test(2)) {
                return;
            }
            Thread.sleep(200);
        }
        throw new AssertionError("leaders did not change: " + leaders(topic));
    }
}
