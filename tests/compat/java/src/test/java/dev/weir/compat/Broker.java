package dev.weir.compat;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.stream.Stream;

/**
 * One single-node broker for one test class: Weir ({@code $WEIR_BIN serve ...}) by default,
 * Apache Kafka ({@code tools/kafka/kafka.sh}) when {@code WEIR_TEST_BROKER=kafka}.
 *
 * <p>Ports are picked free on 127.0.0.1, data lives in a fresh temp dir, and the broker is
 * stopped by {@link #close()} (and by a JVM shutdown hook if a run is aborted). The broker's
 * log is copied to {@code target/broker-logs/NAME.log} when it is closed.
 */
public final class Broker implements Target {
    public enum Kind { WEIR, KAFKA }

    private static final Duration START_TIMEOUT = Duration.ofSeconds(90);
    private static final Duration STOP_TIMEOUT = Duration.ofSeconds(30);

    public final Kind kind;
    public final String name;
    public final int port;
    /** Weir: the admin HTTP port; Kafka: the controller port. */
    public final int secondPort;
    /** 1 unless the broker is one of a cluster's. */
    public final int nodeId;
    private final Path root;
    private final Path dataDir;
    private final Path logFile;
    /**
     * Weir only: flags added to {@code weir serve} and environment added to ours (a single
     * broker's is filled in by {@link #start(String, Function)} before it starts).
     */
    private final List<String> args;
    private final Map<String, String> env;
    /** Kafka only: server.properties overrides ({@code kafka.sh start --prop}), in order. */
    private final List<String> kafkaProps = new ArrayList<>();
    private Process weir; // Weir only
    private boolean running;
    /** A cluster's broker is started and stopped by the cluster program, as its broker index. */
    private final Cluster cluster;
    private final int index;
    /** Null for a cluster's broker: the cluster's hook stops it, before the stores. */
    private final Thread shutdownHook;

    private Broker(String name) throws IOException {
        this(kind(), name, Files.createTempDirectory("weir-compat-java-" + name + "-"), 1, freePorts(2),
                List.of(), Map.of(), true);
    }

    private Broker(Kind kind, String name, Path root, int nodeId, int[] ports, List<String> args,
            Map<String, String> env, boolean hook) {
        this(kind, name, root, nodeId, ports, args, env, hook, null, -1,
                kind == Kind.WEIR ? root.resolve("weir.log") : root.resolve("data").resolve("kafka.log"));
    }

    private Broker(Kind kind, String name, Path root, int nodeId, int[] ports, List<String> args,
            Map<String, String> env, boolean hook, Cluster cluster, int index, Path logFile) {
        this.kind = kind;
        this.cluster = cluster;
        this.index = index;
        this.name = name;
        this.nodeId = nodeId;
        this.args = List.copyOf(args);
        this.env = new HashMap<>(env);
        this.port = ports[0];
        this.secondPort = ports[1];
        this.root = root;
        this.dataDir = root.resolve("data");
        this.logFile = logFile;
        if (hook) {
            this.shutdownHook = new Thread(() -> {
                try {
                    stop();
                } catch (Exception ignored) {
                    // best effort on an aborted run
                }
            }, "stop-broker-" + name);
            Runtime.getRuntime().addShutdownHook(shutdownHook);
        } else {
            this.shutdownHook = null;
        }
    }

    /** What the tests run against: {@code WEIR_TEST_BROKER} (weir, the default, or kafka). */
    static Kind kind() {
        String sel = System.getenv().getOrDefault("WEIR_TEST_BROKER", "weir").trim().toLowerCase();
        return switch (sel) {
            case "", "weir" -> Kind.WEIR;
            case "kafka" -> Kind.KAFKA;
            default -> throw new IllegalArgumentException("WEIR_TEST_BROKER must be weir or kafka, not " + sel);
        };
    }

    /**
     * Broker {@code index} of a cluster, as the cluster program started it (data and log in
     * {@code root}); the program starts and stops it, and the cluster's hook stops the program.
     */
    static Broker ofCluster(Cluster cluster, int index, String name, Path root, int nodeId, int port, int adminPort,
            Path log) {
        return new Broker(Kind.WEIR, name, root, nodeId, new int[] {port, adminPort}, List.of(), Map.of(), false,
                cluster, index, log);
    }

    /** Starts a fresh broker; the caller closes it. */
    public static Broker start(String name) throws Exception {
        return start(name, b -> Map.of());
    }

    /**
     * Weir only: starts a fresh broker whose {@code weir serve} also gets the environment
     * {@code env} makes for it, from its ports and before it starts (e.g. {@code
     * WEIR_SECURITY_LISTENERS} with more listeners beside the PLAINTEXT one on {@link #port},
     * which {@link #bootstrap()} names). The caller closes it.
     */
    public static Broker start(String name, Function<Broker, Map<String, String>> env) throws Exception {
        return start(name, env, b -> Map.of());
    }

    /**
     * Starts a fresh broker configured for its kind: a Weir broker's {@code weir serve} gets
     * the environment {@code weirEnv} makes for it, a Kafka broker's server.properties the
     * overrides {@code kafkaProps} makes (both from its ports, before it starts; e.g. more
     * listeners beside the PLAINTEXT one on {@link #port}). The caller closes it.
     */
    public static Broker start(String name, Function<Broker, Map<String, String>> weirEnv,
            Function<Broker, Map<String, String>> kafkaProps) throws Exception {
        Broker b = new Broker(name);
        try {
            if (b.kind == Kind.WEIR) {
                b.env.putAll(weirEnv.apply(b));
            } else {
                Map<String, String> props = kafkaProps.apply(b);
                if (props.isEmpty()) {
                    Map<String, String> extra = weirEnv.apply(b);
                    if (!extra.isEmpty()) {
                        throw new IllegalStateException("broker environment is for Weir brokers: " + extra.keySet());
                    }
                }
                props.forEach((k, v) -> b.kafkaProps.add(k + "=" + v));
            }
            b.startProcess();
        } catch (Exception | Error e) {
            b.close();
            throw e;
        }
        return b;
    }

    @Override
    public String bootstrap() {
        return "127.0.0.1:" + port;
    }

    @Override
    public Map<Integer, String> nodes() {
        return Map.of(nodeId, bootstrap());
    }

    /**
     * Weir only: the value of one sample of the admin port's Prometheus text ({@code /metrics}),
     * named with its labels as it is printed (e.g. {@code weir_produce_bytes_total}); fails if
     * there is no such sample.
     */
    public double metric(String sample) throws Exception {
        if (kind != Kind.WEIR) {
            throw new IllegalStateException("/metrics is Weir's");
        }
        HttpResponse<String> r = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + secondPort + "/metrics"))
                        .timeout(Duration.ofSeconds(5)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() != 200) {
            throw new IllegalStateException("/metrics of " + name + ": HTTP " + r.statusCode());
        }
        for (String line : r.body().split("\n")) {
            if (line.startsWith(sample + " ")) {
                return Double.parseDouble(line.substring(sample.length() + 1).trim());
            }
        }
        throw new IllegalStateException("no sample " + sample + " in /metrics of " + name);
    }

    /** Stops the broker (SIGTERM) and starts it again on the same data dir and ports. */
    public void restart() throws Exception {
        stop();
        start();
    }

    /** Starts the stopped (or killed) broker again on its data dir and ports. */
    public synchronized void start() throws Exception {
        if (cluster != null) {
            cluster.act("start " + index);
            return;
        }
        if (running) {
            throw new IllegalStateException("broker " + name + " is running");
        }
        startProcess();
    }

    /** Whether the broker process runs. */
    public synchronized boolean alive() {
        if (cluster != null) {
            return cluster.running(index);
        }
        return running && (kind != Kind.WEIR || weir.isAlive());
    }

    /** Weir only: SIGKILL, and waits until the process is gone. */
    public synchronized void kill() throws Exception {
        if (cluster != null) {
            cluster.act("kill " + index);
            return;
        }
        if (!running) {
            return;
        }
        if (kind != Kind.WEIR) {
            throw new IllegalStateException("kill is for Weir brokers");
        }
        running = false;
        weir.destroyForcibly();
        weir.waitFor();
    }

    private synchronized void startProcess() throws Exception {
        Files.createDirectories(dataDir);
        if (kind == Kind.WEIR) {
            String bin = System.getenv("WEIR_BIN");
            if (bin == null || bin.isBlank()) {
                throw new IllegalStateException("WEIR_BIN is not set (path to the weir binary); "
                        + "set WEIR_TEST_BROKER=kafka to run against Apache Kafka instead");
            }
            List<String> cmd = new ArrayList<>(List.of(bin, "serve",
                    "--data-dir", dataDir.toString(),
                    "--listen", "127.0.0.1:" + port,
                    "--admin-listen", "127.0.0.1:" + secondPort));
            cmd.addAll(args);
            ProcessBuilder pb = new ProcessBuilder(cmd)
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
            // Test brokers get a small WAL, not the 2 GiB default.
            pb.environment().put("WEIR_WAL_CAPACITY", Long.toString(64L << 20));
            // The schema registry on a free port, not Confluent's: brokers run side by side.
            pb.environment().put("WEIR_SCHEMA_REGISTRY_LISTEN", "127.0.0.1:0");
            // Consumer groups (KIP-848) learn of new assignments at their next heartbeat.
            pb.environment().put("WEIR_BROKER_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS", "1000");
            // So do streams groups (KIP-1071), whose members are removed 10 s after their last
            // heartbeat (Kafka's minimum is 45 s: a killed instance's tasks wait that long there).
            pb.environment().put("WEIR_BROKER_GROUP_STREAMS_HEARTBEAT_INTERVAL_MS", "1000");
            pb.environment().put("WEIR_BROKER_GROUP_STREAMS_SESSION_TIMEOUT_MS", "10000");
            pb.environment().put("WEIR_BROKER_GROUP_STREAMS_INITIAL_REBALANCE_DELAY_MS", "1000");
            pb.environment().putAll(env);
            weir = pb.start();
            running = true;
            waitWeirReady();
        } else {
            running = true; // kafka.sh may have spawned a broker even if it then fails
            List<String> cmd = new ArrayList<>(List.of("start", "--data-dir", dataDir.toString(),
                    "--port", String.valueOf(port), "--controller-port", String.valueOf(secondPort)));
            for (String prop : kafkaProps) {
                cmd.addAll(List.of("--prop", prop));
            }
            runKafkaSh(START_TIMEOUT.plusSeconds(60), cmd.toArray(String[]::new));
        }
    }

    private void waitWeirReady() throws Exception {
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + secondPort + "/readyz"))
                .timeout(Duration.ofSeconds(2)).GET().build();
        long deadline = System.nanoTime() + START_TIMEOUT.toNanos();
        int lastStatus = -1;
        while (System.nanoTime() < deadline) {
            if (!weir.isAlive()) {
                running = false;
                throw new IllegalStateException("weir exited with code " + weir.exitValue()
                        + " during startup\n" + logTail());
            }
            try {
                HttpResponse<Void> resp = http.send(req, HttpResponse.BodyHandlers.discarding());
                lastStatus = resp.statusCode();
                if (lastStatus == 200) {
                    return;
                }
            } catch (IOException e) {
                // not listening yet
            }
            Thread.sleep(100);
        }
        throw new IllegalStateException("weir not ready within " + START_TIMEOUT.toSeconds()
                + "s (last /readyz status " + lastStatus + ")\n" + logTail());
    }

    /** Stops the broker if it runs. Weir: SIGTERM, and it must exit 0 within 30 s. */
    public synchronized void stop() throws Exception {
        if (cluster != null) {
            try {
                cluster.act("stop " + index);
            } catch (IllegalStateException e) {
                throw new IllegalStateException(e.getMessage() + "\n" + logTail(), e);
            }
            return;
        }
        if (!running) {
            return;
        }
        running = false;
        if (kind == Kind.WEIR) {
            Process p = weir;
            p.destroy(); // SIGTERM
            if (!p.waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS)) {
                p.destroyForcibly();
                p.waitFor(10, TimeUnit.SECONDS);
                throw new IllegalStateException("weir did not exit within " + STOP_TIMEOUT.toSeconds()
                        + "s of SIGTERM (killed)\n" + logTail());
            }
            if (p.exitValue() != 0) {
                throw new IllegalStateException("weir exited with code " + p.exitValue()
                        + " after SIGTERM (expected a clean exit, 0)\n" + logTail());
            }
        } else {
            runKafkaSh(STOP_TIMEOUT.plusSeconds(30), "stop", "--data-dir", dataDir.toString());
        }
    }

    @Override
    public void close() throws Exception {
        try {
            stop();
        } finally {
            try {
                if (shutdownHook != null) {
                    Runtime.getRuntime().removeShutdownHook(shutdownHook);
                }
            } catch (IllegalStateException ignored) {
                // JVM already shutting down
            }
            saveLog();
            if (cluster != null) {
                // The cluster removes its directory.
            } else if (System.getenv("WEIR_TEST_KEEP_DATA") == null) {
                deleteTree(root);
            } else {
                System.err.println("keeping broker data in " + root);
            }
        }
    }

    private void runKafkaSh(Duration timeout, String... args) throws Exception {
        Path script = repoRoot().resolve("tools/kafka/kafka.sh");
        if (!Files.isRegularFile(script)) {
            throw new IllegalStateException("WEIR_TEST_BROKER=kafka but " + script + " does not exist");
        }
        List<String> cmd = new ArrayList<>(List.of("bash", script.toString()));
        cmd.addAll(List.of(args));
        Path out = root.resolve("kafka.sh." + args[0] + ".out");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(out.toFile())).start();
        if (!p.waitFor(timeout.toSeconds(), TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new IllegalStateException("kafka.sh " + args[0] + " timed out\n" + Files.readString(out));
        }
        if (p.exitValue() != 0) {
            throw new IllegalStateException("kafka.sh " + args[0] + " exited " + p.exitValue() + "\n"
                    + Files.readString(out));
        }
    }

    static Path repoRoot() {
        String prop = System.getProperty("weir.repo.root");
        Path p = prop != null ? Paths.get(prop) : Paths.get("../../..");
        return p.toAbsolutePath().normalize();
    }

    String logTail() {
        try {
            if (!Files.exists(logFile)) {
                return "(no log at " + logFile + ")";
            }
            List<String> lines = Files.readAllLines(logFile, StandardCharsets.UTF_8);
            int from = Math.max(0, lines.size() - 60);
            return "---- last lines of " + logFile + " ----\n" + String.join("\n", lines.subList(from, lines.size()));
        } catch (IOException e) {
            return "(could not read " + logFile + ": " + e + ")";
        }
    }

    private void saveLog() {
        try {
            if (Files.exists(logFile)) {
                Path dir = Paths.get("target", "broker-logs");
                Files.createDirectories(dir);
                Files.copy(logFile, dir.resolve(name + "-" + kind.name().toLowerCase() + ".log"),
                        StandardCopyOption.REPLACE_EXISTING);
            }
        } catch (IOException ignored) {
            // logs are a convenience
        }
    }

    /**
     * The file that makes this JVM one run for the harness's port rule: the ports program and
     * every cluster program started from here share it, so no port is handed out twice.
     */
    static final Path PORTS_FILE = portsFile();

    private static Path portsFile() {
        String given = System.getenv("WEIR_HARNESS_PORTS_FILE");
        if (given != null && !given.isEmpty()) {
            return Paths.get(given);
        }
        Path f = Paths.get(System.getProperty("java.io.tmpdir"), "weir-compat-java-ports-" + ProcessHandle.current().pid());
        f.toFile().deleteOnExit();
        return f;
    }

    /**
     * n loopback ports by the harness's one port rule ({@code python3 tests/harness/weir_harness
     * ports N}): free when picked, none handed out twice in this run.
     */
    static int[] freePorts(int n) throws IOException {
        ProcessBuilder pb = new ProcessBuilder("python3", repoRoot().resolve("tests/harness/weir_harness").toString(),
                "ports", String.valueOf(n)).redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().put("WEIR_HARNESS_PORTS_FILE", PORTS_FILE.toString());
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        try {
            if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
                throw new IOException("pick " + n + " ports: the ports program failed: " + out);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("pick " + n + " ports: interrupted", e);
        }
        String[] words = out.replaceAll("[\\[\\]\\s]", "").split(",");
        if (words.length != n) {
            throw new IOException("pick " + n + " ports: unexpected answer " + out);
        }
        int[] ports = new int[n];
        for (int i = 0; i < n; i++) {
            ports[i] = Integer.parseInt(words[i]);
        }
        return ports;
    }

    static void deleteTree(Path p) throws IOException {
        if (!Files.exists(p)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(p)) {
            for (Path q : walk.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(q);
            }
        }
    }
}
