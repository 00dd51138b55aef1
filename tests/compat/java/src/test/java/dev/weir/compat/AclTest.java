package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.scram.ScramLoginModule;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * ACLs (single broker only: skipped with {@code WEIR_COMPAT_TARGET=cluster}). The class's
 * broker has a PLAINTEXT listener (the harness's address; its principal, User:ANONYMOUS, is a
 * super user: the harness and Kafka's kafka-acls set things up through it) and a SASL_PLAINTEXT
 * one (SCRAM-SHA-256) where the users alice and bob connect; the ACL authorizer is on and a
 * resource without ACLs is closed (allow.everyone.if.no.acl.found=false). Every test starts
 * with no ACL at all. With {@code WEIR_TEST_BROKER=kafka} the same tests run against Kafka 4.4
 * (StandardAuthorizer), which is what Weir's answers are compared with.
 * <ul>
 *   <li>Kafka's kafka-acls (org.apache.kafka.tools.AclCommand, from tools/kafka/kafka.sh's jars)
 *       adds alice's WRITE and DESCRIBE on a topic and READ on it and on a group, and lists
 *       them. Alice produces to it and not to a topic she has no ACL for; a member of her group
 *       reads the records and commits; a member of another group, classic or KIP-848, is refused
 *       (GroupAuthorizationException); bob, without ACLs, cannot produce. kafka-acls removes
 *       alice's WRITE: within 3 s a new producer of hers is refused (TopicAuthorizationException),
 *       and an idempotent one is refused InitProducerId (ClusterAuthorizationException: no
 *       IDEMPOTENT_WRITE on the cluster and no WRITE on any topic).
 *   <li>The admin API as alice: topic listings hold only what she may DESCRIBE, describing,
 *       creating or deleting other topics is refused per topic, the cluster APIs (CreateAcls,
 *       DescribeAcls, AlterUserScramCredentials) are refused (ClusterAuthorizationException),
 *       group listings hold none of the groups she has no ACL for.
 *   <li>DescribeCluster, as Kafka answers it: any principal may describe the cluster (Kafka checks
 *       DESCRIBE on the cluster only to fill in the authorized operations), and the authorized
 *       operations of the cluster, a topic and a group are the principal's own.
 *   <li>A PREFIXED allow and a LITERAL deny (kafka-acls --resource-pattern-type prefixed):
 *       bob may read and write every topic with the prefix except write one, which he can still
 *       read; --resource-pattern-type match lists both ACLs for that topic.
 *   <li>User:* on the literal topic "*" (everyone describes every topic); an ALLOW from another
 *       host does not apply, one from the client's does; a DENY of User:* wins over it;
 *       ALTER_CONFIGS on a topic implies DESCRIBE_CONFIGS, configs of other topics are refused.
 *   <li>Auto-creation (Metadata) needs CREATE: a topic bob may create is created; one he may
 *       describe but not create is refused at once (TOPIC_AUTHORIZATION_FAILED, as Kafka answers),
 *       not left unknown until max.block.ms.
 *   <li>Transactions: alice with WRITE on a transactional id and a topic commits a transaction
 *       (read back read_committed); another transactional id is refused
 *       (TransactionalIdAuthorizationException).
 * </ul>
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class AclTest {
    private static final String ALICE = "alice";
    private static final String BOB = "bob";
    private static final String PASSWORD = "-secret"; // each user's password is name + this

    private static Path work;
    private static Broker broker;
    private static int saslPort;
    /** The harness's admin client: PLAINTEXT, User:ANONYMOUS, a super user. */
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        Assumptions.assumeTrue(!Target.clusterMode(),
                "AclTest configures a single broker's listeners (not with WEIR_COMPAT_TARGET=cluster)");
        work = Files.createTempDirectory("weir-compat-java-acl-");
        broker = Broker.start("AclTest", b -> {
            saslPort = freePort();
            return Map.of(
                    "WEIR_SECURITY_LISTENERS", "PLAINTEXT://127.0.0.1:" + b.port + ",SASL_PLAINTEXT://127.0.0.1:" + saslPort,
                    "WEIR_SECURITY_SASL_ENABLED_MECHANISMS", "SCRAM-SHA-256",
                    "WEIR_SECURITY_AUTHORIZER", "acl",
                    "WEIR_SECURITY_SUPER_USERS", "User:ANONYMOUS",
                    "WEIR_SECURITY_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "false");
        }, b -> {
            saslPort = freePort();
            Map<String, String> p = new LinkedHashMap<>();
            String listeners = "PLAINTEXT://127.0.0.1:" + b.port + ",CONTROLLER://127.0.0.1:" + b.secondPort
                    + ",SASL_PLAINTEXT://127.0.0.1:" + saslPort;
            p.put("listeners", listeners);
            p.put("advertised.listeners", listeners);
            p.put("listener.security.protocol.map", "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT");
            p.put("sasl.enabled.mechanisms", "SCRAM-SHA-256");
            p.put("listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config",
                    ScramLoginModule.class.getName() + " required;");
            p.put("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer");
            p.put("super.users", "User:ANONYMOUS");
            p.put("allow.everyone.if.no.acl.found", "false");
            return p;
        });
        admin = Clients.admin(broker);
        admin.alterUserScramCredentials(List.of(
                new UserScramCredentialUpsertion(ALICE, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                        ALICE + PASSWORD),
                new UserScramCredentialUpsertion(BOB, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                        BOB + PASSWORD)))
                .all().get();
    }

    @AfterAll
    static void stop() throws Exception {
        try {
            if (admin != null) {
                admin.close(Duration.ofSeconds(10));
            }
        } finally {
            try {
                if (broker != null) {
                    broker.close();
                }
            } finally {
                if (work != null) {
                    Broker.deleteTree(work);
                }
            }
        }
    }

    /** Every test starts without ACLs (DeleteAcls with the filter matching everything). */
    @BeforeEach
    void noAcls() throws Exception {
        admin.deleteAcls(List.of(AclBindingFilter.ANY)).all().get();
        assertEquals(List.of(), List.copyOf(admin.describeAcls(AclBindingFilter.ANY).values().get()),
                "ACLs left after deleting every ACL");
    }

    // ---------------------------------------------------------------- kafka-acls, produce and consume

    @Test
    void kafkaAclsGrantTopicAndGroupAccess() throws Exception {
        String orders = Clients.unique("orders");
        String payments = Clients.unique("payments");
        String app = Clients.unique("orders-app");
        String otherGroup = Clients.unique("other-group");
        Clients.createTopic(admin, orders, 1);
        Clients.createTopic(admin, payments, 1);

        Run add = kafkaAcls("--add", "--allow-principal", "User:alice", "--operation", "Write",
                "--operation", "Describe", "--topic", orders);
        assertEquals(0, add.exit, "kafka-acls --add:\n" + add.output);
        assertTrue(add.output.contains("Adding ACLs for resource `" + literal(ResourceType.TOPIC, orders) + "`"),
                add.output);
        add = kafkaAcls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", orders,
                "--group", app);
        assertEquals(0, add.exit, "kafka-acls --add:\n" + add.output);

        Run list = kafkaAcls("--list", "--topic", orders);
        assertEquals(0, list.exit, "kafka-acls --list:\n" + list.output);
        assertTrue(list.output.contains("Current ACLs for resource `" + literal(ResourceType.TOPIC, orders) + "`:"),
                list.output);
        assertEquals(Set.of(allow(ALICE, "WRITE"), allow(ALICE, "DESCRIBE"), allow(ALICE, "READ")),
                aclLines(list.output), "kafka-acls --list --topic:\n" + list.output);
        assertFalse(list.output.contains("resourceType=GROUP"), "--list --topic lists the group's ACL:\n" + list.output);
        // The group's ACL, through the admin API.
        Collection<AclBinding> groupAcls = admin.describeAcls(new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.GROUP, app, PatternType.LITERAL), AccessControlEntryFilter.ANY))
                .values().get();
        assertEquals(List.of(new AclBinding(new ResourcePattern(ResourceType.GROUP, app, PatternType.LITERAL),
                new AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))),
                List.copyOf(groupAcls));

        // Alice writes to orders, not to payments (no ACL: Metadata refuses it).
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(sasl(ALICE)))) {
            for (int i = 0; i < 5; i++) {
                assertEquals(i, p.send(new ProducerRecord<>(orders, "k", "order-" + i)).get(15, TimeUnit.SECONDS).offset());
            }
            assertTopicDenied(sendFailure(p, payments), payments);
            assertEquals(5, p.send(new ProducerRecord<>(orders, "k", "order-5")).get(15, TimeUnit.SECONDS).offset(),
                    "alice writes to orders after payments was refused");
        }

        // A member of her group reads them and commits.
        List<String> read = new ArrayList<>();
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, app, "alice-reader", sasl(ALICE))) {
            c.subscribe(List.of(orders));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (read.size() < 6 && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    read.add(r.value());
                }
            }
            c.commitSync();
        }
        assertEquals(List.of("order-0", "order-1", "order-2", "order-3", "order-4", "order-5"), read);
        Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(app).partitionsToOffsetAndMetadata().get();
        assertEquals(6, committed.get(new TopicPartition(orders, 0)).offset(), "alice's group's offset: " + committed);

        // Another group: FindCoordinator (DESCRIBE on the group) is refused, classic and KIP-848.
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, otherGroup, "alice-other", sasl(ALICE))) {
            c.subscribe(List.of(orders));
            GroupAuthorizationException e = pollUntilRefused(c);
            assertEquals(otherGroup, e.groupId(), e.toString());
        }
        try (KafkaConsumer<String, String> c = Clients.consumerProtocol(broker, otherGroup, "alice-other-848", sasl(ALICE))) {
            c.subscribe(List.of(orders));
            GroupAuthorizationException e = pollUntilRefused(c);
            assertEquals(otherGroup, e.groupId(), e.toString());
        }
        assertFalse(admin.listConsumerGroups().all().get().stream().map(ConsumerGroupListing::groupId)
                .anyMatch(otherGroup::equals), "the refused group exists");

        // Bob has no ACL: he cannot even see orders.
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(sasl(BOB)))) {
            assertTopicDenied(sendFailure(p, orders), orders);
        }

        // kafka-acls removes alice's WRITE: her next producer is refused within 3 s.
        Run remove = kafkaAcls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write",
                "--topic", orders);
        assertEquals(0, remove.exit, "kafka-acls --remove:\n" + remove.output);
        long removed = System.nanoTime();
        Map<String, Object> plain = bounded(sasl(ALICE)); // not idempotent: the Produce itself is refused
        plain.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
        plain.put(ProducerConfig.ACKS_CONFIG, "1");
        Throwable refused = null;
        int writtenAfter = 0;
        while (refused == null) {
            try (KafkaProducer<String, String> p = Clients.producer(broker, plain)) {
                p.send(new ProducerRecord<>(orders, "k", "after-remove")).get(15, TimeUnit.SECONDS);
                writtenAfter++;
            } catch (ExecutionException e) {
                refused = e.getCause();
            }
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - removed);
            if (refused == null && ms > 3000) {
                fail("alice still writes to " + orders + " " + ms + " ms after her WRITE was removed ("
                        + writtenAfter + " records)");
            }
        }
        System.out.println("alice refused " + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - removed)
                + " ms after the removal, " + writtenAfter + " records written before: " + refused);
        assertTopicDenied(refused, orders);
        // Idempotent: she may no longer write to any topic, so InitProducerId is refused too.
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(sasl(ALICE)))) {
            Throwable e = sendFailure(p, orders);
            assertNotNull(find(e, ClusterAuthorizationException.class), "an idempotent producer without WRITE: " + e);
        }
        assertEquals(Set.of(allow(ALICE, "DESCRIBE"), allow(ALICE, "READ")),
                aclLines(kafkaAcls("--list", "--topic", orders).output), "alice's ACLs on orders after the removal");
    }

    // ---------------------------------------------------------------- the admin API

    @Test
    void adminClientSeesAndChangesOnlyWhatItMay() throws Exception {
        String orders = Clients.unique("orders");
        String payments = Clients.unique("payments");
        String group = Clients.unique("admin-group");
        Clients.createTopic(admin, orders, 2);
        Clients.createTopic(admin, payments, 1);
        createAcls(
                acl(ResourceType.TOPIC, orders, PatternType.LITERAL, ALICE, AclOperation.WRITE, AclPermissionType.ALLOW),
                acl(ResourceType.TOPIC, orders, PatternType.LITERAL, ALICE, AclOperation.DESCRIBE, AclPermissionType.ALLOW));
        // A group that exists (with a committed offset) and that alice has no ACL for.
        admin.alterConsumerGroupOffsets(group, Map.of(new TopicPartition(orders, 0), new OffsetAndMetadata(0))).all().get();
        assertTrue(admin.listConsumerGroups().all().get().stream().anyMatch(g -> g.groupId().equals(group)),
                "the super user lists " + group);

        try (Admin a = Clients.admin(broker, sasl(ALICE))) {
            assertEquals(Set.of(orders), a.listTopics().names().get(), "the topics alice may describe");
            assertEquals(2, a.describeTopics(List.of(orders)).allTopicNames().get().get(orders).partitions().size());
            assertTopicRefused(failure(() -> a.describeTopics(List.of(payments)).allTopicNames().get()), payments);
            assertTopicRefused(failure(() -> a.listOffsets(Map.of(new TopicPartition(payments, 0), OffsetSpec.latest()))
                    .all().get()), payments);
            String fresh = Clients.unique("alice-new");
            assertTopicRefused(failure(() -> a.createTopics(List.of(new NewTopic(fresh, 1, (short) 1))).all().get()), fresh);
            assertTopicRefused(failure(() -> a.deleteTopics(List.of(orders)).all().get()), orders);
            assertTrue(admin.listTopics().names().get().containsAll(List.of(orders, payments)), "orders was deleted");
            assertFalse(admin.listTopics().names().get().contains(fresh), "alice created a topic");

            // Cluster APIs.
            assertInstanceOf(ClusterAuthorizationException.class, failure(() -> a.createAcls(List.of(
                    acl(ResourceType.TOPIC, payments, PatternType.LITERAL, ALICE, AclOperation.ALL, AclPermissionType.ALLOW)))
                    .all().get()), "CreateAcls as alice");
            assertInstanceOf(ClusterAuthorizationException.class,
                    failure(() -> a.describeAcls(AclBindingFilter.ANY).values().get()), "DescribeAcls as alice");
            assertInstanceOf(ClusterAuthorizationException.class, failure(() -> a.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion(BOB, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                            "stolen"))).all().get()), "AlterUserScramCredentials as alice");
            assertEquals(2, admin.describeAcls(AclBindingFilter.ANY).values().get().size(), "ACLs after alice's attempts");

            // Groups: none she has no ACL for.
            assertEquals(List.of(), a.listConsumerGroups().all().get().stream().map(ConsumerGroupListing::groupId).toList(),
                    "the groups alice lists");
            assertInstanceOf(GroupAuthorizationException.class,
                    failure(() -> a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()),
                    "alice reads another group's offsets");
        }
    }

    @Test
    void describeClusterAndAuthorizedOperationsAreThePrincipals() throws Exception {
        String orders = Clients.unique("orders");
        String group = Clients.unique("ops-group");
        Clients.createTopic(admin, orders, 1);
        createAcls(
                acl(ResourceType.TOPIC, orders, PatternType.LITERAL, ALICE, AclOperation.WRITE, AclPermissionType.ALLOW),
                acl(ResourceType.TOPIC, orders, PatternType.LITERAL, ALICE, AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                acl(ResourceType.GROUP, group, PatternType.LITERAL, ALICE, AclOperation.READ, AclPermissionType.ALLOW));
        admin.alterConsumerGroupOffsets(group, Map.of(new TopicPartition(orders, 0), new OffsetAndMetadata(0))).all().get();

        DescribeClusterOptions withOps = new DescribeClusterOptions().includeAuthorizedOperations(true);
        DescribeClusterResult superUser = admin.describeCluster(withOps);
        assertTrue(superUser.authorizedOperations().get().containsAll(
                        Set.of(AclOperation.DESCRIBE, AclOperation.ALTER, AclOperation.CREATE, AclOperation.CLUSTER_ACTION)),
                "the super user's operations on the cluster: " + superUser.authorizedOperations().get());
        try (Admin a = Clients.admin(broker, sasl(ALICE))) {
            // Each on its own: one failing does not hide the others.
            assertAll(
                    () -> {
                        // Kafka answers DescribeCluster to every principal (AuthHelper.computeDescribeClusterResponse
                        // checks DESCRIBE on the cluster only for clusterAuthorizedOperations: 0 without it).
                        DescribeClusterResult d = a.describeCluster(withOps);
                        assertEquals(superUser.clusterId().get(), d.clusterId().get(), "the cluster id alice is told");
                        assertEquals(1, d.nodes().get().size(), "the brokers alice is told of: " + d.nodes().get());
                        assertEquals(Set.of(), d.authorizedOperations().get(), "alice's operations on the cluster");
                    },
                    // (The admin client's describeTopics asks for DescribeCluster first.)
                    () -> assertEquals(Set.of(AclOperation.WRITE, AclOperation.DESCRIBE),
                            a.describeTopics(List.of(orders), new DescribeTopicsOptions().includeAuthorizedOperations(true))
                                    .allTopicNames().get().get(orders).authorizedOperations(),
                            "alice's operations on " + orders),
                    () -> assertEquals(Set.of(AclOperation.READ, AclOperation.DESCRIBE),
                            a.describeConsumerGroups(List.of(group),
                                            new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true))
                                    .all().get().get(group).authorizedOperations(),
                            "alice's operations on " + group));
        }
    }

    // ---------------------------------------------------------------- PREFIXED and DENY

    @Test
    void prefixedAllowAndLiteralDeny() throws Exception {
        String prefix = Clients.unique("logs") + "-";
        String app = prefix + "app";
        String audit = prefix + "audit";
        Clients.createTopic(admin, app, 1);
        Clients.createTopic(admin, audit, 1);
        Clients.createTopic(admin, Clients.unique("other"), 1);
        try (KafkaProducer<String, String> p = Clients.producer(broker)) { // PLAINTEXT, the super user
            for (int i = 0; i < 3; i++) {
                p.send(new ProducerRecord<>(audit, "k", "audit-" + i)).get(15, TimeUnit.SECONDS);
            }
        }

        Run add = kafkaAcls("--add", "--allow-principal", "User:bob", "--operation", "Read", "--operation", "Write",
                "--operation", "Describe", "--topic", prefix, "--resource-pattern-type", "prefixed");
        assertEquals(0, add.exit, "kafka-acls --add prefixed:\n" + add.output);
        add = kafkaAcls("--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", audit);
        assertEquals(0, add.exit, "kafka-acls --add deny:\n" + add.output);

        // Every ACL that applies to the audit topic: the prefixed ALLOWs and the literal DENY.
        Run match = kafkaAcls("--list", "--topic", audit, "--resource-pattern-type", "match");
        assertEquals(0, match.exit, "kafka-acls --list match:\n" + match.output);
        String prefixed = new ResourcePattern(ResourceType.TOPIC, prefix, PatternType.PREFIXED).toString();
        assertTrue(match.output.contains("Current ACLs for resource `" + prefixed + "`:"), match.output);
        assertTrue(match.output.contains("Current ACLs for resource `" + literal(ResourceType.TOPIC, audit) + "`:"),
                match.output);
        assertEquals(Set.of(allow(BOB, "READ"), allow(BOB, "WRITE"), allow(BOB, "DESCRIBE"),
                "(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)"), aclLines(match.output),
                "kafka-acls --list --resource-pattern-type match:\n" + match.output);
        // A prefixed listing holds the prefixed ACLs only.
        Run prefixedList = kafkaAcls("--list", "--topic", prefix, "--resource-pattern-type", "prefixed");
        assertEquals(Set.of(allow(BOB, "READ"), allow(BOB, "WRITE"), allow(BOB, "DESCRIBE")),
                aclLines(prefixedList.output), "kafka-acls --list prefixed:\n" + prefixedList.output);

        try (Admin a = Clients.admin(broker, sasl(BOB))) {
            assertEquals(Set.of(app, audit), a.listTopics().names().get(), "the topics bob may describe");
        }
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(sasl(BOB)))) {
            assertEquals(0, p.send(new ProducerRecord<>(app, "k", "app-0")).get(15, TimeUnit.SECONDS).offset());
            assertTopicDenied(sendFailure(p, audit), audit);
            assertEquals(1, p.send(new ProducerRecord<>(app, "k", "app-1")).get(15, TimeUnit.SECONDS).offset(),
                    "bob writes to " + app + " after " + audit + " was refused");
        }
        TopicPartition tp = new TopicPartition(audit, 0);
        assertEquals(3, admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset(),
                "records in " + audit);

        // Bob may still read the audit topic (no group: assigned).
        List<String> read = new ArrayList<>();
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, null, "bob-reader", sasl(BOB))) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
            while (read.size() < 3 && System.nanoTime() < deadline) {
                c.poll(Duration.ofMillis(200)).forEach(r -> read.add(r.value()));
            }
        }
        assertEquals(List.of("audit-0", "audit-1", "audit-2"), read, "what bob read from " + audit);
    }

    // ---------------------------------------------------------------- wildcards, hosts, implied operations

    @Test
    void wildcardsHostsAndImpliedOperations() throws Exception {
        String t1 = Clients.unique("wild");
        String t2 = Clients.unique("wild");
        Clients.createTopic(admin, t1, 1);
        Clients.createTopic(admin, t2, 1);
        Map<String, Object> plain = bounded(sasl(ALICE)); // not idempotent: the Produce itself is checked
        plain.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
        plain.put(ProducerConfig.ACKS_CONFIG, "1");

        // User:* on the literal "*": everyone may describe every topic.
        createAcls(acl(ResourceType.TOPIC, "*", PatternType.LITERAL, "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW));
        for (String user : List.of(ALICE, BOB)) {
            try (Admin a = Clients.admin(broker, sasl(user))) {
                assertTrue(a.listTopics().names().get().containsAll(List.of(t1, t2)), user + " lists every topic");
            }
        }

        // WRITE from another host does not let alice (on 127.0.0.1) write; from hers it does.
        admin.createAcls(List.of(new AclBinding(new ResourcePattern(ResourceType.TOPIC, t1, PatternType.LITERAL),
                new AccessControlEntry("User:alice", "10.9.8.7", AclOperation.WRITE, AclPermissionType.ALLOW)))).all().get();
        try (KafkaProducer<String, String> p = Clients.producer(broker, plain)) {
            assertTopicDenied(sendFailure(p, t1), t1);
        }
        admin.createAcls(List.of(new AclBinding(new ResourcePattern(ResourceType.TOPIC, t1, PatternType.LITERAL),
                new AccessControlEntry("User:alice", "127.0.0.1", AclOperation.WRITE, AclPermissionType.ALLOW)))).all().get();
        try (KafkaProducer<String, String> p = Clients.producer(broker, plain)) {
            assertEquals(0, p.send(new ProducerRecord<>(t1, "k", "from 127.0.0.1")).get(15, TimeUnit.SECONDS).offset());
        }
        // A DENY of User:* from every host wins over her ALLOW.
        createAcls(acl(ResourceType.TOPIC, t1, PatternType.LITERAL, "*", AclOperation.WRITE, AclPermissionType.DENY));
        try (KafkaProducer<String, String> p = Clients.producer(broker, plain)) {
            assertTopicDenied(sendFailure(p, t1), t1);
        }

        // ALTER_CONFIGS implies DESCRIBE_CONFIGS.
        createAcls(acl(ResourceType.TOPIC, t2, PatternType.LITERAL, ALICE, AclOperation.ALTER_CONFIGS,
                AclPermissionType.ALLOW));
        ConfigResource c1 = new ConfigResource(ConfigResource.Type.TOPIC, t1);
        ConfigResource c2 = new ConfigResource(ConfigResource.Type.TOPIC, t2);
        try (Admin a = Clients.admin(broker, sasl(ALICE))) {
            a.incrementalAlterConfigs(Map.of(c2, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET)))).all().get();
            assertEquals("3600000", a.describeConfigs(List.of(c2)).all().get().get(c2).get("retention.ms").value(),
                    "retention.ms of " + t2 + " as alice describes it");
            assertTopicRefused(failure(() -> a.describeConfigs(List.of(c1)).all().get()), t1);
            assertTopicRefused(failure(() -> a.incrementalAlterConfigs(Map.of(c1, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "1000"), AlterConfigOp.OpType.SET)))).all().get()), t1);
        }
        assertEquals("3600000", admin.describeConfigs(List.of(c2)).all().get().get(c2).get("retention.ms").value());
        assertTrue(admin.describeConfigs(List.of(c1)).all().get().get(c1).get("retention.ms").isDefault(),
                "retention.ms of " + t1 + " was changed");
    }

    // ---------------------------------------------------------------- auto-creation

    @Test
    void autoCreationNeedsCreate() throws Exception {
        String prefix = Clients.unique("auto") + "-";
        String yes = prefix + "yes";
        String no = prefix + "no";
        createAcls(
                acl(ResourceType.TOPIC, prefix, PatternType.PREFIXED, BOB, AclOperation.WRITE, AclPermissionType.ALLOW),
                acl(ResourceType.TOPIC, prefix, PatternType.PREFIXED, BOB, AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                acl(ResourceType.TOPIC, yes, PatternType.LITERAL, BOB, AclOperation.CREATE, AclPermissionType.ALLOW));
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(sasl(BOB)))) {
            // CREATE on the topic: Metadata creates it.
            assertEquals(0, p.send(new ProducerRecord<>(yes, "k", "created")).get(15, TimeUnit.SECONDS).offset());
            // DESCRIBE but no CREATE: Kafka answers TOPIC_AUTHORIZATION_FAILED (KafkaApis.getTopicMetadata's
            // unauthorizedForCreateTopics), not UNKNOWN_TOPIC_OR_PARTITION.
            long t0 = System.nanoTime();
            Throwable e = sendFailure(p, no);
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTopicDenied(e, no);
            assertTrue(ms < 5000, "refused after " + ms + " ms");
        }
        Set<String> topics = admin.listTopics().names().get();
        assertTrue(topics.contains(yes), yes + " was not created");
        assertFalse(topics.contains(no), no + " was created");
    }

    // ---------------------------------------------------------------- transactions

    @Test
    void transactionalIdNeedsWrite() throws Exception {
        String orders = Clients.unique("orders");
        Clients.createTopic(admin, orders, 1);
        createAcls(
                acl(ResourceType.TRANSACTIONAL_ID, "tx-alice", PatternType.LITERAL, ALICE, AclOperation.WRITE,
                        AclPermissionType.ALLOW),
                acl(ResourceType.TOPIC, orders, PatternType.LITERAL, ALICE, AclOperation.WRITE, AclPermissionType.ALLOW));

        Map<String, Object> tx = bounded(sasl(ALICE));
        tx.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "tx-alice");
        try (KafkaProducer<String, String> p = Clients.producer(broker, tx)) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 3; i++) {
                p.send(new ProducerRecord<>(orders, "k", "tx-" + i));
            }
            p.commitTransaction();
        }
        List<String> read = new ArrayList<>();
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, null, "committed-reader",
                Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            TopicPartition tp = new TopicPartition(orders, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
            while (read.size() < 3 && System.nanoTime() < deadline) {
                c.poll(Duration.ofMillis(200)).forEach(r -> read.add(r.value()));
            }
        }
        assertEquals(List.of("tx-0", "tx-1", "tx-2"), read, "the committed transaction, read_committed");

        tx.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "tx-other");
        try (KafkaProducer<String, String> p = Clients.producer(broker, tx)) {
            TransactionalIdAuthorizationException e =
                    assertThrows(TransactionalIdAuthorizationException.class, p::initTransactions);
            System.out.println("tx-other: " + e);
        }
    }

    // ---------------------------------------------------------------- helpers

    /** Client settings for the SASL_PLAINTEXT listener as {@code user} (SCRAM-SHA-256). */
    private static Map<String, Object> sasl(String user) {
        Map<String, Object> m = new HashMap<>();
        m.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:" + saslPort);
        m.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
        m.put(SaslConfigs.SASL_MECHANISM, "SCRAM-SHA-256");
        m.put(SaslConfigs.SASL_JAAS_CONFIG, ScramLoginModule.class.getName()
                + " required username=\"" + user + "\" password=\"" + user + PASSWORD + "\";");
        return m;
    }

    /** Producer settings that give up within 10 s. */
    private static Map<String, Object> bounded(Map<String, Object> m) {
        Map<String, Object> out = new HashMap<>(m);
        out.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 10_000);
        out.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 5_000);
        out.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 10_000);
        out.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        return out;
    }

    private static AclBinding acl(ResourceType type, String name, PatternType pattern, String user, AclOperation op,
            AclPermissionType permission) {
        return new AclBinding(new ResourcePattern(type, name, pattern),
                new AccessControlEntry("User:" + user, "*", op, permission));
    }

    private static void createAcls(AclBinding... acls) throws Exception {
        admin.createAcls(List.of(acls)).all().get();
    }

    private static String literal(ResourceType type, String name) {
        return new ResourcePattern(type, name, PatternType.LITERAL).toString();
    }

    /** An ALLOW entry as kafka-acls prints it. */
    private static String allow(String user, String operation) {
        return "(principal=User:" + user + ", host=*, operation=" + operation + ", permissionType=ALLOW)";
    }

    /** The ACL entries kafka-acls printed (one a line, tab-indented). */
    private static Set<String> aclLines(String output) {
        return output.lines().map(String::trim).filter(l -> l.startsWith("(principal="))
                .collect(Collectors.toCollection(TreeSet::new));
    }

    /** Why sending one record to {@code topic} failed (fails the test if it did not). */
    private static Throwable sendFailure(KafkaProducer<String, String> p, String topic) {
        try {
            p.send(new ProducerRecord<>(topic, "k", "refused")).get(15, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (KafkaException e) {
            return e;
        } catch (Exception e) {
            throw new AssertionError("sending to " + topic + ": " + e, e);
        }
        throw new AssertionError("a record was written to " + topic);
    }

    private interface Call {
        void run() throws Exception;
    }

    /** Why a call of the admin API failed (the cause of its future's ExecutionException). */
    private static Throwable failure(Call call) {
        ExecutionException e = assertThrows(ExecutionException.class, call::run);
        return e.getCause();
    }

    /** A producer's refusal: TopicAuthorizationException naming the topic. */
    private static void assertTopicDenied(Throwable e, String topic) {
        assertInstanceOf(TopicAuthorizationException.class, e, topic + ": " + e);
        assertEquals(Set.of(topic), ((TopicAuthorizationException) e).unauthorizedTopics(), e.toString());
    }

    /** An admin call's refusal (the admin client names no topic in it, with Kafka either). */
    private static void assertTopicRefused(Throwable e, String topic) {
        assertInstanceOf(TopicAuthorizationException.class, e, topic + ": " + e);
    }

    private static <T extends Throwable> T find(Throwable e, Class<T> type) {
        Set<Throwable> seen = new HashSet<>();
        for (Throwable t = e; t != null && seen.add(t); t = t.getCause()) {
            if (type.isInstance(t)) {
                return type.cast(t);
            }
        }
        return null;
    }

    /** Polls until the group is refused (GroupAuthorizationException), within 15 s. */
    private static GroupAuthorizationException pollUntilRefused(KafkaConsumer<String, String> c) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (System.nanoTime() < deadline) {
            try {
                int n = c.poll(Duration.ofMillis(200)).count();
                assertEquals(0, n, "records read in a group without ACLs");
            } catch (GroupAuthorizationException e) {
                return e;
            }
        }
        throw new AssertionError("a consumer of a group without ACLs was not refused in 15 s");
    }

    private static int freePort() {
        try {
            return Broker.freePorts(1)[0];
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private record Run(int exit, String output) {}

    /**
     * Runs Kafka's kafka-acls (org.apache.kafka.tools.AclCommand, from the jars tools/kafka/kafka.sh
     * installs) against the PLAINTEXT listener (the super user); its exit code and output.
     */
    private static Run kafkaAcls(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of("bash", Broker.repoRoot().resolve("tools/kafka/kafka.sh").toString(),
                "tool", "acls", "--bootstrap-server", broker.bootstrap()));
        cmd.addAll(List.of(args));
        Path out = Files.createTempFile(work, "kafka-acls-", ".out");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile()).start();
        if (!p.waitFor(45, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("kafka-acls " + String.join(" ", args) + " timed out\n" + Files.readString(out));
        }
        String output = Files.readString(out);
        System.out.println("kafka-acls " + String.join(" ", args) + " -> exit " + p.exitValue() + "\n" + output);
        return new Run(p.exitValue(), output);
    }
}
