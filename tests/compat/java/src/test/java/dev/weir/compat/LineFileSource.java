package dev.weir.compat;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.source.ExactlyOnceSupport;
import org.apache.kafka.connect.source.SourceConnector;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;

/**
 * A source connector for ConnectDistributedTest: each line of a file ({@code file}) becomes a
 * record of {@code topic}, with the file's name as the source partition ({@code filename}) and
 * the byte position after the line as the source offset ({@code position}), as Kafka's
 * FileStreamSource keeps them. It stands in for connect-file, whose 4.4.0 jar the Maven repository
 * here does not serve (and whose 4.3.1 jar does not run on the 4.4 worker). Exactly-once
 * capable: a task restarted reads on from the offset committed with its records.
 */
public class LineFileSource extends SourceConnector {
    private Map<String, String> props;

    @Override
    public void start(Map<String, String> props) {
        this.props = props;
    }

    @Override
    public Class<? extends Task> taskClass() {
        return LineTask.class;
    }

    @Override
    public List<Map<String, String>> taskConfigs(int maxTasks) {
        return List.of(props);
    }

    @Override
    public void stop() {}

    @Override
    public ConfigDef config() {
        return new ConfigDef()
                .define("file", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "the file to read")
                .define("topic", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "the topic to write");
    }

    @Override
    public String version() {
        return "1";
    }

    @Override
    public ExactlyOnceSupport exactlyOnceSupport(Map<String, String> props) {
        return ExactlyOnceSupport.SUPPORTED;
    }

    /** Reads whole lines from the last position, at most 200 a poll. */
    public static class LineTask extends SourceTask {
        private String file;
        private String topic;
        private long position;

        @Override
        public String version() {
            return "1";
        }

        @Override
        public void start(Map<String, String> props) {
            file = props.get("file");
            topic = props.get("topic");
            Map<String, Object> offset = context.offsetStorageReader().offset(Map.of("filename", file));
            position = offset == null ? 0 : ((Number) offset.get("position")).longValue();
        }

        @Override
        public List<SourceRecord> poll() throws InterruptedException {
            List<SourceRecord> out = new ArrayList<>();
            try (RandomAccessFile f = new RandomAccessFile(file, "r")) {
                long length = f.length();
                if (position < length) {
                    byte[] rest = new byte[(int) Math.min(length - position, 1 << 20)];
                    f.seek(position);
                    f.readFully(rest);
                    int from = 0;
                    for (int i = 0; i < rest.length && out.size() < 200; i++) {
                        if (rest[i] != '\n') {
                            continue;
                        }
                        String line = new String(rest, from, i - from, StandardCharsets.UTF_8);
                        position += i + 1 - from;
                        from = i + 1;
                        out.add(new SourceRecord(Map.of("filename", file), Map.of("position", position),
                                topic, null, null, null, Schema.STRING_SCHEMA, line));
                    }
                }
            } catch (java.io.FileNotFoundException e) {
                // Not written yet.
            } catch (IOException e) {
                throw new ConnectException("reading " + file, e);
            }
            if (out.isEmpty()) {
                Thread.sleep(100);
                return null;
            }
            return out;
        }

        @Override
        public void stop() {}
    }
}
