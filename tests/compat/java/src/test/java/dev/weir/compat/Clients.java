package dev.weir.compat;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Client factories with the settings every test shares. */
final class Clients {
    private Clients() {}

    /**
     * Waits (up to 15 s: Kafka propagates metadata asynchronously) until the topic is described
     * with n partitions (n &lt; 0: any number), each with a leader.
     */
    static void awaitTopic(Admin admin, String topic, int n) throws Exception {
        long deadline = System.currentTimeMillis() + 15_000;
        String state;
        while (true) {
            try {
                org.apache.kafka.clients.admin.TopicDescription d =
                        admin.describeTopics(java.util.List.of(topic)).allTopicNames().get().get(topic);
                boolean led = d.partitions().stream().allMatch(p -> p.leader() != null && p.leader().id() >= 0);
                if ((n < 0 || d.partitions().size() == n) && led && !d.partitions().isEmpty()) {
                    return;
                }
                state = d.toString();
            } catch (java.util.concurrent.ExecutionException e) {
                state = e.getCause().toString();
            }
            if (System.currentTimeMillis() > deadline) {
                throw new AssertionError("topic " + topic + " not ready in metadata: " + state);
            }
            Thread.sleep(100);
        }
    }

    /** Creates a topic (replication factor 1) and waits until metadata shows it. */
    static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(java.util.List.of(
                new org.apache.kafka.clients.admin.NewTopic(topic, partitions, (short) 1))).all().get();
        awaitTopic(admin, topic, partitions);
    }

    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static Admin admin(Target b) {
        return admin(b, Map.of());
    }

    static Admin admin(Target b, Map<String, Object> extra) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "compat-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15_000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
        p.putAll(extra);
        return Admin.create(p);
    }

    /** Idempotent producer, acks=all. */
    static KafkaProducer<String, String> producer(Target b, Map<String, Object> extra) {
        Map<String, Object> p = new HashMap<>();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "compat-producer");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 60_000);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15_000);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30_000);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    static KafkaProducer<String, String> producer(Target b) {
        return producer(b, Map.of());
    }

    /** Consumer without auto-commit; groupId may be null for a group-less (assign) consumer. */
    static KafkaConsumer<String, String> consumer(Target b, String groupId, String clientId, Map<String, Object> extra) {
        Map<String, Object> p = consumerConfig(b, groupId, clientId);
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    static KafkaConsumer<String, String> consumer(Target b, String groupId, String clientId) {
        return consumer(b, groupId, clientId, Map.of());
    }

    /**
     * A member of a KIP-848 consumer group ({@code group.protocol=consumer}), without auto-commit.
     * The coordinator sets its session timeout and heartbeat interval and runs the assignor
     * ({@code group.remote.assignor} picks one), so the classic settings of those are left out:
     * the client refuses them with this protocol.
     */
    static KafkaConsumer<String, String> consumerProtocol(Target b, String groupId, String clientId,
            Map<String, Object> extra) {
        Map<String, Object> p = consumerConfig(b, groupId, clientId);
        p.remove(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG);
        p.remove(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    private static Map<String, Object> consumerConfig(Target b, String groupId, String clientId) {
        Map<String, Object> p = new HashMap<>();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        if (groupId != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        }
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10_000);
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 50);
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15_000);
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return p;
    }
}
