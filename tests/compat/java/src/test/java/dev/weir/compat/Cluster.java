package dev.weir.compat;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

/**
 * Weir brokers on this machine sharing one private PostgreSQL ({@code initdb} + {@code pg_ctl}
 * on a free port) and one {@code s3s-fs}, each started with the flags a user gives
 * ({@code --node-id}, {@code --listen}, {@code --advertised}, {@code --admin-listen},
 * {@code --data-dir}, {@code --metadata-url}, {@code --object-store-url}).
 *
 * <p>{@link #close()} (and a JVM shutdown hook on an aborted run) stops the brokers, then
 * s3s-fs and PostgreSQL, and removes the temp dir. Needs the PostgreSQL 15 binaries
 * ({@code $WEIR_PG_BIN}, default {@code /usr/lib/postgresql/15/bin}; as root PostgreSQL runs
 * as the {@code postgres} user, since initdb refuses root) and s3s-fs ({@code $S3S_FS},
 * {@code ~/.cargo/bin/s3s-fs} or on PATH).
 */
public final class Cluster implements Target {
    public static final int SIZE = 3;
    private static final String BUCKET = "weir-test";
    private static final String ACCESS_KEY = "weir-access";
    private static final String SECRET_KEY = "weir-secret";
    private static final Duration WAIT = Duration.ofSeconds(60);

    public final String name;
    public final List<Broker> brokers = new ArrayList<>();
    private final Path root;
    private final boolean asPostgres;
    private final Thread shutdownHook;
    private int pgPort = -1;
    private String metadataUrl;
    private Process s3;
    private int s3Port;
    private Map<String, String> env;

    private Cluster(String name) throws IOException {
        this.name = name;
        this.root = Files.createTempDirectory("weir-compat-java-" + name + "-");
        this.asPostgres = isRoot();
        // PostgreSQL may run as another user under this directory.
        Files.setPosixFilePermissions(root, PosixFilePermissions.fromString("rwx--x--x"));
        this.shutdownHook = new Thread(() -> {
            stopAll();
            removeDir();
        }, "stop-cluster-" + name);
        Runtime.getRuntime().addShutdownHook(shutdownHook);
    }

    private static boolean isRoot() {
        try {
            Process p = new ProcessBuilder("id", "-u").redirectErrorStream(true).start();
            String uid = new String(p.getInputStream().readAllBytes()).trim();
            return p.waitFor() == 0 && uid.equals("0");
        } catch (IOException | InterruptedException e) {
            return false;
        }
    }

    /** Starts PostgreSQL, s3s-fs and {@code n} brokers (node ids 1..n, each ready); the caller closes it. */
    public static Cluster start(String name, int n) throws Exception {
        Cluster c = new Cluster(name);
        try {
            c.startPostgres();
            c.startS3();
            for (int i = 0; i < n; i++) {
                c.addBroker();
            }
        } catch (Exception | Error e) {
            c.close();
            throw e;
        }
        return c;
    }

    // ------------------------------------------------------------------ brokers

    /** Starts a broker with the next node id and returns it. */
    public Broker addBroker() throws Exception {
        int id = brokers.stream().mapToInt(b -> b.nodeId).max().orElse(0) + 1;
        Path dir = root.resolve("node-" + id);
        Files.createDirectories(dir);
        Broker b = Broker.clusterNode(name + "-" + id, dir, id,
                List.of("--metadata-url", metadataUrl, "--object-store-url", "s3://" + BUCKET + "/weir"), env);
        brokers.add(b);
        b.start();
        return b;
    }

    /** Starts broker {@code i} again on its data dir and ports. */
    public void start(int i) throws Exception {
        brokers.get(i).start();
    }

    /** SIGTERM to broker {@code i}; it must exit 0 within 30 s. */
    public void stop(int i) throws Exception {
        brokers.get(i).stop();
    }

    /** SIGKILL to broker {@code i}, and waits until it is gone. */
    public void kill(int i) throws InterruptedException {
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

    // ------------------------------------------------------------------ stores

    private List<String> pg(String tool, String... args) {
        List<String> cmd = new ArrayList<>();
        if (asPostgres) {
            cmd.addAll(List.of("runuser", "-u", "postgres", "--"));
        }
        String bin = System.getenv().getOrDefault("WEIR_PG_BIN", "/usr/lib/postgresql/15/bin");
        cmd.add(Paths.get(bin, tool).toString());
        cmd.addAll(List.of(args));
        return cmd;
    }

    /** Runs a command to its end; its output goes to {@code out}, shown if it fails. */
    private void run(List<String> cmd, Path out) throws Exception {
        Process p = new ProcessBuilder(cmd).directory(root.toFile()).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(out.toFile())).start();
        if (!p.waitFor(WAIT.toSeconds(), TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new IllegalStateException(String.join(" ", cmd) + " timed out\n" + Files.readString(out));
        }
        if (p.exitValue() != 0) {
            throw new IllegalStateException(String.join(" ", cmd) + " exited " + p.exitValue() + "\n"
                    + Files.readString(out));
        }
    }

    private void startPostgres() throws Exception {
        Path dir = root.resolve("pg");
        Files.createDirectories(dir);
        if (asPostgres) {
            run(List.of("chown", "postgres:", dir.toString()), root.resolve("pg.out"));
        }
        Path data = dir.resolve("data");
        Path out = root.resolve("pg.out");
        run(pg("initdb", "-D", data.toString(), "-A", "trust", "-U", "weir", "--no-sync"), out);
        // Another process may take the port between our probe and the server's bind: try again.
        Exception last = null;
        for (int attempt = 0; attempt < 5; attempt++) {
            int port = Broker.freePorts(1)[0];
            try {
                // pg_ctl's output goes to a file: the server it leaves running must hold no pipe of ours.
                run(pg("pg_ctl", "-D", data.toString(), "-l", dir.resolve("log").toString(), "-o",
                        "-p " + port + " -k " + dir + " -c listen_addresses=127.0.0.1 -c fsync=off",
                        "-w", "start"), out);
                pgPort = port;
                break;
            } catch (IllegalStateException e) {
                last = e;
            }
        }
        if (pgPort < 0) {
            throw last;
        }
        run(pg("createdb", "-h", "127.0.0.1", "-p", String.valueOf(pgPort), "-U", "weir", "weir"), out);
        metadataUrl = "postgres://weir@127.0.0.1:" + pgPort + "/weir";
    }

    private static String s3sFs() {
        String env = System.getenv("S3S_FS");
        if (env != null && !env.isBlank()) {
            return env;
        }
        Path p = Paths.get(System.getProperty("user.home"), ".cargo", "bin", "s3s-fs");
        return Files.isExecutable(p) ? p.toString() : "s3s-fs";
    }

    private void startS3() throws Exception {
        Path dir = s3Root();
        Files.createDirectories(dir.resolve(BUCKET));
        s3Port = Broker.freePorts(1)[0];
        Path log = root.resolve("s3s-fs.log");
        try {
            s3 = new ProcessBuilder(s3sFs(), "--host", "127.0.0.1", "--port", String.valueOf(s3Port),
                    "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY, dir.toString())
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile())).start();
        } catch (IOException e) {
            throw new IllegalStateException("cannot start s3s-fs (" + e.getMessage() + "); install it: cargo install "
                    + "s3s-fs@0.14.1 --features binary --locked, or set S3S_FS", e);
        }
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (true) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", s3Port), 1000);
                break;
            } catch (IOException notYet) {
                if (!s3.isAlive() || System.nanoTime() > deadline) {
                    throw new IllegalStateException("s3s-fs did not start\n" + Files.readString(log));
                }
                Thread.sleep(50);
            }
        }
        // What the brokers' object_store crate reads (AmazonS3Builder::from_env).
        env = Map.of(
                "AWS_ENDPOINT", "http://127.0.0.1:" + s3Port,
                "AWS_ALLOW_HTTP", "true",
                "AWS_ACCESS_KEY_ID", ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY", SECRET_KEY,
                "AWS_REGION", "us-east-1",
                "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false",
                "WEIR_WAL_FORMAT", "false");
    }

    // ------------------------------------------------------------------ teardown

    /** Stops everything, ignoring errors: the brokers first, then the stores they use. */
    private synchronized void stopAll() {
        for (Broker b : brokers) {
            try {
                b.stop();
            } catch (Exception e) {
                System.err.println("cluster " + name + ": " + e.getMessage());
            }
        }
        if (s3 != null) {
            s3.destroyForcibly();
            try {
                s3.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            s3 = null;
        }
        if (pgPort >= 0) {
            try {
                run(pg("pg_ctl", "-D", root.resolve("pg").resolve("data").toString(), "-m", "immediate", "-w", "stop"),
                        root.resolve("pg.out"));
            } catch (Exception e) {
                System.err.println("cluster " + name + ": stopping PostgreSQL: " + e.getMessage());
            }
            pgPort = -1;
        }
    }

    /**
     * Stops the brokers (each must exit 0 after SIGTERM), s3s-fs and PostgreSQL; removes the
     * temp dir (kept if {@code WEIR_TEST_KEEP_DATA} is set). Broker logs are copied to
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
            stopAll();
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
            System.err.println("keeping cluster data in " + root);
            return;
        }
        try {
            Broker.deleteTree(root);
        } catch (IOException e) {
            System.err.println("cluster " + name + ": removing " + root + ": " + e);
        }
    }
}
