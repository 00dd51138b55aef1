package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The cluster harness itself (runs with {@code WEIR_COMPAT_TARGET=cluster} only): three brokers
 * on one PostgreSQL and one s3s-fs answer on their own ports; records go through one broker
 * and its uploads land in s3s-fs; a broker stopped (SIGTERM) or killed and started again keeps
 * its address; a fourth joins as node 4.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ClusterHarnessTest {
    /** Broker b answers Metadata (after ApiVersions) on its Kafka port, naming itself, and /healthz on its admin port. */
    private static void serves(Broker b) throws Exception {
        try (Admin a = Clients.admin(b)) {
            List<Integer> ids = a.describeCluster().nodes().get(30, TimeUnit.SECONDS).stream().map(Node::id).toList();
            assertTrue(ids.contains(b.nodeId), "broker " + b.nodeId + " in its own metadata: " + ids);
        }
        HttpResponse<Void> r = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + b.secondPort + "/healthz"))
                        .timeout(Duration.ofSeconds(5)).build(),
                HttpResponse.BodyHandlers.discarding());
        assertEquals(200, r.statusCode(), "/healthz of broker " + b.nodeId);
    }

    @Test
    void brokersServeStopKillStartAndJoin() throws Exception {
        Assumptions.assumeTrue(Target.clusterMode(), "the cluster harness runs with WEIR_COMPAT_TARGET=cluster");
        try (Cluster c = Cluster.start("ClusterHarnessTest", Cluster.SIZE)) {
            assertEquals(List.of(1, 2, 3), c.brokers.stream().map(b -> b.nodeId).toList());
            assertEquals(3, c.bootstrap().split(",").length);
            for (Broker b : c.brokers) {
                serves(b);
            }

            // Through one broker (the brokers do not share partitions before the cluster code).
            Broker b0 = c.brokers.get(0);
            String topic = Clients.unique("cluster-harness");
            try (Admin a = Clients.admin(b0)) {
                Clients.createTopic(a, topic, 1);
            }
            List<String> sent = new ArrayList<>();
            try (KafkaProducer<String, String> p = Clients.producer(b0)) {
                for (int i = 0; i < 100; i++) {
                    sent.add("v" + i);
                    p.send(new ProducerRecord<>(topic, 0, "k", "v" + i));
                }
                p.flush();
            }
            List<String> got = new ArrayList<>();
            try (KafkaConsumer<String, String> cons = Clients.consumer(b0, null, "harness-reader")) {
                TopicPartition tp = new TopicPartition(topic, 0);
                cons.assign(List.of(tp));
                cons.seekToBeginning(List.of(tp));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (got.size() < sent.size() && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : cons.poll(Duration.ofMillis(200))) {
                        got.add(r.value());
                    }
                }
            }
            assertEquals(sent, got, "records read back through broker 1");

            c.stop(0);
            try (Stream<Path> files = Files.walk(c.s3Root())) {
                assertTrue(files.anyMatch(Files::isRegularFile), "the stopped broker uploaded to s3s-fs");
            }
            c.start(0);
            serves(b0);

            Broker b1 = c.brokers.get(1);
            int port = b1.port;
            c.kill(1);
            assertFalse(b1.alive(), "killed broker still runs");
            assertThrows(IOException.class, () -> {
                try (Socket s = new Socket()) {
                    s.connect(new InetSocketAddress("127.0.0.1", port), 2000);
                }
            }, "a killed broker still listens");
            c.start(1);
            assertEquals(port, b1.port);
            serves(b1);

            Broker b3 = c.addBroker();
            assertEquals(4, b3.nodeId);
            assertEquals(4, c.nodes().size());
            serves(b3);
        }
    }
}
