package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Idempotent produce of keyed records, then a classic consumer group (range assignor, eager
 * rebalancing) of two members that split the partitions, consume half, commit, lose a member
 * and get a restarted one that must resume exactly at the committed offsets.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ConsumerGroupTest {
    private static final int PARTITIONS = 4;
    private static final int RECORDS = 2000;
    private static final int KEYS = 40;
    private static final Duration PHASE_TIMEOUT = Duration.ofSeconds(60);

    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.start("ConsumerGroupTest");
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

    /** A group member whose newly assigned partitions start paused until a phase resumes them. */
    static final class Member implements AutoCloseable {
        final String name;
        final KafkaConsumer<String, String> c;

        Member(String name, String group, String topic) {
            this.name = name;
            this.c = Clients.consumer(broker, group, name);
            c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> ps) {}

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                    Member.this.c.pause(ps);
                }
            });
        }

        Set<TopicPartition> assignment() {
            return new HashSet<>(c.assignment());
        }

        @Override
        public void close() {
            c.close(Duration.ofSeconds(10));
        }
    }

    @Test
    void idempotentProduceThenGroupSplitsCommitsAndResumes() throws Exception {
        String topic = Clients.unique("group-topic");
        String group = Clients.unique("group");
        Clients.createTopic(admin, topic, PARTITIONS);
        Set<TopicPartition> all = new HashSet<>();
        for (int p = 0; p < PARTITIONS; p++) {
            all.add(new TopicPartition(topic, p));
        }

        // ---- idempotent produce, acks=all -------------------------------------------------
        Map<TopicPartition, TreeMap<Long, String>> produced = new HashMap<>();
        Map<String, Integer> keyPartition = new HashMap<>();
        AtomicInteger callbackErrors = new AtomicInteger();
        try (KafkaProducer<String, String> producer = Clients.producer(broker)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            List<ProducerRecord<String, String>> sent = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                String key = String.format("key-%02d", i % KEYS);
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, key, key + "#" + (i / KEYS));
                sent.add(r);
                futures.add(producer.send(r, (md, e) -> {
                    if (e != null) {
                        callbackErrors.incrementAndGet();
                    }
                }));
            }
            producer.flush();
            for (int i = 0; i < RECORDS; i++) {
                RecordMetadata md = futures.get(i).get(30, TimeUnit.SECONDS); // throws if the send failed
                ProducerRecord<String, String> r = sent.get(i);
                TopicPartition tp = new TopicPartition(topic, md.partition());
                String prev = produced.computeIfAbsent(tp, k -> new TreeMap<>()).put(md.offset(), r.value());
                assertEquals(null, prev, "two sends acknowledged at the same offset " + tp + "@" + md.offset());
                Integer kp = keyPartition.putIfAbsent(r.key(), md.partition());
                assertEquals(kp == null ? md.partition() : kp, md.partition(), "key " + r.key() + " in one partition");
            }
        }
        assertEquals(0, callbackErrors.get(), "send callbacks with an error");
        Map<TopicPartition, Long> end = new HashMap<>();
        for (TopicPartition tp : all) {
            TreeMap<Long, String> m = produced.get(tp);
            assertNotNull(m, "no record went to " + tp);
            assertTrue(m.size() >= 2, tp + " got only " + m.size() + " records");
            assertEquals(0L, m.firstKey(), tp + " offsets start at 0");
            assertEquals(m.size() - 1L, m.lastKey(), tp + " offsets are contiguous (no gap, no duplicate)");
            end.put(tp, (long) m.size());
        }
        assertEquals(RECORDS, end.values().stream().mapToLong(Long::longValue).sum());
        Map<TopicPartition, Long> latest = listOffsets(all, OffsetSpec.latest());
        assertEquals(end, latest, "ListOffsets latest = records acknowledged per partition");

        // ---- two members split the partitions ---------------------------------------------
        Map<TopicPartition, Long> half = new HashMap<>();
        end.forEach((tp, n) -> half.put(tp, n / 2));
        Map<TopicPartition, Long> next = new HashMap<>();
        all.forEach(tp -> next.put(tp, 0L));
        Map<TopicPartition, List<ConsumerRecord<String, String>>> consumed = new HashMap<>();

        Member m1 = new Member("member-1", group, topic);
        Member m2 = new Member("member-2", group, topic);
        Member m1b = null;
        try {
            List<Member> both = List.of(m1, m2);
            joinUntil(both, "two members split all partitions", ms -> splitsAll(ms, all));
            Set<TopicPartition> a1 = m1.assignment();
            Set<TopicPartition> a2 = m2.assignment();
            assertTrue(a1.size() == 2 && a2.size() == 2, "range assignor gives 2+2: " + a1 + " " + a2);
            assertGroupMembers(group, both, GroupState.STABLE);

            // ---- phase A: consume the first half of each partition, committing as we go ----
            consume(both, next, half, consumed, "phase A");
            Map<TopicPartition, Long> committed = committedOffsets(group);
            assertEquals(half, committed, "committed offsets after phase A");

            // ---- one member leaves; the other takes over every partition ----------------------
            m1.close();
            m1 = null;
            joinUntil(List.of(m2), "the remaining member owns all partitions", ms -> ms.get(0).assignment().equals(all));
            assertGroupMembers(group, List.of(m2), GroupState.STABLE);

            // ---- a restarted member joins; both resume at the committed offsets ---------------
            m1b = new Member("member-1", group, topic);
            List<Member> again = List.of(m1b, m2);
            joinUntil(again, "restarted member and survivor split all partitions", ms -> splitsAll(ms, all));
            assertGroupMembers(group, again, GroupState.STABLE);
            Map<TopicPartition, Long> resumeAt = new HashMap<>(next);
            assertEquals(half, resumeAt);
            consume(again, next, end, consumed, "phase B (after restart)");
            assertEquals(end, committedOffsets(group), "committed offsets after phase B");
            for (Member m : again) {
                for (TopicPartition tp : m.assignment()) {
                    assertEquals(end.get(tp), m.c.position(tp), m.name + " position of " + tp);
                }
            }
        } finally {
            for (Member m : new Member[] {m1, m2, m1b}) {
                if (m != null) {
                    m.close();
                }
            }
        }

        // ---- every record exactly once; keys in one partition, in produce order ----------
        Map<String, Integer> nextSeq = new HashMap<>();
        for (TopicPartition tp : all) {
            List<ConsumerRecord<String, String>> rs = consumed.getOrDefault(tp, List.of());
            assertEquals(end.get(tp).intValue(), rs.size(), tp + " consumed count");
            for (int i = 0; i < rs.size(); i++) {
                ConsumerRecord<String, String> r = rs.get(i);
                assertEquals(i, r.offset(), tp + " consumed in offset order");
                assertEquals(produced.get(tp).get(r.offset()), r.value(), tp + "@" + r.offset() + " value");
                assertEquals(keyPartition.get(r.key()), tp.partition(), "key " + r.key() + " partition");
                int seq = Integer.parseInt(r.value().substring(r.value().indexOf('#') + 1));
                int want = nextSeq.getOrDefault(r.key(), 0);
                assertEquals(want, seq, "key " + r.key() + " records in produce order");
                nextSeq.put(r.key(), want + 1);
            }
        }
        assertEquals(KEYS, nextSeq.size());
        nextSeq.values().forEach(n -> assertEquals(RECORDS / KEYS, n));

        // ---- the group after everyone left ---------------------------------------------------
        ConsumerGroupDescription d = describeGroup(group);
        assertEquals(GroupState.EMPTY, d.groupState(), "group state after all members left");
        assertTrue(d.members().isEmpty(), "members after all left: " + d.members());
        assertEquals(end, committedOffsets(group), "committed offsets survive the members");

        Collection<GroupListing> groups = admin.listGroups().all().get();
        GroupListing listing = groups.stream().filter(g -> g.groupId().equals(group)).findFirst()
                .orElseThrow(() -> new AssertionError("listGroups does not list " + group + ": " + groups));
        assertEquals("consumer", listing.protocol(), "protocol type of " + group);
        listing.type().ifPresent(t -> assertEquals(GroupType.CLASSIC, t, "group type"));
        listing.groupState().ifPresent(s -> assertEquals(GroupState.EMPTY, s, "listed group state"));
    }

    private static boolean splitsAll(List<Member> ms, Set<TopicPartition> all) {
        Set<TopicPartition> union = new HashSet<>();
        int total = 0;
        for (Member m : ms) {
            Set<TopicPartition> a = m.assignment();
            if (a.isEmpty()) {
                return false;
            }
            union.addAll(a);
            total += a.size();
        }
        return total == all.size() && union.equals(all); // disjoint and covering
    }

    /** Polls every member (their partitions are paused) until the assignments satisfy cond. */
    private static void joinUntil(List<Member> ms, String what, Predicate<List<Member>> cond) {
        long deadline = System.nanoTime() + PHASE_TIMEOUT.toNanos();
        while (System.nanoTime() < deadline) {
            for (Member m : ms) {
                ConsumerRecords<String, String> rs = m.c.poll(Duration.ofMillis(100));
                assertTrue(rs.isEmpty(), m.name + " got records for paused partitions " + rs.partitions());
            }
            if (cond.test(ms)) {
                return;
            }
        }
        fail("timed out waiting until " + what + "; assignments: "
                + ms.stream().map(m -> m.name + "=" + m.assignment()).collect(Collectors.joining(", ")));
    }

    /**
     * Polls the members round-robin, taking records below {@code limit} per partition and
     * committing after every poll, until every partition's next offset reaches its limit. A
     * record must arrive exactly at {@code next}: anything lower is a re-delivery of committed or
     * already consumed data, anything higher a gap.
     */
    private static void consume(List<Member> ms, Map<TopicPartition, Long> next, Map<TopicPartition, Long> limit,
            Map<TopicPartition, List<ConsumerRecord<String, String>>> sink, String phase) {
        long deadline = System.nanoTime() + PHASE_TIMEOUT.toNanos();
        while (!next.equals(limit)) {
            if (System.nanoTime() > deadline) {
                fail(phase + ": timed out; next offsets " + new TreeMap<>(strKeys(next)) + ", wanted "
                        + new TreeMap<>(strKeys(limit)));
            }
            for (Member m : ms) {
                for (TopicPartition tp : m.c.assignment()) {
                    boolean done = next.get(tp) >= limit.get(tp);
                    if (!done && m.c.paused().contains(tp)) {
                        m.c.resume(List.of(tp));
                    }
                }
                ConsumerRecords<String, String> rs = m.c.poll(Duration.ofMillis(100));
                Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
                for (ConsumerRecord<String, String> r : rs) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() >= limit.get(tp)) {
                        continue; // beyond this phase; we seek back below
                    }
                    long want = next.get(tp);
                    if (r.offset() < want) {
                        fail(phase + ": " + m.name + " got " + tp + "@" + r.offset()
                                + " again (already consumed/committed up to " + want + ")");
                    }
                    assertEquals(want, r.offset(), phase + ": " + m.name + " skipped offsets in " + tp);
                    sink.computeIfAbsent(tp, k -> new ArrayList<>()).add(r);
                    next.put(tp, r.offset() + 1);
                    commit.put(tp, new OffsetAndMetadata(r.offset() + 1));
                }
                if (!commit.isEmpty()) {
                    m.c.commitSync(commit, Duration.ofSeconds(30));
                }
                for (TopicPartition tp : m.c.assignment()) {
                    if (next.get(tp) >= limit.get(tp) && !m.c.paused().contains(tp)) {
                        m.c.seek(tp, limit.get(tp));
                        m.c.pause(List.of(tp));
                    }
                }
            }
        }
    }

    private static Map<String, Long> strKeys(Map<TopicPartition, Long> m) {
        Map<String, Long> out = new HashMap<>();
        m.forEach((k, v) -> out.put(k.toString(), v));
        return out;
    }

    private static ConsumerGroupDescription describeGroup(String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
    }

    /** The group as the coordinator describes it matches what the members themselves hold. */
    private static void assertGroupMembers(String group, List<Member> ms, GroupState state) throws Exception {
        ConsumerGroupDescription d = describeGroup(group);
        assertEquals(group, d.groupId());
        assertEquals(state, d.groupState(), "group state: " + d);
        assertEquals(GroupType.CLASSIC, d.type(), "group type");
        assertEquals("range", d.partitionAssignor(), "assignor chosen by the group");
        assertEquals(ms.size(), d.members().size(), "members: " + d.members());
        Map<String, Set<TopicPartition>> described = new HashMap<>();
        for (MemberDescription md : d.members()) {
            assertTrue(md.consumerId() != null && !md.consumerId().isEmpty(), "member id");
            assertTrue(md.host() != null && !md.host().isEmpty(), "member host");
            described.put(md.clientId(), new HashSet<>(md.assignment().topicPartitions()));
        }
        for (Member m : ms) {
            assertEquals(m.assignment(), described.get(m.name), "described assignment of " + m.name);
        }
        assertNotNull(d.coordinator(), "coordinator");
        if (Target.clusterMode()) {
            // Each group has its coordinator among the live brokers (a hash of its name).
            Set<Integer> ids = new HashSet<>();
            admin.describeCluster().nodes().get().forEach(n -> ids.add(n.id()));
            assertTrue(ids.contains(d.coordinator().id()), "coordinator " + d.coordinator() + " is one of " + ids);
        } else {
            assertEquals(1, d.coordinator().id(), "coordinator id");
        }
    }

    private static Map<TopicPartition, Long> committedOffsets(String group) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> m =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        Map<TopicPartition, Long> out = new HashMap<>();
        m.forEach((tp, oam) -> {
            if (oam != null) {
                out.put(tp, oam.offset());
            }
        });
        return out;
    }

    private static Map<TopicPartition, Long> listOffsets(Set<TopicPartition> tps, OffsetSpec spec) throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        tps.forEach(tp -> req.put(tp, spec));
        Map<TopicPartition, Long> out = new HashMap<>();
        admin.listOffsets(req).all().get().forEach((tp, info) -> out.put(tp, info.offset()));
        return out;
    }
}
