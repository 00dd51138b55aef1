package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The KIP-848 consumer group protocol ({@code group.protocol=consumer}: ConsumerGroupHeartbeat,
 * ConsumerGroupDescribe, assignors on the coordinator). Three members split a topic with the
 * uniform assignor and consume every record; one leaves and the other two take over its
 * partitions from the committed offsets (commits carry member epochs); the range assignor's
 * co-partitioned contiguous ranges; regular-expression subscriptions, a java.util.regex pattern
 * (resolved by the client) and a SubscriptionPattern (resolved by the coordinator), that pick up
 * a matching topic created later and never a non-matching one, and that join while they match no
 * topic at all (SubscribedTopicNames=[] from the client's pattern); an empty classic group taken over
 * by a consumer-protocol member and back, each resuming at the committed offsets; ListGroups
 * with group types; DeleteGroups refusing a group with members and deleting an empty one; online
 * migration ({@code group.consumer.migration.policy=bidirectional}, Kafka 4.1's default): a rolling
 * upgrade of three classic members (cooperative-sticky, or eager range) to the consumer protocol
 * and back, one by one, with a producer writing throughout.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ConsumerProtocolTest {
    private static final int PARTITIONS = 6;
    private static final int KEYS = 60;
    private static final Duration PHASE_TIMEOUT = Duration.ofSeconds(45);

    private static Target broker;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        broker = Target.start("ConsumerProtocolTest");
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

    /** Records by partition and offset (value): what was produced, or what was consumed. */
    static final class Records {
        final Map<TopicPartition, TreeMap<Long, String>> byPartition = new HashMap<>();

        void add(TopicPartition tp, long offset, String value) {
            byPartition.computeIfAbsent(tp, k -> new TreeMap<>()).put(offset, value);
        }

        void addAll(Records other) {
            other.byPartition.forEach((tp, m) -> m.forEach((o, v) -> add(tp, o, v)));
        }

        /** The offset after the last record of each partition. */
        Map<TopicPartition, Long> ends() {
            Map<TopicPartition, Long> out = new HashMap<>();
            byPartition.forEach((tp, m) -> out.put(tp, m.lastKey() + 1));
            return out;
        }

        int count() {
            return byPartition.values().stream().mapToInt(Map::size).sum();
        }

        /** What of {@code want} this does not hold yet, or null when it holds all of it. */
        String missing(Records want) {
            List<String> out = new ArrayList<>();
            want.byPartition.forEach((tp, m) -> {
                TreeMap<Long, String> have = byPartition.getOrDefault(tp, new TreeMap<>());
                long n = m.keySet().stream().filter(o -> !have.containsKey(o)).count();
                if (n > 0) {
                    out.add(tp + ": " + n + " of " + m.size());
                }
            });
            return out.isEmpty() ? null : "missing " + out.stream().sorted().collect(Collectors.joining(", "));
        }
    }

    /** A group member. */
    static final class Member implements AutoCloseable {
        final String name;
        final KafkaConsumer<String, String> c;
        boolean closed;
        /** A commit failed (CommitFailedException) and is to be retried. */
        boolean uncommitted;
        int failedCommits;
        /** The first offset this member consumed of each partition. */
        final Map<TopicPartition, Long> firstOffsets = new HashMap<>();
        /** Records this member consumed. */
        long consumed;

        Member(String name, KafkaConsumer<String, String> c) {
            this.name = name;
            this.c = c;
        }

        Set<TopicPartition> assignment() {
            return new HashSet<>(c.assignment());
        }

        @Override
        public void close() {
            if (!closed) {
                closed = true;
                c.close(Duration.ofSeconds(10));
            }
        }
    }

    private static Member cpMember(String group, String name, Map<String, Object> extra) {
        Map<String, Object> p = new HashMap<>(Map.of(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 200));
        p.putAll(extra);
        return new Member(name, Clients.consumerProtocol(broker, group, name, p));
    }

    private static Member classicMember(String group, String name) {
        return new Member(name, Clients.consumer(broker, group, name, Map.of(
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic", ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 200)));
    }

    private static void closeAll(List<Member> ms) {
        for (Member m : ms) {
            if (m != null) {
                m.close();
            }
        }
    }

    // ------------------------------------------------------------------ tests

    @Test
    void threeMembersSplitSixPartitionsWithTheUniformAssignor() throws Exception {
        String topic = Clients.unique("cp-uniform");
        String group = Clients.unique("cp-uniform-group");
        createTopic(topic, PARTITIONS);
        Set<TopicPartition> all = partitions(topic, PARTITIONS);
        Records produced = produce(topic, 3000, "u");
        assertEquals(all, produced.byPartition.keySet(), "3,000 keyed records reach every partition");

        List<Member> ms = new ArrayList<>();
        try {
            for (int i = 1; i <= 3; i++) {
                Member m = cpMember(group, "uniform-" + i, Map.of());
                m.c.subscribe(List.of(topic));
                ms.add(m);
            }
            Records seen = new Records();
            pollUntil(ms, seen, "every produced record consumed", () -> seen.missing(produced));
            assertConsumed(produced, seen);

            ConsumerGroupDescription d = awaitStable(group, ms, seen, all);
            assertConsumerGroup(d, ms, "uniform");
            for (MemberDescription md : d.members()) {
                assertEquals(2, md.assignment().topicPartitions().size(),
                        "uniform assignor: 6 partitions over 3 members, 2 each: " + md);
            }
            assertEquals(produced.ends(), committedOffsets(group), "commitSync committed every consumed offset");
        } finally {
            closeAll(ms);
        }
    }

    @Test
    void survivorsTakeOverALeavingMembersPartitionsFromTheCommittedOffsets() throws Exception {
        String topic = Clients.unique("cp-leave");
        String group = Clients.unique("cp-leave-group");
        createTopic(topic, PARTITIONS);
        Set<TopicPartition> all = partitions(topic, PARTITIONS);
        Records first = produce(topic, 1200, "first");

        List<Member> ms = new ArrayList<>();
        try {
            for (int i = 1; i <= 3; i++) {
                Member m = cpMember(group, "leave-" + i, Map.of());
                m.c.subscribe(List.of(topic));
                ms.add(m);
            }
            Records seen1 = new Records();
            pollUntil(ms, seen1, "the first records consumed", () -> seen1.missing(first));
            ConsumerGroupDescription d = awaitStable(group, ms, seen1, all);
            assertConsumerGroup(d, ms, "uniform");
            assertConsumed(first, seen1);
            Map<TopicPartition, Long> end1 = first.ends();
            assertEquals(end1, committedOffsets(group), "committed offsets before a member leaves");

            // ---- one member leaves; the other two take over its partitions -------------------
            Member leaving = ms.get(2);
            Set<TopicPartition> orphaned = leaving.assignment();
            assertEquals(2, orphaned.size(), "the leaving member's partitions: " + orphaned);
            Map<String, Set<TopicPartition>> before = new HashMap<>();
            List<Member> survivors = List.of(ms.get(0), ms.get(1));
            survivors.forEach(m -> before.put(m.name, m.assignment()));
            leaving.close();

            Records seen2 = new Records();
            d = awaitStable(group, survivors, seen2, all);
            assertConsumerGroup(d, survivors, "uniform");
            for (Member m : survivors) {
                Set<TopicPartition> now = m.assignment();
                assertEquals(3, now.size(), m.name + " owns 3 of 6 partitions: " + now);
                assertTrue(now.containsAll(before.get(m.name)),
                        "uniform assignor is sticky: " + m.name + " kept " + before.get(m.name) + ", now " + now);
            }
            assertTrue(seen2.byPartition.isEmpty(), "records consumed again after the member left: "
                    + seen2.byPartition.keySet());

            // ---- more records: consumed from the committed offsets, none lost or repeated ------
            Map<String, Integer> failedBefore = new HashMap<>();
            survivors.forEach(m -> failedBefore.put(m.name, m.failedCommits));
            Records second = produce(topic, 1200, "second");
            pollUntil(survivors, seen2, "the second records consumed", () -> seen2.missing(second));
            for (Member m : survivors) {
                assertEquals(failedBefore.get(m.name), m.failedCommits,
                        m.name + ": commitSync failed in a stable group (OffsetCommit v9 with its member epoch)");
            }
            for (TopicPartition tp : all) {
                TreeMap<Long, String> got = seen2.byPartition.get(tp);
                assertNotNull(got, "nothing consumed from " + tp + " after the member left");
                assertEquals(end1.get(tp), got.firstKey(), tp + (orphaned.contains(tp) ? " (taken over)" : "")
                        + ": first offset consumed after the member left = the committed offset");
            }
            Records produced = new Records();
            produced.addAll(first);
            produced.addAll(second);
            Records seen = new Records();
            seen.addAll(seen1);
            seen.addAll(seen2);
            assertConsumed(produced, seen);

            // Committed through the surviving members (OffsetCommit with their current epochs) and
            // read back by them (OffsetFetch with member id and epoch) and by the admin client.
            Map<TopicPartition, Long> end2 = produced.ends();
            assertEquals(end2, committedOffsets(group), "committed offsets after the take-over");
            for (Member m : survivors) {
                Set<TopicPartition> owned = m.assignment();
                Map<TopicPartition, OffsetAndMetadata> c = m.c.committed(owned, Duration.ofSeconds(30));
                for (TopicPartition tp : owned) {
                    assertNotNull(c.get(tp), m.name + " reads the committed offset of " + tp);
                    assertEquals(end2.get(tp), c.get(tp).offset(), m.name + " committed offset of " + tp);
                }
            }
        } finally {
            closeAll(ms);
        }
    }

    @Test
    void rangeAssignorGivesCoPartitionedContiguousRanges() throws Exception {
        String topicA = Clients.unique("cp-range-a");
        String topicB = Clients.unique("cp-range-b");
        String group = Clients.unique("cp-range-group");
        createTopic(topicA, PARTITIONS);
        createTopic(topicB, PARTITIONS);
        Set<TopicPartition> all = partitions(topicA, PARTITIONS);
        all.addAll(partitions(topicB, PARTITIONS));
        Records produced = produce(topicA, 300, "ra");
        produced.addAll(produce(topicB, 300, "rb"));

        List<Member> ms = new ArrayList<>();
        try {
            for (int i = 1; i <= 3; i++) {
                Member m = cpMember(group, "range-" + i, Map.of(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, "range"));
                m.c.subscribe(List.of(topicA, topicB));
                ms.add(m);
            }
            Records seen = new Records();
            pollUntil(ms, seen, "every produced record consumed", () -> seen.missing(produced));
            ConsumerGroupDescription d = awaitStable(group, ms, seen, all);
            assertConsumerGroup(d, ms, "range");
            assertConsumed(produced, seen);

            // Members in member-id order take partitions 0-1, 2-3, 4-5 of each topic.
            List<MemberDescription> sorted = new ArrayList<>(d.members());
            sorted.sort(Comparator.comparing(MemberDescription::consumerId));
            for (int i = 0; i < sorted.size(); i++) {
                Set<TopicPartition> want = new HashSet<>();
                for (String t : List.of(topicA, topicB)) {
                    want.add(new TopicPartition(t, 2 * i));
                    want.add(new TopicPartition(t, 2 * i + 1));
                }
                assertEquals(want, new HashSet<>(sorted.get(i).assignment().topicPartitions()),
                        "range assignor: member " + i + " in member-id order (" + sorted.get(i).consumerId()
                                + ") owns partitions " + (2 * i) + "-" + (2 * i + 1) + " of both topics; group: "
                                + d.members());
            }
        } finally {
            closeAll(ms);
        }
    }

    /**
     * {@code subscribe(java.util.regex.Pattern)}: the client matches the pattern against the
     * topics in its metadata and heartbeats the matching names (SubscribedTopicNames; its first
     * heartbeat may carry none yet).
     */
    @Test
    void javaPatternSubscriptionPicksUpNewMatchingTopicsOnly() throws Exception {
        regexSubscription(false);
    }

    /** {@code subscribe(SubscriptionPattern)}: the coordinator resolves the expression (SubscribedTopicRegex). */
    @Test
    void coordinatorResolvedRegexPicksUpNewMatchingTopicsOnly() throws Exception {
        regexSubscription(true);
    }

    /**
     * A member subscribed to "PREFIX-.*" consumes two matching topics, then one created
     * afterwards, and never two topics that do not match as a whole.
     */
    private static void regexSubscription(boolean re2j) throws Exception {
        String prefix = Clients.unique(re2j ? "cp-re2j" : "cp-rx");
        String topicA = prefix + "-a";
        String topicB = prefix + "-b";
        String topicC = prefix + "-c";
        // Neither matches "<prefix>-.*" as a whole (the first contains a match).
        List<String> others = List.of("x" + prefix + "-a", prefix + "_a");
        createTopic(topicA, 3);
        createTopic(topicB, 2);
        for (String t : others) {
            createTopic(t, 2);
        }
        Records want = produce(topicA, 150, "a");
        want.addAll(produce(topicB, 100, "b"));
        for (String t : others) {
            produce(t, 50, "other");
        }
        String regex = prefix + "-.*";

        String group = Clients.unique(prefix + "-group"); // itself no topic
        // The client refreshes its metadata every second to see new topics.
        Member m = cpMember(group, re2j ? "rx-re2j" : "rx-java",
                re2j ? Map.of() : Map.of(ConsumerConfig.METADATA_MAX_AGE_CONFIG, 1000));
        try {
            if (re2j) {
                m.c.subscribe(new SubscriptionPattern(regex));
            } else {
                m.c.subscribe(Pattern.compile(regex));
            }
            Records seen = new Records();
            Supplier<String> problem = () -> {
                String bad = nonMatching(m, seen, others);
                if (bad != null) {
                    fail(bad);
                }
                return seen.missing(want);
            };
            pollUntil(List.of(m), seen, "the member consumes the two matching topics", problem);

            // A third matching topic, created now.
            createTopic(topicC, 2);
            want.addAll(produce(topicC, 100, "c"));
            for (String t : others) {
                produce(t, 50, "other-again");
            }
            pollUntil(List.of(m), seen, "the member consumes the new matching topic " + topicC, problem);
            assertConsumed(want, seen);

            Set<TopicPartition> matching = partitions(topicA, 3);
            matching.addAll(partitions(topicB, 2));
            matching.addAll(partitions(topicC, 2));
            ConsumerGroupDescription d = awaitStable(group, List.of(m), seen, matching);
            assertConsumerGroup(d, List.of(m), "uniform");
            assertEquals(null, nonMatching(m, seen, others));
        } finally {
            m.close();
        }
    }

    /**
     * A java.util.regex pattern that matches no topic yet: the member's first heartbeat names no
     * topic (SubscribedTopicNames=[]), which Kafka accepts.
     */
    @Test
    void javaPatternMatchingNoTopicYetJoinsAndTakesTheFirstMatch() throws Exception {
        patternMatchingNoTopicYet(false);
    }

    /** A SubscriptionPattern that matches no topic yet: the coordinator resolves it to nothing. */
    @Test
    void coordinatorResolvedRegexMatchingNoTopicYetJoinsAndTakesTheFirstMatch() throws Exception {
        patternMatchingNoTopicYet(true);
    }

    /**
     * A member whose pattern matches no topic yet joins all the same (the group is stable with it
     * owning nothing), then takes the first matching topic.
     */
    private static void patternMatchingNoTopicYet(boolean re2j) throws Exception {
        String prefix = Clients.unique(re2j ? "cp-none-re2j" : "cp-none-rx");
        String group = Clients.unique(prefix + "-group");
        Member m = cpMember(group, re2j ? "none-re2j" : "none-java",
                re2j ? Map.of() : Map.of(ConsumerConfig.METADATA_MAX_AGE_CONFIG, 1000));
        try {
            String regex = prefix + "-.*";
            if (re2j) {
                m.c.subscribe(new SubscriptionPattern(regex));
            } else {
                m.c.subscribe(Pattern.compile(regex));
            }
            Records seen = new Records();
            ConsumerGroupDescription d = awaitStable(group, List.of(m), seen, Set.of());
            assertConsumerGroup(d, List.of(m), "uniform");

            String topic = prefix + "-first";
            createTopic(topic, 2);
            Records want = produce(topic, 50, "first");
            pollUntil(List.of(m), seen, "the member consumes the first matching topic", () -> seen.missing(want));
            assertConsumed(want, seen);
            d = awaitStable(group, List.of(m), seen, partitions(topic, 2));
            assertConsumerGroup(d, List.of(m), "uniform");
        } finally {
            m.close();
        }
    }

    @Test
    void emptyGroupGoesFromClassicToConsumerAndBack() throws Exception {
        String topic = Clients.unique("cp-convert");
        String group = Clients.unique("cp-convert-group");
        int partitions = 4;
        createTopic(topic, partitions);
        Set<TopicPartition> all = partitions(topic, partitions);
        Records produced = produce(topic, 1000, "v1");
        Map<TopicPartition, Long> end = produced.ends();
        Map<TopicPartition, Long> half = new HashMap<>();
        end.forEach((tp, n) -> half.put(tp, n / 2));
        Records firstHalf = new Records();
        Records secondHalf = new Records();
        produced.byPartition.forEach((tp, m) -> m.forEach((o, v) -> {
            (o < half.get(tp) ? firstHalf : secondHalf).add(tp, o, v);
        }));

        // ---- a classic member consumes the first half, commits it, leaves ---------------------
        Member classic = classicMember(group, "classic-1");
        try {
            classic.c.subscribe(List.of(topic));
            Records seen = new Records();
            pollUntil(List.of(classic), seen, false, "the classic member reads the first half",
                    () -> seen.missing(firstHalf));
            Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
            half.forEach((tp, o) -> commit.put(tp, new OffsetAndMetadata(o)));
            classic.c.commitSync(commit, Duration.ofSeconds(30));
        } finally {
            classic.close();
        }
        assertEquals(half, committedOffsets(group), "offsets committed by the classic member");
        ConsumerGroupDescription d = describeGroup(group);
        assertEquals(GroupType.CLASSIC, d.type(), "type of the group the classic member left: " + d);
        assertEquals(GroupState.EMPTY, d.groupState(), "state of the group the classic member left: " + d);

        // ---- a consumer-protocol member takes the empty group over from the committed offsets ---
        Member upgraded = cpMember(group, "upgraded-1", Map.of());
        Records seenUp = new Records();
        try {
            upgraded.c.subscribe(List.of(topic));
            pollUntil(List.of(upgraded), seenUp, "the consumer-protocol member reads the second half",
                    () -> seenUp.missing(secondHalf));
            d = awaitStable(group, List.of(upgraded), seenUp, all);
            assertConsumerGroup(d, List.of(upgraded), "uniform");
        } finally {
            upgraded.close();
        }
        assertEquals(secondHalf.byPartition, seenUp.byPartition,
                "the consumer-protocol member reads exactly from the committed offsets to the end");
        assertEquals(end, committedOffsets(group), "offsets committed by the consumer-protocol member");
        d = describeGroup(group);
        assertEquals(GroupType.CONSUMER, d.type(), "type of the group the consumer-protocol member left: " + d);
        assertEquals(GroupState.EMPTY, d.groupState(), "state of the group the consumer-protocol member left: " + d);

        // ---- and back: a classic member resumes there ---------------------------------------
        Records more = produce(topic, 400, "v2");
        Member downgraded = classicMember(group, "classic-2");
        Records seenDown = new Records();
        try {
            downgraded.c.subscribe(List.of(topic));
            pollUntil(List.of(downgraded), seenDown, "the classic member reads the new records",
                    () -> seenDown.missing(more));
            d = describeGroup(group);
            assertEquals(GroupType.CLASSIC, d.type(), "type of the group with a classic member again: " + d);
            assertEquals(GroupState.STABLE, d.groupState(), "state of the group with a classic member again: " + d);
            assertEquals(1, d.members().size(), "members: " + d.members());
            assertEquals(all, new HashSet<>(d.members().iterator().next().assignment().topicPartitions()),
                    "the classic member's described assignment");
        } finally {
            downgraded.close();
        }
        assertEquals(more.byPartition, seenDown.byPartition,
                "the classic member reads exactly from the committed offsets to the end");
        Records everything = new Records();
        everything.addAll(produced);
        everything.addAll(more);
        assertEquals(everything.ends(), committedOffsets(group), "offsets committed by the second classic member");
    }

    @Test
    @SuppressWarnings("removal") // listConsumerGroups: deprecated in 4.1 for listGroups, still sent by clients
    void listGroupsShowsTheTypeAndDeleteRefusesAGroupWithMembers() throws Exception {
        String topic = Clients.unique("cp-admin");
        String group = Clients.unique("cp-admin-group");
        createTopic(topic, 2);
        Set<TopicPartition> all = partitions(topic, 2);
        Records produced = produce(topic, 40, "x");

        Member m = cpMember(group, "admin-1", Map.of());
        try {
            m.c.subscribe(List.of(topic));
            Records seen = new Records();
            pollUntil(List.of(m), seen, "the member reads every record", () -> seen.missing(produced));
            awaitStable(group, List.of(m), seen, all);

            GroupListing l = listed(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get(), group);
            assertNotNull(l, "listGroups(forConsumerGroups) lists " + group);
            assertEquals(Optional.of(GroupType.CONSUMER), l.type(), "listed type: " + l);
            assertEquals("consumer", l.protocol(), "listed protocol type: " + l);
            assertEquals(Optional.of(GroupState.STABLE), l.groupState(), "listed state: " + l);
            assertNotNull(listed(admin.listGroups(new ListGroupsOptions().withTypes(Set.of(GroupType.CONSUMER)))
                    .all().get(), group), "listGroups(types=CONSUMER) lists " + group);
            assertEquals(null, listed(admin.listGroups(new ListGroupsOptions().withTypes(Set.of(GroupType.CLASSIC)))
                    .all().get(), group), "listGroups(types=CLASSIC) does not list " + group);

            Collection<ConsumerGroupListing> cls = admin.listConsumerGroups().all().get();
            ConsumerGroupListing cl = cls.stream().filter(g -> g.groupId().equals(group)).findFirst()
                    .orElseThrow(() -> new AssertionError("listConsumerGroups does not list " + group + ": " + cls));
            assertEquals(Optional.of(GroupType.CONSUMER), cl.type(), "listConsumerGroups type: " + cl);
            assertEquals(Optional.of(GroupState.STABLE), cl.groupState(), "listConsumerGroups state: " + cl);

            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> admin.deleteConsumerGroups(List.of(group)).all().get(),
                    "deleting a group with a member");
            assertInstanceOf(GroupNotEmptyException.class, e.getCause(), "deleting a group with a member");
            assertEquals(produced.ends(), committedOffsets(group), "offsets of the group that was not deleted");
        } finally {
            m.close();
        }

        ConsumerGroupDescription d = describeGroup(group);
        assertEquals(GroupState.EMPTY, d.groupState(), "state after the member left: " + d);
        assertEquals(GroupType.CONSUMER, d.type(), "type after the member left: " + d);
        admin.deleteConsumerGroups(List.of(group)).all().get();

        assertEquals(null, listed(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get(), group),
                "the deleted group is not listed");
        try {
            Map<TopicPartition, Long> left = committedOffsets(group);
            assertTrue(left.isEmpty(), "offsets of the deleted group: " + left);
        } catch (ExecutionException ex) {
            assertInstanceOf(GroupIdNotFoundException.class, ex.getCause(), "offsets of the deleted group");
        }
        try {
            ConsumerGroupDescription gone = describeGroup(group);
            assertEquals(GroupState.DEAD, gone.groupState(), "the deleted group: " + gone);
            assertTrue(gone.members().isEmpty(), "members of the deleted group: " + gone);
        } catch (ExecutionException ex) {
            assertInstanceOf(GroupIdNotFoundException.class, ex.getCause(), "describing the deleted group");
        }
    }

    /**
     * A rolling upgrade and rollback as an application does it, with a producer writing all the
     * while: three classic consumers (CooperativeStickyAssignor) are restarted one by one with
     * {@code group.protocol=consumer} (the first turns the classic group into a consumer group in
     * which the others stay as classic members), then one by one back to classic (when the last
     * consumer-protocol member leaves, the group is classic again).
     */
    @Test
    void rollingUpgradeToTheConsumerProtocolAndBackWithCooperativeStickyClassicMembers() throws Exception {
        rollingUpgradeAndRollback("coop", CooperativeStickyAssignor.class, "cooperative-sticky", Map.of(), "uniform");
    }

    /**
     * The same with eager classic members (RangeAssignor, which give up all their partitions on
     * each rebalance) and consumer-protocol members asking for the range assignor on the
     * coordinator ({@code group.remote.assignor=range}).
     */
    @Test
    void rollingUpgradeToTheConsumerProtocolAndBackWithRangeClassicMembers() throws Exception {
        rollingUpgradeAndRollback("range", RangeAssignor.class, "range",
                Map.of(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, "range"), "range");
    }

    /**
     * Three classic members; each replaced in turn by a consumer-protocol member; then each of
     * those in turn by a classic member again. After every step: the group is stable with the
     * three members (disjoint assignments covering the topic, each as the member itself holds
     * it), of the expected group type and member types (ConsumerGroupDescribe v1 MemberType:
     * {@link MemberDescription#upgraded()}), listed with that type, and the committed offset of
     * every partition is where its owner goes on from. A member never starts a partition before
     * the offset the group had committed when it started; in the end every record the producer
     * wrote while the members came and went is consumed, and committed.
     */
    private static void rollingUpgradeAndRollback(String tag, Class<?> classicAssignor, String classicProtocol,
            Map<String, Object> cpExtra, String consumerAssignor) throws Exception {
        String topic = Clients.unique("cp-roll-" + tag);
        String group = Clients.unique("cp-roll-" + tag + "-group");
        createTopic(topic, PARTITIONS);
        Set<TopicPartition> all = partitions(topic, PARTITIONS);
        long t0 = System.nanoTime();

        List<Member> ms = new ArrayList<>(); // the current members, one per slot
        List<Member> everyone = new ArrayList<>();
        Map<Member, Map<TopicPartition, Long>> committedAtStart = new HashMap<>();
        Records seen = new Records();
        try (BackgroundProducer producer = new BackgroundProducer(topic, tag)) {
            producer.awaitEveryPartition(all);

            // ---- three classic members ------------------------------------------------------
            for (int i = 1; i <= 3; i++) {
                Member m = rollingMember(group, tag + "-classic-" + i, false, classicAssignor, cpExtra, topic);
                committedAtStart.put(m, Map.of());
                ms.add(m);
                everyone.add(m);
            }
            pollUntil(ms, seen, "the classic members consume from every partition",
                    () -> seen.byPartition.keySet().containsAll(all) ? null : "consumed " + seen.byPartition.keySet());
            checkRollingStep(group, ms, seen, all, GroupType.CLASSIC, classicProtocol, "3 classic members", t0);

            // ---- upgrade: each classic member replaced by a consumer-protocol member ---------
            for (int i = 0; i < 3; i++) {
                Member old = ms.get(i);
                old.close();
                Map<TopicPartition, Long> committed = committedOffsets(group);
                Member m = rollingMember(group, tag + "-consumer-" + (i + 1), true, classicAssignor, cpExtra, topic);
                committedAtStart.put(m, committed);
                ms.set(i, m);
                everyone.add(m);
                checkRollingStep(group, ms, seen, all, GroupType.CONSUMER, consumerAssignor,
                        old.name + " replaced by " + m.name, t0);
            }

            // ---- rollback: each consumer-protocol member replaced by a classic member --------
            for (int i = 2; i >= 0; i--) {
                Member old = ms.get(i);
                old.close();
                if (i == 0) {
                    // The last consumer-protocol member left: a classic group again, which
                    // rebalances its two members.
                    List<Member> two = List.of(ms.get(1), ms.get(2));
                    checkRollingStep(group, two, seen, all, GroupType.CLASSIC, classicProtocol,
                            "the last consumer-protocol member " + old.name + " left", t0);
                }
                Map<TopicPartition, Long> committed = committedOffsets(group);
                Member m = rollingMember(group, tag + "-classic-again-" + (i + 1), false, classicAssignor, cpExtra,
                        topic);
                committedAtStart.put(m, committed);
                ms.set(i, m);
                everyone.add(m);
                checkRollingStep(group, ms, seen, all, i == 0 ? GroupType.CLASSIC : GroupType.CONSUMER,
                        i == 0 ? classicProtocol : consumerAssignor, old.name + " replaced by " + m.name, t0);
            }

            // ---- the producer stops; everything it wrote is consumed and committed -----------
            Records produced = producer.finish();
            System.out.println("rolling " + tag + ": produced " + produced.count() + " records in "
                    + (System.nanoTime() - t0) / 1_000_000 + " ms");
            pollUntil(ms, seen, "every produced record consumed", () -> seen.missing(produced));
            assertConsumed(produced, seen);
            checkRollingStep(group, ms, seen, all, GroupType.CLASSIC, classicProtocol, "all records consumed", t0,
                    false);
            assertEquals(produced.ends(), committedOffsets(group), "committed offsets at the end");
        } finally {
            closeAll(everyone);
        }

        for (Member m : everyone) {
            Map<TopicPartition, Long> start = committedAtStart.get(m);
            m.firstOffsets.forEach((tp, first) -> {
                Long c = start.get(tp);
                assertTrue(c == null || first >= c, m.name + " started " + tp + " at offset " + first
                        + ", before the offset committed when it joined (" + c + "): it did not resume at the"
                        + " committed offsets; every member's first offsets: " + firstOffsets(everyone));
            });
        }
    }

    /**
     * Polls until each member has consumed records since the stable description {@code d}, and
     * returns the group's description then, which must be {@code d}'s group epoch and assignments.
     */
    private static ConsumerGroupDescription awaitConsumingStable(String group, List<Member> ms, Records seen,
            Set<TopicPartition> all, ConsumerGroupDescription d, String step) {
        Map<Member, Long> before = new HashMap<>();
        ms.forEach(m -> before.put(m, m.consumed));
        pollUntil(ms, seen, "every member consumes new records after " + step, () -> {
            String idle = ms.stream().filter(m -> m.consumed == before.get(m)).map(m -> m.name)
                    .collect(Collectors.joining(", "));
            return idle.isEmpty() ? null : "nothing consumed yet by " + idle;
        });
        ConsumerGroupDescription again = awaitStable(group, ms, seen, all);
        assertEquals(d.groupEpoch(), again.groupEpoch(), "group epoch while the members consume after " + step
                + ": before " + d + ", after " + again);
        assertEquals(memberAssignments(d), memberAssignments(again), "assignments while the members consume after "
                + step);
        return again;
    }

    private static Map<String, Set<TopicPartition>> memberAssignments(ConsumerGroupDescription d) {
        Map<String, Set<TopicPartition>> out = new TreeMap<>();
        d.members().forEach(md -> out.put(md.consumerId(), new HashSet<>(md.assignment().topicPartitions())));
        return out;
    }

    private static String firstOffsets(List<Member> ms) {
        return ms.stream().map(m -> m.name + "=" + new TreeMap<>(m.firstOffsets.entrySet().stream()
                .collect(Collectors.toMap(e -> e.getKey().toString(), Map.Entry::getValue))))
                .collect(Collectors.joining(", "));
    }

    private static Member rollingMember(String group, String name, boolean consumerProtocol, Class<?> classicAssignor,
            Map<String, Object> cpExtra, String topic) {
        Member m;
        if (consumerProtocol) {
            m = cpMember(group, name, cpExtra);
        } else {
            m = new Member(name, Clients.consumer(broker, group, name, Map.of(
                    ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic",
                    ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, classicAssignor.getName(),
                    ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 200)));
        }
        m.c.subscribe(List.of(topic));
        return m;
    }

    /**
     * Waits until the group is stable with exactly these members (awaitStable) and each of them
     * has consumed records since (in the same group epoch, with the same assignments), then
     * checks its type, assignor (classic: the protocol the members chose), member types, the
     * listed type, and that each partition's committed offset is its owner's position.
     */
    private static void checkRollingStep(String group, List<Member> ms, Records seen, Set<TopicPartition> all,
            GroupType type, String assignor, String step, long t0) throws Exception {
        checkRollingStep(group, ms, seen, all, type, assignor, step, t0, true);
    }

    private static void checkRollingStep(String group, List<Member> ms, Records seen, Set<TopicPartition> all,
            GroupType type, String assignor, String step, long t0, boolean producing) throws Exception {
        ConsumerGroupDescription d = awaitStable(group, ms, seen, all);
        // Each member consumes what the producer goes on writing to its partitions, and the
        // group stays stable meanwhile.
        if (producing) {
            d = awaitConsumingStable(group, ms, seen, all, d, step);
        }
        String ctx = " after " + step + ": " + d;
        assertEquals(type, d.type(), "group type" + ctx);
        assertEquals(GroupState.STABLE, d.groupState(), "group state" + ctx);
        assertEquals(assignor, d.partitionAssignor(), "assignor" + ctx);
        assertFalse(d.isSimpleConsumerGroup(), "simple consumer group" + ctx);
        if (type == GroupType.CONSUMER) {
            assertTrue(d.groupEpoch().isPresent(), "group epoch" + ctx);
            int epoch = d.groupEpoch().get();
            assertEquals(Optional.of(epoch), d.targetAssignmentEpoch(), "target assignment epoch" + ctx);
            for (MemberDescription md : d.members()) {
                boolean cp = ms.stream().filter(m -> m.name.equals(md.clientId())).findFirst().orElseThrow()
                        .name.contains("-consumer-");
                assertEquals(Optional.of(cp), md.upgraded(),
                        md.clientId() + (cp ? " is a consumer-protocol member" : " is a classic member") + ctx);
                assertEquals(Optional.of(epoch), md.memberEpoch(), "member epoch of " + md.clientId() + ctx);
                assertEquals(Optional.of(md.assignment()), md.targetAssignment(),
                        "target = current assignment of " + md.clientId() + ctx);
            }
        }
        GroupListing l = listed(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get(), group);
        assertNotNull(l, "listGroups lists " + group + " after " + step);
        assertEquals(Optional.of(type), l.type(), "listed type after " + step + ": " + l);
        assertEquals("consumer", l.protocol(), "listed protocol type after " + step + ": " + l);

        Map<TopicPartition, Long> committed = committedOffsets(group);
        for (Member m : ms) {
            for (TopicPartition tp : m.assignment()) {
                long pos = m.c.position(tp, Duration.ofSeconds(30));
                assertEquals(committed.getOrDefault(tp, 0L), pos, m.name + " goes on with " + tp
                        + " from the committed offset after " + step + "; committed: " + committed);
            }
        }
        System.out.println("rolling: " + step + " -> " + d.type() + " " + d.groupState() + " ("
                + (System.nanoTime() - t0) / 1_000_000 + " ms): " + d.members().stream()
                .map(md -> md.clientId() + md.upgraded().map(u -> u ? "[consumer]" : "[classic]").orElse("")
                        + md.memberEpoch().map(e -> "@" + e).orElse("") + "="
                        + md.assignment().topicPartitions().stream().map(TopicPartition::partition).sorted().toList())
                .collect(Collectors.joining(", ")));
    }

    /**
     * Writes keyed records in small batches (about 400 a second) until finished; returns what
     * the broker acknowledged by partition and offset.
     */
    static final class BackgroundProducer implements AutoCloseable {
        private final KafkaProducer<String, String> producer = Clients.producer(broker);
        private final Records acked = new Records();
        private final List<Exception> errors = new ArrayList<>();
        private final Thread thread;
        private volatile boolean stop;
        private int sent;

        BackgroundProducer(String topic, String tag) {
            thread = new Thread(() -> {
                try {
                    while (!stop) {
                        for (int i = 0; i < 10; i++, sent++) {
                            String key = String.format("key-%02d", sent % KEYS);
                            String value = tag + "#" + sent;
                            producer.send(new ProducerRecord<>(topic, key, value), (md, e) -> {
                                synchronized (acked) {
                                    if (e != null) {
                                        errors.add(e);
                                    } else {
                                        acked.add(new TopicPartition(md.topic(), md.partition()), md.offset(), value);
                                    }
                                }
                            });
                        }
                        Thread.sleep(25);
                    }
                } catch (Exception e) {
                    synchronized (acked) {
                        errors.add(e);
                    }
                }
            }, "rolling-producer-" + tag);
            thread.setDaemon(true);
            thread.start();
        }

        void awaitEveryPartition(Set<TopicPartition> all) throws InterruptedException {
            long deadline = System.nanoTime() + PHASE_TIMEOUT.toNanos();
            while (System.nanoTime() < deadline) {
                synchronized (acked) {
                    assertTrue(errors.isEmpty(), "producer errors: " + errors);
                    if (acked.byPartition.keySet().containsAll(all)) {
                        return;
                    }
                }
                Thread.sleep(20);
            }
            fail("the producer did not write to every partition of " + all);
        }

        /** Stops, flushes, and returns every acknowledged record; fails on a send error. */
        Records finish() throws Exception {
            stop = true;
            thread.join(30_000);
            producer.flush();
            synchronized (acked) {
                assertTrue(errors.isEmpty(), "producer errors: " + errors);
                assertEquals(sent, acked.count(), "records acknowledged of those sent");
                Records out = new Records();
                out.addAll(acked);
                return out;
            }
        }

        @Override
        public void close() {
            stop = true;
            try {
                thread.join(30_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            producer.close(Duration.ofSeconds(10));
        }
    }

    // ------------------------------------------------------------------ helpers

    /**
     * Creates a topic and waits until every partition answers ListOffsets at its leader: Kafka
     * shows the leaders in metadata a little before it has created the partitions, and an
     * idempotent producer whose first batches are refused there (NOT_LEADER_OR_FOLLOWER, then
     * OUT_OF_ORDER_SEQUENCE_NUMBER for the ones after) can stall until its delivery timeout.
     */
    private static void createTopic(String topic, int n) throws Exception {
        Clients.createTopic(admin, topic, n);
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        partitions(topic, n).forEach(tp -> req.put(tp, OffsetSpec.latest()));
        admin.listOffsets(req).all().get(30, TimeUnit.SECONDS);
    }

    private static Set<TopicPartition> partitions(String topic, int n) {
        Set<TopicPartition> out = new HashSet<>();
        for (int p = 0; p < n; p++) {
            out.add(new TopicPartition(topic, p));
        }
        return out;
    }

    /** Sends n keyed records (idempotent, acks=all) and returns them by partition and offset. */
    private static Records produce(String topic, int n, String tag) throws Exception {
        Records out = new Records();
        try (KafkaProducer<String, String> producer = Clients.producer(broker)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            List<String> values = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                String key = String.format("key-%02d", i % KEYS);
                String value = tag + "#" + i;
                values.add(value);
                futures.add(producer.send(new ProducerRecord<>(topic, key, value)));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata md = futures.get(i).get(30, TimeUnit.SECONDS); // throws if the send failed
                TopicPartition tp = new TopicPartition(topic, md.partition());
                TreeMap<Long, String> m = out.byPartition.computeIfAbsent(tp, k -> new TreeMap<>());
                assertEquals(null, m.put(md.offset(), values.get(i)),
                        "two sends acknowledged at " + tp + "@" + md.offset());
            }
        }
        return out;
    }

    /** Every produced record was consumed (at least once), and nothing else, each with its value. */
    private static void assertConsumed(Records produced, Records seen) {
        assertEquals(null, seen.missing(produced), "records not consumed");
        seen.byPartition.forEach((tp, m) -> m.forEach((o, v) -> {
            TreeMap<Long, String> p = produced.byPartition.get(tp);
            assertTrue(p != null && p.containsKey(o), "consumed " + tp + "@" + o + " that was not produced");
            assertEquals(p.get(o), v, "value of " + tp + "@" + o);
        }));
        assertEquals(produced.count(), seen.count(), "distinct offsets consumed");
    }

    private static void pollUntil(List<Member> ms, Records sink, String what, Supplier<String> problem) {
        pollUntil(ms, sink, true, what, problem);
    }

    /**
     * Polls the open members round-robin (adding what they get to the sink, commitSync after
     * each poll that returned records when {@code commit}) until {@code problem} returns null.
     */
    private static void pollUntil(List<Member> ms, Records sink, boolean commit, String what,
            Supplier<String> problem) {
        long deadline = System.nanoTime() + PHASE_TIMEOUT.toNanos();
        String last = "not checked";
        while (System.nanoTime() < deadline) {
            pollOnce(ms, sink, commit);
            last = problem.get();
            if (last == null) {
                return;
            }
        }
        fail("timed out after " + PHASE_TIMEOUT.toSeconds() + "s waiting until " + what + ": " + last
                + "; assignments: " + assignments(ms));
    }

    /**
     * One poll of each open member; with {@code commit}, commitSync of its positions after a poll
     * that returned records (or after a commit that failed).
     *
     * <p>Two things the 4.1 client does during a rebalance are tolerated (and counted): a commit
     * refused for a stale member epoch (the coordinator bumped the member's epoch in a heartbeat
     * response the client has not read yet; Kafka checks the epoch exactly and the client throws
     * CommitFailedException: the commit is retried after the next poll, and records of a partition
     * that moved meanwhile are read again by the new owner, at least once), and poll throwing
     * "No current assignment for partition" (FetchCollector.fetchRecords checks that a partition
     * is assigned, then reads its position, while the background thread may revoke it in
     * between; the next poll drops that partition's fetched data). A classic member's commit
     * during a rebalance of its group (RebalanceInProgressException: the client finishes the
     * rebalance in its next poll) is retried the same way.
     */
    private static void pollOnce(List<Member> ms, Records sink, boolean commit) {
        for (Member m : ms) {
            if (m.closed) {
                continue;
            }
            ConsumerRecords<String, String> rs;
            try {
                rs = m.c.poll(Duration.ofMillis(100));
            } catch (IllegalStateException e) {
                if (e.getMessage() == null || !e.getMessage().startsWith("No current assignment for partition")) {
                    throw e;
                }
                System.err.println(m.name + ": poll raced with a revocation: " + e.getMessage());
                continue;
            }
            for (ConsumerRecord<String, String> r : rs) {
                TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                sink.add(tp, r.offset(), r.value());
                m.firstOffsets.putIfAbsent(tp, r.offset());
                m.consumed++;
            }
            if (commit && (!rs.isEmpty() || m.uncommitted)) {
                try {
                    m.c.commitSync(Duration.ofSeconds(30));
                    m.uncommitted = false;
                } catch (CommitFailedException | RebalanceInProgressException e) {
                    m.uncommitted = true;
                    m.failedCommits++;
                    System.err.println(m.name + ": commit failed, retried after the next poll: " + e.getMessage());
                }
            }
        }
    }

    private static String assignments(List<Member> ms) {
        return ms.stream().filter(m -> !m.closed).map(m -> m.name + "=" + new TreeMap<>(
                m.assignment().stream().collect(Collectors.toMap(TopicPartition::toString, tp -> 1))).keySet())
                .collect(Collectors.joining(", "));
    }

    private static String nonMatching(Member m, Records seen, List<String> others) {
        for (TopicPartition tp : m.assignment()) {
            if (others.contains(tp.topic())) {
                return m.name + " was assigned " + tp + ", which does not match the pattern";
            }
        }
        for (TopicPartition tp : seen.byPartition.keySet()) {
            if (others.contains(tp.topic())) {
                return m.name + " consumed records of " + tp + ", which does not match the pattern";
            }
        }
        return null;
    }

    private static ConsumerGroupDescription describeGroup(String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
    }

    /**
     * Polls the members until the coordinator describes the group as STABLE with exactly these
     * members, whose assignments are disjoint, cover {@code all}, and equal what each member
     * itself holds, and no member has a failed commit to retry; returns that description.
     */
    private static ConsumerGroupDescription awaitStable(String group, List<Member> ms, Records sink,
            Set<TopicPartition> all) {
        ConsumerGroupDescription[] out = new ConsumerGroupDescription[1];
        pollUntil(ms, sink, "group " + group + " is stable with " + ms.size() + " members covering " + all.size()
                + " partitions", () -> {
                    ConsumerGroupDescription d;
                    try {
                        d = describeGroup(group);
                    } catch (Exception e) {
                        return "describe failed: " + e;
                    }
                    out[0] = d;
                    if (d.groupState() != GroupState.STABLE || d.members().size() != ms.size()) {
                        return "state " + d.groupState() + " with " + d.members().size() + " members: " + d;
                    }
                    Set<TopicPartition> union = new HashSet<>();
                    int total = 0;
                    for (MemberDescription md : d.members()) {
                        Set<TopicPartition> a = new HashSet<>(md.assignment().topicPartitions());
                        union.addAll(a);
                        total += a.size();
                        Optional<Member> m = ms.stream().filter(x -> x.name.equals(md.clientId())).findFirst();
                        if (m.isEmpty()) {
                            return "described member " + md.clientId() + " is not one of ours: " + d;
                        }
                        if (!m.get().assignment().equals(a)) {
                            return m.get().name + " holds " + m.get().assignment() + ", described with " + a;
                        }
                    }
                    if (total != all.size() || !union.equals(all)) {
                        return "described assignments do not split " + all + " (disjoint, covering): " + d;
                    }
                    for (Member m : ms) {
                        if (m.uncommitted) {
                            return m.name + " has a failed commit to retry";
                        }
                    }
                    return null;
                });
        return out[0];
    }

    /** A stable consumer group as ConsumerGroupDescribe reports it, beyond what awaitStable checked. */
    private static void assertConsumerGroup(ConsumerGroupDescription d, List<Member> ms, String assignor)
            throws Exception {
        assertEquals(GroupType.CONSUMER, d.type(), "group type: " + d);
        assertEquals(GroupState.STABLE, d.groupState(), "group state: " + d);
        assertEquals(assignor, d.partitionAssignor(), "assignor: " + d);
        assertFalse(d.isSimpleConsumerGroup(), "simple consumer group: " + d);
        assertTrue(d.groupEpoch().isPresent(), "group epoch: " + d);
        int epoch = d.groupEpoch().get();
        assertTrue(epoch > 0, "group epoch: " + d);
        assertEquals(Optional.of(epoch), d.targetAssignmentEpoch(), "target assignment epoch of a stable group: " + d);
        assertEquals(ms.size(), d.members().size(), "members: " + d);
        Set<String> ids = new HashSet<>();
        for (MemberDescription md : d.members()) {
            assertTrue(md.consumerId() != null && !md.consumerId().isEmpty(), "member id: " + md);
            assertTrue(ids.add(md.consumerId()), "member ids are distinct: " + d);
            assertTrue(md.host() != null && !md.host().isEmpty(), "member host: " + md);
            assertEquals(Optional.of(epoch), md.memberEpoch(), "member epoch in a stable group: " + md);
            assertEquals(Optional.of(md.assignment()), md.targetAssignment(), "target = current assignment: " + md);
            md.upgraded().ifPresent(u -> assertTrue(u, "a consumer-protocol member: " + md));
        }
        assertNotNull(d.coordinator(), "coordinator");
        System.out.println("group " + d.groupId() + " (epoch " + epoch + ") is coordinated by node "
                + d.coordinator().id());
        if (Target.clusterMode()) {
            Set<Integer> nodes = new HashSet<>();
            admin.describeCluster().nodes().get().forEach(n -> nodes.add(n.id()));
            assertTrue(nodes.contains(d.coordinator().id()), "coordinator " + d.coordinator() + " is one of " + nodes);
        } else {
            assertEquals(1, d.coordinator().id(), "coordinator id");
        }
    }

    private static GroupListing listed(Collection<GroupListing> groups, String group) {
        return groups.stream().filter(g -> g.groupId().equals(group)).findFirst().orElse(null);
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
}
