package dev.weir.compat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Runs one of Kafka's command-line tools (from the jars {@code tools/kafka/kafka.sh} installs, by
 * its alias: {@code share-groups}, {@code streams-groups}, {@code configs}, ...) against a
 * broker; its exit code and output (stdout and stderr), which also go to the test's output.
 */
final class KafkaTool {
    record Run(int exit, String output) {}

    private KafkaTool() {}

    static Run run(String tool, String bootstrap, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of("bash", Broker.repoRoot().resolve("tools/kafka/kafka.sh").toString(),
                "tool", tool, "--bootstrap-server", bootstrap));
        cmd.addAll(List.of(args));
        Path out = Files.createTempFile("kafka-" + tool + "-", ".out");
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile()).start();
            if (!p.waitFor(60, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new AssertionError("kafka-" + tool + " " + String.join(" ", args) + " timed out\n" + Files.readString(out));
            }
            String output = Files.readString(out);
            System.out.println("kafka-" + tool + " " + String.join(" ", args) + " -> exit " + p.exitValue() + "\n" + output);
            return new Run(p.exitValue(), output);
        } finally {
            Files.deleteIfExists(out);
        }
    }
}
