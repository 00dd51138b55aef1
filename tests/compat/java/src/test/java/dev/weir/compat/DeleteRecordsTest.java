package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.OffsetOutOfRangeException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** DeleteRecords moves the log start offset, also into the middle of a batch. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class DeleteRecordsTest {
    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.start("DeleteRecordsTest");
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
    void deleteRecordsMovesTheEarliestOffset() throws Exception {
        String topic = Clients.unique("delete-topic");
        Clients.createTopic(admin, topic, 2);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);

        try (KafkaProducer<String, String> producer = Clients.producer(broker, Map.of("linger.ms", 50))) {
            // p0: offsets 0..99 in four batches of 25, so offset 40 is inside the second batch.
            for (int batch = 0; batch < 4; batch++) {
                for (int j = 0; j < 25; j++) {
                    int i = batch * 25 + j;
                    producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i));
                }
                producer.flush();
            }
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 1, "k" + i, "w" + i)).get();
            }
        }
        assertEquals(100, offset(p0, OffsetSpec.latest()));
        assertEquals(10, offset(p1, OffsetSpec.latest()));

        // Delete below 40 on p0.
        DeletedRecords dr = admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(40)))
                .lowWatermarks().get(p0).get();
        assertEquals(40, dr.lowWatermark(), "low watermark after deleting before 40");
        assertEquals(40, offset(p0, OffsetSpec.earliest()), "earliest offset of p0");
        assertEquals(100, offset(p0, OffsetSpec.latest()), "latest offset of p0 is unchanged");
        assertEquals(0, offset(p1, OffsetSpec.earliest()), "p1 is untouched");

        try (KafkaConsumer<String, String> c = Clients.consumer(broker, null, "delete-reader")) {
            c.assign(List.of(p0));
            c.seekToBeginning(List.of(p0));
            assertEquals(40, c.position(p0), "position after seekToBeginning");
            assertEquals(Map.of(p0, 40L), c.beginningOffsets(List.of(p0)));
            List<ConsumerRecord<String, String>> rs = readUntil(c, 100);
            assertEquals(60, rs.size(), "records from the beginning");
            for (int i = 0; i < rs.size(); i++) {
                assertEquals(40 + i, rs.get(i).offset());
                assertEquals("v" + (40 + i), rs.get(i).value());
            }

            // A fetch below the log start offset is out of range; auto.offset.reset=earliest goes to 40.
            c.seek(p0, 10);
            List<ConsumerRecord<String, String>> again = readUntil(c, 41);
            assertEquals(40, again.get(0).offset(), "reset to the earliest offset after OFFSET_OUT_OF_RANGE");
        }

        // Deleting below the current start changes nothing.
        assertEquals(40, admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(30)))
                .lowWatermarks().get(p0).get().lowWatermark(), "deleting below the start offset");
        assertEquals(40, offset(p0, OffsetSpec.earliest()));

        // Beyond the high watermark: OFFSET_OUT_OF_RANGE.
        ExecutionException e = assertThrows(ExecutionException.class, () -> admin.deleteRecords(
                Map.of(p0, RecordsToDelete.beforeOffset(101))).lowWatermarks().get(p0).get());
        assertInstanceOf(OffsetOutOfRangeException.class, e.getCause(), "delete beyond the end: " + e.getCause());

        // Exactly the high watermark empties the partition; new records follow on.
        assertEquals(100, admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(100)))
                .lowWatermarks().get(p0).get().lowWatermark(), "delete up to the high watermark");
        assertEquals(100, offset(p0, OffsetSpec.earliest()));
        assertEquals(100, offset(p0, OffsetSpec.latest()));
        try (KafkaProducer<String, String> producer = Clients.producer(broker)) {
            for (int i = 100; i < 105; i++) {
                assertEquals(i, producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)).get().offset());
            }
        }
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, null, "delete-reader-2")) {
            c.assign(List.of(p0));
            c.seekToBeginning(List.of(p0));
            List<ConsumerRecord<String, String>> rs = readUntil(c, 105);
            assertEquals(5, rs.size());
            assertEquals(100, rs.get(0).offset());
            assertEquals("v104", rs.get(4).value());
        }
    }

    private static long offset(TopicPartition tp, OffsetSpec spec) throws Exception {
        return admin.listOffsets(Map.of(tp, spec)).all().get().get(tp).offset();
    }

    /** Reads until the consumer's position reaches {@code end}. */
    private static List<ConsumerRecord<String, String>> readUntil(KafkaConsumer<String, String> c, long end) {
        TopicPartition tp = c.assignment().iterator().next();
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30_000;
        while (c.position(tp) < end) {
            if (System.currentTimeMillis() > deadline) {
                throw new AssertionError("position " + c.position(tp) + " did not reach " + end + "; got " + out.size());
            }
            c.poll(Duration.ofMillis(200)).forEach(out::add);
        }
        return out;
    }
}
