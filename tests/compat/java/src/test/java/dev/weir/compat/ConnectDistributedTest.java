package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.utils.internals.Exit;
import org.apache.kafka.connect.cli.ConnectDistributed;
import org.apache.kafka.connect.runtime.Connect;
import org.apache.kafka.connect.runtime.distributed.DistributedHerder;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Kafka Connect in distributed mode: a worker runs in this JVM (ConnectDistributed.startConnect,
 * as connect-distributed.sh does) with its REST listener on a free loopback port; it creates its
 * config, offset and status topics itself (compacted, replication factor 1). A file source
 * connector (LineFileSource, which keeps its offsets as Kafka's FileStreamSource does), created
 * through the REST API, copies a file's lines into a one-partition topic:
 * all 500 lines arrive, in order; the connector and its task report RUNNING; 300 lines appended
 * arrive too; the source offset (GET /connectors/NAME/offsets) reaches the file's length. The
 * worker is stopped, 200 more lines are appended, and a second worker with the same group and
 * topics starts: it reads the connector's config back from the config topic (it is not created
 * again), runs it, and its task goes on from the offset in the offset topic: the topic ends up
 * with each of the 1,000 lines exactly once, in order. DescribeConfigs shows the three internal
 * topics with cleanup.policy=compact. The second test does the same with exactly-once source
 * support (exactly.once.source.support=enabled, the connector with exactly.once.support=required):
 * the worker fences zombies (Admin.fenceProducers), its task writes records and offsets in
 * transactions, and the topic's end offset counts the transaction markers.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class ConnectDistributedTest {
    private static final Duration DEADLINE = Duration.ofSeconds(60);
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        // A failing worker calls Exit.exit: it must fail the test, not end the test JVM.
        Exit.setExitProcedure((code, msg) -> {
            throw new IllegalStateException("Connect called Exit.exit(" + code + "): " + msg);
        });
        Exit.setHaltProcedure((code, msg) -> {
            throw new IllegalStateException("Connect called Exit.halt(" + code + "): " + msg);
        });
        broker = Target.start("ConnectDistributedTest");
        admin = Clients.admin(broker);
    }

    @AfterAll
    static void stop() throws Exception {
        try {
            if (admin != null) {
                admin.close(Duration.ofSeconds(10));
            }
        } finally {
            Exit.resetExitProcedure();
            Exit.resetHaltProcedure();
            if (broker != null) {
                broker.close();
            }
        }
    }

    /** A Connect worker in distributed mode, in this JVM, with its REST listener on a free port. */
    private static final class Worker implements AutoCloseable {
        final Connect<DistributedHerder> connect;
        final String url;
        final String id;

        Worker(Map<String, String> common) throws IOException {
            int port = Broker.freePorts(1)[0];
            Map<String, String> props = new HashMap<>(common);
            props.put("listeners", "http://127.0.0.1:" + port);
            props.put("rest.advertised.host.name", "127.0.0.1");
            props.put("rest.advertised.port", String.valueOf(port));
            this.url = "http://127.0.0.1:" + port;
            this.id = "127.0.0.1:" + port;
            this.connect = new ConnectDistributed().startConnect(props);
        }

        @Override
        public void close() {
            connect.stop();
            connect.awaitStop();
        }
    }

    private record Reply(int status, String body) {
        JsonNode json() throws IOException {
            return JSON.readTree(body);
        }
    }

    private static Reply http(String method, String url, String body) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(30))
                .header("Accept", "application/json");
        if (body != null) {
            b.header("Content-Type", "application/json").method(method, HttpRequest.BodyPublishers.ofString(body));
        } else {
            b.method(method, HttpRequest.BodyPublishers.noBody());
        }
        HttpResponse<String> r = HTTP.send(b.build(), HttpResponse.BodyHandlers.ofString());
        return new Reply(r.statusCode(), r.body());
    }

    /** GET url until it answers 200 and {@code done} holds for its JSON; fails with the last answer at the deadline. */
    private static JsonNode awaitJson(String what, String url, java.util.function.Predicate<JsonNode> done) throws Exception {
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        String last = "(no answer)";
        while (true) {
            try {
                Reply r = http("GET", url, null);
                last = r.status + " " + r.body;
                if (r.status == 200) {
                    JsonNode j = r.json();
                    if (done.test(j)) {
                        return j;
                    }
                }
            } catch (IOException e) {
                last = e.toString();
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError(what + ": not within " + DEADLINE.toSeconds() + "s; last answer of GET " + url
                        + ": " + last);
            }
            Thread.sleep(200);
        }
    }

    /** PUT /connectors/NAME/config, again while the worker answers 409 (joining the group, rebalancing) or is not up yet. */
    private static void createConnector(Worker w, String name, Map<String, String> config) throws Exception {
        String body = JSON.writeValueAsString(config);
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        while (true) {
            String last;
            try {
                Reply r = http("PUT", w.url + "/connectors/" + name + "/config", body);
                if (r.status == 201 || r.status == 200) {
                    return;
                }
                if (r.status != 409 && r.status != 404 && r.status < 500) {
                    throw new AssertionError("PUT /connectors/" + name + "/config: " + r.status + " " + r.body);
                }
                last = r.status + " " + r.body;
            } catch (IOException e) {
                last = e.toString();
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("PUT /connectors/" + name + "/config: not created within " + DEADLINE.toSeconds()
                        + "s; last answer: " + last);
            }
            Thread.sleep(200);
        }
    }

    /** Waits until the connector and its one task are RUNNING on worker w (GET /connectors/NAME/status). */
    private static JsonNode awaitRunning(Worker w, String name) throws Exception {
        return awaitJson(name + " RUNNING with its task on " + w.id, w.url + "/connectors/" + name + "/status", j ->
                "RUNNING".equals(j.path("connector").path("state").asText())
                        && w.id.equals(j.path("connector").path("worker_id").asText())
                        && j.path("tasks").size() == 1
                        && "RUNNING".equals(j.path("tasks").get(0).path("state").asText())
                        && w.id.equals(j.path("tasks").get(0).path("worker_id").asText()));
    }

    /** Waits until GET /connectors/NAME/offsets shows the file's source offset at {@code position}. */
    private static void awaitOffset(Worker w, String name, Path file, long position) throws Exception {
        awaitJson(name + " source offset at " + position, w.url + "/connectors/" + name + "/offsets", j -> {
            JsonNode os = j.path("offsets");
            return os.size() == 1
                    && file.toString().equals(os.get(0).path("partition").path("filename").asText())
                    && os.get(0).path("offset").path("position").asLong(-1) == position;
        });
    }

    private static List<String> lines(int from, int to) {
        List<String> out = new ArrayList<>();
        for (int i = from; i < to; i++) {
            out.add(String.format("line %05d of the file source", i));
        }
        return out;
    }

    private static void append(Path file, List<String> lines) throws IOException {
        StringBuilder sb = new StringBuilder();
        for (String l : lines) {
            sb.append(l).append('\n');
        }
        Files.writeString(file, sb, StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    /** Polls c until it holds n values in all; fails at the deadline. */
    private static void awaitValues(KafkaConsumer<String, String> c, List<String> got, int n) {
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        while (got.size() < n) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("the topic has " + got.size() + " of " + n + " lines after "
                        + DEADLINE.toSeconds() + "s: " + tail(got));
            }
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                got.add(r.value());
            }
        }
    }

    /** Polls c up to the topic partition's end offset (under its isolation level). */
    private static void readToEnd(KafkaConsumer<String, String> c, TopicPartition tp, List<String> got) {
        long end = c.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp);
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        while (c.position(tp, Duration.ofSeconds(30)) < end) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError(tp + ": end offset " + end + " not reached within " + DEADLINE.toSeconds() + "s");
            }
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                got.add(r.value());
            }
        }
    }

    private static String tail(List<String> got) {
        return got.isEmpty() ? "(none)" : "last " + got.get(got.size() - 1);
    }

    private static void assertLines(String what, List<String> want, List<String> got) {
        if (got.equals(want)) {
            return;
        }
        String diff = "";
        for (int i = 0; i < Math.min(got.size(), want.size()); i++) {
            if (!got.get(i).equals(want.get(i))) {
                diff = "; first difference at #" + i + ": " + got.get(i) + ", want " + want.get(i);
                break;
            }
        }
        throw new AssertionError(what + ": " + got.size() + " lines (" + got.stream().distinct().count()
                + " distinct), want " + want.size() + " in order" + diff);
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
    void fileSourceAcrossAWorkerRestart() throws Exception {
        fileSource(false);
    }

    @Test
    void exactlyOnceFileSourceAcrossAWorkerRestart() throws Exception {
        fileSource(true);
    }

    private void fileSource(boolean eos) throws Exception {
        String prefix = eos ? "connect-eos" : "connect";
        String group = Clients.unique(prefix + "-cluster");
        String topic = Clients.unique(prefix + "-lines");
        String connector = Clients.unique(prefix + "-file-source");
        Map<String, String> internal = new LinkedHashMap<>();
        internal.put("config", group + "-configs");
        internal.put("offset", group + "-offsets");
        internal.put("status", group + "-status");
        Clients.createTopic(admin, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        Path dir = Files.createTempDirectory("weir-compat-connect-");
        Path file = dir.resolve("input.txt");

        Map<String, String> worker = new HashMap<>();
        worker.put("bootstrap.servers", broker.bootstrap());
        worker.put("group.id", group);
        worker.put("config.storage.topic", internal.get("config"));
        worker.put("offset.storage.topic", internal.get("offset"));
        worker.put("status.storage.topic", internal.get("status"));
        worker.put("config.storage.replication.factor", "1");
        worker.put("offset.storage.replication.factor", "1");
        worker.put("status.storage.replication.factor", "1");
        worker.put("key.converter", "org.apache.kafka.connect.storage.StringConverter");
        worker.put("value.converter", "org.apache.kafka.connect.storage.StringConverter");
        worker.put("offset.flush.interval.ms", "500");
        worker.put("plugin.discovery", "service_load");
        worker.put("session.timeout.ms", "10000");
        worker.put("heartbeat.interval.ms", "1000");
        if (eos) {
            worker.put("exactly.once.source.support", "enabled");
        }
        Map<String, String> config = new LinkedHashMap<>();
        config.put("connector.class", LineFileSource.class.getName());
        config.put("tasks.max", "1");
        config.put("file", file.toString());
        config.put("topic", topic);
        if (eos) {
            config.put("exactly.once.support", "required");
        }

        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, null, "compat-connect-reader", Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 1000))) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));

            // ---- worker 1: the connector created through REST; 500 lines, then 300 more -------
            append(file, lines(0, 500));
            try (Worker w1 = new Worker(worker)) {
                createConnector(w1, connector, config);
                awaitRunning(w1, connector);
                awaitValues(c, got, 500);
                assertLines("the first 500 lines", lines(0, 500), got);
                append(file, lines(500, 800));
                awaitValues(c, got, 800);
                assertLines("after 300 lines appended", lines(0, 800), got);
                // The task's source offset is in the offset topic: the whole file.
                awaitOffset(w1, connector, file, Files.size(file));
            }

            // ---- the internal topics the worker created -----------------------------------------
            Map<String, TopicDescription> created = admin.describeTopics(internal.values()).allTopicNames()
                    .get(30, TimeUnit.SECONDS);
            for (String t : internal.values()) {
                ConfigEntry policy = topicConfig(t, "cleanup.policy");
                assertEquals("compact", policy.value(), t + " cleanup.policy");
                assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, policy.source(), t + " cleanup.policy source");
            }
            assertEquals(1, created.get(internal.get("config")).partitions().size(), "config topic partitions");
            assertEquals(25, created.get(internal.get("offset")).partitions().size(), "offset topic partitions");
            assertEquals(5, created.get(internal.get("status")).partitions().size(), "status topic partitions");

            // ---- worker 2: same group and topics; 200 lines appended while no worker ran --------
            append(file, lines(800, 1000));
            try (Worker w2 = new Worker(worker)) {
                // Not created again: the config comes from the config topic.
                JsonNode names = awaitJson("the connector listed by worker 2", w2.url + "/connectors",
                        j -> j.size() == 1);
                assertEquals(connector, names.get(0).asText(), "GET /connectors on worker 2");
                JsonNode readBack = awaitJson("the connector's config on worker 2",
                        w2.url + "/connectors/" + connector + "/config", j -> j.size() > 0);
                for (Map.Entry<String, String> e : config.entrySet()) {
                    assertEquals(e.getValue(), readBack.path(e.getKey()).asText(null), "config " + e.getKey() + " read back");
                }
                awaitRunning(w2, connector);
                awaitValues(c, got, 1000);
                // Everything the task produced is in the topic before its offset covers it.
                awaitOffset(w2, connector, file, Files.size(file));
                readToEnd(c, tp, got);
                assertLines("after the restart", lines(0, 1000), got);
            }
        } finally {
            Broker.deleteTree(dir);
        }
        // Exactly-once: every batch is a transaction, its marker takes an offset.
        long hw = TxnClients.awaitSettled(admin, topic, 1).get(0);
        if (eos) {
            assertTrue(hw > 1000, "end offset " + hw + ": want the 1,000 lines and the transaction markers");
        } else {
            assertEquals(1000, hw, "end offset: the 1,000 lines, no markers");
        }
    }
}
