package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Topic administration: create, describe, configs, auto-creation by a producer. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class AdminTopicsTest {
    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.start("AdminTopicsTest");
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

    @Test
    void describeClusterShowsEveryNode() throws Exception {
        DescribeClusterResult r = admin.describeCluster();
        Collection<Node> nodes = r.nodes().get();
        // Every broker of the target (one, or a cluster's three), each at its listen address.
        Map<Integer, String> got = new HashMap<>();
        for (Node n : nodes) {
            got.put(n.id(), n.host() + ":" + n.port());
        }
        assertEquals(broker.nodes(), got, "nodes: " + nodes);
        String clusterId = r.clusterId().get();
        assertNotNull(clusterId, "cluster id");
        assertFalse(clusterId.isBlank(), "cluster id");
    }

    @Test
    void createDescribeAndCreateAgain() throws Exception {
        String topic = Clients.unique("admin-topic");
        CreateTopicsResult created = admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1)));
        created.all().get();
        assertEquals(4, created.numPartitions(topic).get(), "CreateTopics response partitions");
        assertEquals(1, created.replicationFactor(topic).get(), "CreateTopics response replication factor");
        Uuid id = created.topicId(topic).get();
        assertNotEquals(Uuid.ZERO_UUID, id, "CreateTopics returns a topic id");
        Clients.awaitTopic(admin, topic, 4);

        ExecutionException again = assertThrows(ExecutionException.class,
                () -> admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1))).all().get());
        assertInstanceOf(TopicExistsException.class, again.getCause(),
                "creating an existing topic must fail with TOPIC_ALREADY_EXISTS: " + again.getCause());

        Set<String> names = admin.listTopics().names().get();
        assertTrue(names.contains(topic), "listTopics " + names + " contains " + topic);

        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        assertEquals(topic, d.name());
        assertFalse(d.isInternal());
        assertEquals(id, d.topicId(), "describe and create agree on the topic id");
        List<TopicPartitionInfo> parts = d.partitions();
        assertEquals(4, parts.size(), "partitions: " + parts);
        for (int i = 0; i < 4; i++) {
            TopicPartitionInfo p = parts.get(i);
            assertEquals(i, p.partition(), "partition order");
            assertNotNull(p.leader(), "partition " + i + " has a leader");
            int leader = p.leader().id();
            assertTrue(broker.nodes().containsKey(leader), "partition " + i + " leader " + leader);
            assertEquals(List.of(leader), p.replicas().stream().map(Node::id).toList(), "replicas of " + i);
            assertEquals(List.of(leader), p.isr().stream().map(Node::id).toList(), "isr of " + i);
        }

        // Describe by id as well as by name.
        TopicDescription byId = admin.describeTopics(
                org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(id))).allTopicIds().get().get(id);
        assertEquals(topic, byId.name(), "describe by topic id");
    }

    @Test
    void createWithBrokerDefaultsAndInitialConfig() throws Exception {
        String topic = Clients.unique("defaults-topic");
        NewTopic nt = new NewTopic(topic, Optional.empty(), Optional.empty())
                .configs(Map.of("retention.ms", "7200000"));
        admin.createTopics(List.of(nt)).all().get();
        Clients.awaitTopic(admin, topic, -1);
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        assertTrue(d.partitions().size() >= 1, "default partition count");
        waitConfig(topic, "retention.ms", "7200000 set at creation",
                e -> "7200000".equals(e.value()) && e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
    }

    @Test
    void alterAndDescribeTopicConfig() throws Exception {
        String topic = Clients.unique("config-topic");
        Clients.createTopic(admin, topic, 1);
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);

        ConfigEntry before = topicConfig(topic).get("retention.ms");
        assertNotNull(before, "retention.ms is described before any change");
        assertNotEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, before.source(),
                "a new topic has no topic-level retention.ms");
        assertNotEquals("123456789", before.value());

        admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "123456789"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "2000000"), AlterConfigOp.OpType.SET))))
                .all().get();
        waitConfig(topic, "retention.ms", "123456789 from a topic-level SET",
                e -> "123456789".equals(e.value()) && e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
        waitConfig(topic, "max.message.bytes", "2000000", e -> "2000000".equals(e.value()));

        // A value that is not a number is refused and changes nothing.
        ExecutionException bad = assertThrows(ExecutionException.class, () -> admin.incrementalAlterConfigs(
                Map.of(res, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "not-a-number"),
                        AlterConfigOp.OpType.SET)))).all().get());
        assertInstanceOf(InvalidConfigurationException.class, bad.getCause(), "bad value: " + bad.getCause());
        assertEquals("123456789", topicConfig(topic).get("retention.ms").value(), "unchanged after a bad SET");

        // DELETE goes back to the default.
        admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE))))
                .all().get();
        waitConfig(topic, "retention.ms", "the default " + before.value() + " after DELETE",
                e -> before.value().equals(e.value()) && e.source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
        assertEquals("2000000", topicConfig(topic).get("max.message.bytes").value(),
                "DELETE of one key leaves the others");
    }

    @Test
    void producingToAnUnknownTopicCreatesIt() throws Exception {
        String topic = Clients.unique("auto-created");
        assertFalse(admin.listTopics().names().get().contains(topic));
        RecordMetadata md;
        try (KafkaProducer<String, String> p = Clients.producer(broker)) {
            md = p.send(new ProducerRecord<>(topic, "k", "hello")).get(60, TimeUnit.SECONDS);
        }
        assertEquals(0, md.offset(), "first record of an auto-created topic");
        Clients.awaitTopic(admin, topic, -1);
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        assertTrue(d.partitions().size() >= 1, "auto-created topic has partitions");
        assertTrue(md.partition() < d.partitions().size());

        TopicPartition tp = new TopicPartition(topic, md.partition());
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, null, "auto-reader")) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 30_000;
            while (got.isEmpty() && System.currentTimeMillis() < deadline) {
                c.poll(Duration.ofMillis(200)).forEach(got::add);
            }
            assertEquals(1, got.size(), "records read back: " + got);
            assertEquals("k", got.get(0).key());
            assertEquals("hello", got.get(0).value());
            assertEquals(0, got.get(0).offset());
        }
    }

    /** Waits (up to 15 s: Kafka applies config changes asynchronously) until the entry satisfies ok. */
    private static void waitConfig(String topic, String key, String what,
            java.util.function.Predicate<ConfigEntry> ok) throws Exception {
        long deadline = System.currentTimeMillis() + 15_000;
        while (true) {
            ConfigEntry e = topicConfig(topic).get(key);
            if (e != null && ok.test(e)) {
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new AssertionError(key + " of " + topic + " is " + e + "; want " + what);
            }
            Thread.sleep(200);
        }
    }

    private static Map<String, ConfigEntry> topicConfig(String topic) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = admin.describeConfigs(List.of(res)).all().get().get(res);
        Map<String, ConfigEntry> m = new java.util.HashMap<>();
        for (ConfigEntry e : c.entries()) {
            m.put(e.name(), e);
        }
        return m;
    }
}
