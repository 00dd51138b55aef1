package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * ListOffsets by timestamp: the earliest offset whose timestamp is at or after the target,
 * found inside a batch as well as at batch boundaries, through the admin client and the consumer.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ListOffsetsTest {
    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.start("ListOffsetsTest");
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

    /** Base time: in the past (Kafka 4 refuses timestamps more than an hour ahead), whole seconds. */
    private static long baseTime() {
        return (System.currentTimeMillis() - 600_000) / 1000 * 1000;
    }

    @Test
    void offsetsForTimestamps() throws Exception {
        String topic = Clients.unique("ts-topic");
        Clients.createTopic(admin, topic, 2);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        long t = baseTime();

        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of("linger.ms", 50))) {
            // p0: 12 records, timestamps t, t+1s, ..., t+11s, in three batches of four.
            for (int batch = 0; batch < 3; batch++) {
                List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
                for (int j = 0; j < 4; j++) {
                    int i = batch * 4 + j;
                    fs.add(producer.send(new ProducerRecord<>(topic, 0, t + i * 1000L, "k" + i, "p0-" + i)));
                }
                producer.flush();
                for (int j = 0; j < 4; j++) {
                    RecordMetadata md = fs.get(j).get();
                    assertEquals(batch * 4 + j, md.offset(), "p0 offset");
                    assertEquals(t + (batch * 4 + j) * 1000L, md.timestamp(), "CreateTime kept");
                }
            }
            // p1: 5 records, timestamps t+0.5s, t+1.5s, ..., t+4.5s, in one batch.
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                fs.add(producer.send(new ProducerRecord<>(topic, 1, t + 500 + i * 1000L, "k" + i, "p1-" + i)));
            }
            producer.flush();
            for (int i = 0; i < 5; i++) {
                assertEquals(i, fs.get(i).get().offset(), "p1 offset");
            }
        }

        // target -> expected (offset, timestamp) per partition; -1 = no record at or after it.
        long[][] p0Cases = {
            {t - 60_000, 0, t},          // before everything: the first record
            {t, 0, t},                   // exact first
            {t + 1, 1, t + 1000},        // just after the first: the next record
            {t + 2500, 3, t + 3000},     // inside batch 1 (offsets 0..3)
            {t + 4000, 4, t + 4000},     // exact first record of batch 2
            {t + 5500, 6, t + 6000},     // inside batch 2 (offsets 4..7)
            {t + 11_000, 11, t + 11_000}, // exact last
            {t + 11_001, -1, -1},        // after the last
        };
        long[][] p1Cases = {
            {t - 60_000, 0, t + 500},
            {t + 2500, 2, t + 2500},
            {t + 2501, 3, t + 3500},
            {t + 4500, 4, t + 4500},
            {t + 4501, -1, -1},
        };
        checkPartition(p0, p0Cases);
        checkPartition(p1, p1Cases);

        // Both partitions in one request, as a consumer does it.
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, null, "ts-reader")) {
            Map<TopicPartition, OffsetAndTimestamp> m = c.offsetsForTimes(Map.of(p0, t + 2500, p1, t + 2500));
            assertNotNull(m.get(p0), "offsetsForTimes p0");
            assertNotNull(m.get(p1), "offsetsForTimes p1");
            assertEquals(3, m.get(p0).offset(), "offsetsForTimes p0 offset");
            assertEquals(t + 3000, m.get(p0).timestamp(), "offsetsForTimes p0 timestamp");
            assertEquals(2, m.get(p1).offset(), "offsetsForTimes p1 offset");
            assertEquals(t + 2500, m.get(p1).timestamp(), "offsetsForTimes p1 timestamp");

            // Seeking to the found offset reads the record that has that timestamp.
            c.assign(List.of(p0));
            c.seek(p0, m.get(p0).offset());
            ConsumerRecord<String, String> first = pollOne(c);
            assertEquals(3, first.offset());
            assertEquals(t + 3000, first.timestamp());
            assertEquals("p0-3", first.value());

            assertEquals(Map.of(p0, 0L, p1, 0L), c.beginningOffsets(List.of(p0, p1)), "beginningOffsets");
            assertEquals(Map.of(p0, 12L, p1, 5L), c.endOffsets(List.of(p0, p1)), "endOffsets");
        }

        Map<TopicPartition, ListOffsetsResultInfo> earliest =
                admin.listOffsets(Map.of(p0, OffsetSpec.earliest(), p1, OffsetSpec.earliest())).all().get();
        assertEquals(0, earliest.get(p0).offset());
        assertEquals(0, earliest.get(p1).offset());
        Map<TopicPartition, ListOffsetsResultInfo> latest =
                admin.listOffsets(Map.of(p0, OffsetSpec.latest(), p1, OffsetSpec.latest())).all().get();
        assertEquals(12, latest.get(p0).offset());
        assertEquals(5, latest.get(p1).offset());
    }

    @Test
    void maxTimestampOffset() throws Exception {
        String topic = Clients.unique("maxts-topic");
        Clients.createTopic(admin, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        long t = baseTime();
        long[] stamps = {t + 10, t + 500, t + 20, t + 30, t + 100}; // max at offset 1, one batch
        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of("linger.ms", 50))) {
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < stamps.length; i++) {
                fs.add(producer.send(new ProducerRecord<>(topic, 0, stamps[i], "k", "v" + i)));
            }
            producer.flush();
            for (var f : fs) {
                f.get();
            }
        }
        ListOffsetsResultInfo max = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).all().get().get(tp);
        assertEquals(1, max.offset(), "offset of the largest timestamp");
        assertEquals(t + 500, max.timestamp(), "the largest timestamp");
        // A target between out-of-order timestamps: the first offset whose timestamp >= target.
        ListOffsetsResultInfo at = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(t + 25))).all().get().get(tp);
        assertEquals(1, at.offset(), "first offset with timestamp >= t+25");
        assertEquals(t + 500, at.timestamp());
    }

    private static void checkPartition(TopicPartition tp, long[][] cases) throws Exception {
        Map<Long, ListOffsetsResultInfo> admins = new HashMap<>();
        for (long[] c : cases) {
            admins.put(c[0], admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(c[0]))).all().get().get(tp));
        }
        try (KafkaConsumer<String, String> consumer = Clients.consumer(broker, null, "ts-checker")) {
            for (long[] c : cases) {
                long target = c[0];
                String what = tp + " target=" + target;
                ListOffsetsResultInfo info = admins.get(target);
                OffsetAndTimestamp oat = consumer.offsetsForTimes(Map.of(tp, target)).get(tp);
                if (c[1] < 0) {
                    assertEquals(-1, info.offset(), "admin: no offset for " + what);
                    assertNull(oat, "consumer: no offset for " + what);
                } else {
                    assertEquals(c[1], info.offset(), "admin offset for " + what);
                    assertEquals(c[2], info.timestamp(), "admin timestamp for " + what);
                    assertNotNull(oat, "consumer: offset for " + what);
                    assertEquals(c[1], oat.offset(), "consumer offset for " + what);
                    assertEquals(c[2], oat.timestamp(), "consumer timestamp for " + what);
                }
            }
        }
    }

    private static ConsumerRecord<String, String> pollOne(KafkaConsumer<String, String> c) {
        long deadline = System.currentTimeMillis() + 30_000;
        while (System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                return r;
            }
        }
        throw new AssertionError("no record within 30s");
    }
}
