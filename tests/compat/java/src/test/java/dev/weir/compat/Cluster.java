package dev.weir.compat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Collectors;

/**
 * Weir brokers on this machine sharing one private PostgreSQL and one {@code s3s-fs}, started by
 * the one test-cluster program every language's harness uses
 * ({@code python3 tests/harness/weir_harness cluster}, which owns the port rule and how
 * PostgreSQL, s3s-fs and the brokers are started). It prints the cluster as one line of JSON,
 * takes commands on its standard input ({@code stop N}, {@code kill N}, {@code start N},
 * {@code add}, {@code describe}), each answered with the cluster as JSON, and stops everything
 * when its standard input closes.
 *
 * <p>{@link #close()} (and a JVM shutdown hook on an aborted run) stops the brokers, then the
 * program, and removes the temp dir.
 */
public final class Cluster implements Target {
    public static final int SIZE = 3;
    /** How long the program may take to start a cluster, or to carry out one command. */
    private static final Duration START_WAIT = Duration.ofMinutes(3);
    private static final Duration ACT_WAIT = Duration.ofMinutes(2);
    private static final ObjectMapper JSON = new ObjectMapper();

    public final String name;
    public final List<Broker> brokers = new ArrayList<>();
    private final Path tmp;
    private final Path root;
    private final Thread shutdownHook;
    private final ExecutorService reader = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "cluster-program-reader");
        t.setDaemon(true);
        return t;
    });
    private Process program;
    private Writer commands;
    private BufferedReader answers;

    private Cluster(String name) throws IOException {
        this.name = name;
        this.tmp = Files.createTempDirectory("weir-compat-java-" + name + "-");
        this.root = tmp.resolve("cluster");
        // PostgreSQL may run as another user under this directory.
        Files.setPosixFilePermissions(tmp, PosixFilePermissions.fromString("rwx--x--x"));
        this.shutdownHook = new Thread(this::stopProgram, "stop-cluster-" + name);
        Runtime.getRuntime().addShutdownHook(shutdownHook);
    }

    /** Starts PostgreSQL, s3s-fs and {@code n} brokers (node ids 1..n, each ready); the caller closes it. */
    public static Cluster start(String name, int n) throws Exception {
        Cluster c = new Cluster(name);
        try {
            c.launch(n);
        } catch (Exception | Error e) {
            c.close();
            throw e;
        }
        return c;
    }

    private void launch(int n) throws Exception {
        Path script = Broker.repoRoot().resolve("tests/harness/weir_harness");
        ProcessBuilder pb = new ProcessBuilder("python3", script.toString(), "cluster", "--brokers", String.valueOf(n),
                "--dir", root.toString(), "--keep")
                .redirectError(ProcessBuilder.Redirect.appendTo(tmp.resolve("harness.log").toFile()));
        pb.environment().put("WEIR_HARNESS_PORTS_FILE", Broker.PORTS_FILE.toString());
        program = pb.start();
        commands = new OutputStreamWriter(program.getOutputStream(), StandardCharsets.UTF_8);
        answers = new BufferedReader(new InputStreamReader(program.getInputStream(), StandardCharsets.UTF_8));
        update(answer(START_WAIT));
    }

    /** The program's next line, as JSON; an error if it reports one. */
    private JsonNode answer(Duration wait) throws Exception {
        Future<String> line = reader.submit(answers::readLine);
        String text;
        try {
            text = line.get(wait.toMillis(), TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            line.cancel(true);
            throw new IllegalStateException("no answer from the cluster program within " + wait.toSeconds() + " s\n"
                    + harnessLog());
        }
        if (text == null) {
            throw new IllegalStateException("the cluster program exited\n" + harnessLog());
        }
        JsonNode d = JSON.readTree(text);
        if (d.hasNonNull("error")) {
            throw new IllegalStateException(d.get("error").asText());
        }
        return d;
    }

    private String harnessLog() {
        try {
            return Files.readString(tmp.resolve("harness.log"));
        } catch (IOException e) {
            return "(no harness log: " + e + ")";
        }
    }

    /** Sends one command and takes in the cluster it answers with. */
    synchronized JsonNode act(String command) throws Exception {
        commands.write(command + "\n");
        commands.flush();
        JsonNode d = answer(ACT_WAIT);
        update(d);
        return d;
    }

    /** Takes in the cluster as the program described it; brokers keep their {@link Broker}. */
    private void update(JsonNode d) {
        JsonNode described = d.get("brokers");
        for (int i = brokers.size(); i < described.size(); i++) {
            JsonNode b = described.get(i);
            int id = b.get("node_id").asInt();
            Path data = Paths.get(b.get("data_dir").asText());
            brokers.add(Broker.ofCluster(this, i, name + "-" + id, data.getParent(), id,
                    b.get("port").asInt(), b.get("admin_port").asInt(), Paths.get(b.get("log").asText())));
        }
    }

    /** Whether broker {@code i}'s process runs, as the program sees it. */
    boolean running(int i) {
        try {
            return !act("describe").get("brokers").get(i).get("pid").isNull();
        } catch (Exception e) {
            return false;
        }
    }

    // ------------------------------------------------------------------ brokers

    /** Starts a broker with the next node id and returns it. */
    public Broker addBroker() throws Exception {
        act("add");
        return brokers.get(brokers.size() - 1);
    }

    /** Starts broker {@code i} again on its data dir and ports. */
    public void start(int i) throws Exception {
        brokers.get(i).start();
    }

    /** SIGTERM to broker {@code i}; it must exit 0. */
    public void stop(int i) throws Exception {
        brokers.get(i).stop();
    }

    /** SIGKILL to broker {@code i}, and waits until it is gone. */
    public void kill(int i) throws Exception {
        brokers.get(i).kill();
    }

    /** Every broker's address, stopped ones included (clients skip those they cannot reach). */
    @Override
    public String bootstrap() {
        return brokers.stream().map(Broker::bootstrap).collect(Collectors.joining(","));
    }

    @Override
    public Map<Integer, String> nodes() {
        Map<Integer, String> m = new LinkedHashMap<>();
        for (Broker b : brokers) {
            m.put(b.nodeId, b.bootstrap());
        }
        return m;
    }

    /** The directory s3s-fs serves (the bucket is a directory in it). */
    public Path s3Root() {
        return root.resolve("s3");
    }

    // ------------------------------------------------------------------ teardown

    /** Closes the program's standard input: it stops the brokers, s3s-fs and PostgreSQL. */
    private synchronized void stopProgram() {
        if (program == null) {
            return;
        }
        try {
            commands.close();
            if (!program.waitFor(ACT_WAIT.toSeconds(), TimeUnit.SECONDS)) {
                program.destroyForcibly();
            }
        } catch (IOException | InterruptedException e) {
            program.destroyForcibly();
        }
        program = null;
        reader.shutdownNow();
    }

    /**
     * Stops the brokers (each must exit 0 after SIGTERM), then the program; removes the temp dir
     * (kept if {@code WEIR_TEST_KEEP_DATA} is set). Broker logs are copied to
     * {@code target/broker-logs/}.
     */
    @Override
    public void close() throws Exception {
        Exception first = null;
        try {
            for (Broker b : brokers) {
                try {
                    b.close();
                } catch (Exception e) {
                    first = first == null ? e : first;
                }
            }
        } finally {
            stopProgram();
            try {
                Runtime.getRuntime().removeShutdownHook(shutdownHook);
            } catch (IllegalStateException ignored) {
                // JVM already shutting down
            }
            removeDir();
        }
        if (first != null) {
            throw first;
        }
    }

    private void removeDir() {
        if (System.getenv("WEIR_TEST_KEEP_DATA") != null) {
            System.err.println("keeping cluster data in " + tmp);
            return;
        }
        try {
            Broker.deleteTree(tmp);
        } catch (IOException e) {
            System.err.println("cluster " + name + ": removing " + tmp + ": " + e);
        }
    }
}
