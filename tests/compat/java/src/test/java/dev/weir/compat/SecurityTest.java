package dev.weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.errors.ResourceNotFoundException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.security.scram.ScramLoginModule;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Weir's listeners, SASL and TLS (Weir only: skipped with {@code WEIR_TEST_BROKER=kafka} and with
 * {@code WEIR_COMPAT_TARGET=cluster}). The class's broker has a PLAINTEXT listener (the
 * harness's address, where the admin client creates users and topics) and a SASL_SSL one
 * (SCRAM-SHA-256 and SCRAM-SHA-512; certificates from tests/compat/tls/make-certs.sh, the CA
 * trusted through a PKCS#12 trust store).
 * <ul>
 *   <li>Kafka's own kafka-configs (org.apache.kafka.tools.ConfigCommand, run from tools/kafka/kafka.sh's
 *       jars) adds a SCRAM-SHA-256 credential (iterations 8192): DescribeUserScramCredentials
 *       shows it, the user logs in with it over SASL_SSL; kafka-configs deletes it: the user is
 *       gone, can no longer log in, and deleting again fails (ResourceNotFoundException).
 *       kafka-configs --describe prints the credentials.
 *   <li>kafka-configs sets client quotas (a user, the default user, a client id): --describe
 *       prints them, DescribeClientQuotas returns exactly those entities and values; a deleted
 *       key is gone; an unknown key is refused by the tool and, through the admin API, by the
 *       broker (InvalidRequestException).
 *   <li>Over SASL_SSL with SCRAM-SHA-256 and with SCRAM-SHA-512 (a user with only that
 *       mechanism's credential): an idempotent producer (acks=all) writes 300 keyed records to
 *       three partitions, a classic group member reads each back once, in order, and commits;
 *       the committed offsets are read back over SASL_SSL.
 *   <li>A wrong password, and a mechanism the user has no credential for, fail with
 *       SaslAuthenticationException within max.block.ms; a correct client works right after.
 *   <li>mTLS (a broker of its own, ssl.client.auth=required on an SSL listener): a client with
 *       the CA-signed client.p12 produces and consumes; clients without a certificate, or with
 *       only one signed by another CA, get nothing through (SslAuthenticationException, or a
 *       timeout). Java does not offer the other CA's certificate at all (the broker's
 *       CertificateRequest names the CAs it accepts), so the broker sees no certificate either way.
 *   <li>KIP-368 (a broker of its own, connections.max.reauth.ms=2000): a SASL_SSL producer
 *       writes for 7 s; every record is acknowledged, in order, none twice; the client
 *       re-authenticated on its connections (its successful-reauthentication-total) and the
 *       broker counted more successful authentications than the client opened connections.
 * </ul>
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class SecurityTest {
    private static final String STORE_PASSWORD = "changeit";
    private static final String SUCCEEDED = "weir_sasl_authentications_succeeded_total";
    private static final String FAILED = "weir_sasl_authentications_failed_total";
    /** Users of the class's broker: each has one mechanism's credential. */
    private static final String USER_256 = "user-256";
    private static final String USER_512 = "user-512";
    private static final String PASSWORD_256 = "secret-256";
    private static final String PASSWORD_512 = "secret-512";

    private static Path certs;
    private static Broker broker;
    private static int saslSslPort;
    private static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        Assumptions.assumeTrue(Broker.kind() == Broker.Kind.WEIR && !Target.clusterMode(),
                "SecurityTest configures a single Weir broker's listeners (not with WEIR_TEST_BROKER=kafka "
                        + "or WEIR_COMPAT_TARGET=cluster)");
        certs = Files.createTempDirectory("weir-compat-java-certs-");
        makeCerts(certs);
        broker = Broker.start("SecurityTest", b -> {
            saslSslPort = freePort();
            return securityEnv(b, Map.of("SASL_SSL", saslSslPort), "none", 0);
        });
        admin = Clients.admin(broker);
        admin.alterUserScramCredentials(List.of(
                new UserScramCredentialUpsertion(USER_256,
                        new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), PASSWORD_256),
                new UserScramCredentialUpsertion(USER_512,
                        new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD_512)))
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
                if (certs != null) {
                    Broker.deleteTree(certs);
                }
            }
        }
    }

    // ---------------------------------------------------------------- kafka-configs

    @Test
    void kafkaConfigsAddsAndDeletesScramCredentials() throws Exception {
        String topic = Clients.unique("configs-topic");
        Clients.createTopic(admin, topic, 1);

        Run add = kafkaConfigs("--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]",
                "--entity-type", "users", "--entity-name", "alice");
        assertEquals(0, add.exit, "kafka-configs --alter --add-config:\n" + add.output);
        assertTrue(add.output.contains("Completed updating config for user alice."), add.output);

        UserScramCredentialsDescription d =
                admin.describeUserScramCredentials(List.of("alice")).description("alice").get();
        assertEquals("alice", d.name());
        assertEquals(1, d.credentialInfos().size(), "alice's credentials: " + d.credentialInfos());
        assertEquals(ScramMechanism.SCRAM_SHA_256, d.credentialInfos().get(0).mechanism());
        assertEquals(8192, d.credentialInfos().get(0).iterations());
        assertTrue(admin.describeUserScramCredentials().users().get().containsAll(List.of("alice", USER_256, USER_512)),
                "every user described");

        // The credential kafka-configs salted and hashed logs alice in.
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(saslSsl("SCRAM-SHA-256", "alice", "alice-secret")))) {
            assertEquals(1, p.partitionsFor(topic).size());
            assertEquals(0, p.send(new ProducerRecord<>(topic, "k", "from alice")).get(15, TimeUnit.SECONDS).offset());
        }

        Run delete = kafkaConfigs("--alter", "--delete-config", "SCRAM-SHA-256",
                "--entity-type", "users", "--entity-name", "alice");
        assertEquals(0, delete.exit, "kafka-configs --alter --delete-config:\n" + delete.output);
        assertTrue(delete.output.contains("Completed updating config for user alice."), delete.output);
        ExecutionException gone = assertThrows(ExecutionException.class,
                () -> admin.describeUserScramCredentials(List.of("alice")).description("alice").get());
        assertInstanceOf(ResourceNotFoundException.class, gone.getCause(), "alice after the delete: " + gone.getCause());
        assertFalse(admin.describeUserScramCredentials().users().get().contains("alice"), "alice is listed after the delete");

        // Deleted: alice cannot log in any more.
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(saslSsl("SCRAM-SHA-256", "alice", "alice-secret")))) {
            assertThrows(SaslAuthenticationException.class, () -> p.partitionsFor(topic), "alice logs in after the delete");
        }

        Run again = kafkaConfigs("--alter", "--delete-config", "SCRAM-SHA-256",
                "--entity-type", "users", "--entity-name", "alice");
        assertNotEquals(0, again.exit, "deleting a credential that does not exist:\n" + again.output);
        assertTrue(again.output.contains("ResourceNotFoundException"), again.output);
    }

    @Test
    void kafkaConfigsDescribesScramCredentials() throws Exception {
        Run add = kafkaConfigs("--alter", "--add-config",
                "SCRAM-SHA-256=[iterations=8192,password=bob-secret],SCRAM-SHA-512=[password=bob-secret-2]",
                "--entity-type", "users", "--entity-name", "bob");
        assertEquals(0, add.exit, "kafka-configs --alter --add-config:\n" + add.output);

        Run describe = kafkaConfigs("--describe", "--entity-type", "users", "--entity-name", "bob");
        assertEquals(0, describe.exit, "kafka-configs --describe:\n" + describe.output);
        String line = scramLine(describe.output, "bob");
        assertTrue(line.contains("SCRAM-SHA-256=iterations=8192"), describe.output);
        assertTrue(line.contains("SCRAM-SHA-512=iterations=4096"), describe.output); // kafka-configs' default

        Run delete = kafkaConfigs("--alter", "--delete-config", "SCRAM-SHA-256",
                "--entity-type", "users", "--entity-name", "bob");
        assertEquals(0, delete.exit, "kafka-configs --alter --delete-config:\n" + delete.output);
        describe = kafkaConfigs("--describe", "--entity-type", "users", "--entity-name", "bob");
        assertEquals(0, describe.exit, "kafka-configs --describe:\n" + describe.output);
        assertEquals("SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=4096",
                scramLine(describe.output, "bob"));
    }

    @Test
    void kafkaConfigsManagesClientQuotas() throws Exception {
        Run user = kafkaConfigs("--alter", "--entity-type", "users", "--entity-name", "quota-user",
                "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152");
        assertEquals(0, user.exit, "kafka-configs --alter --add-config (user):\n" + user.output);
        assertTrue(user.output.contains("Completed updating config for user quota-user."), user.output);
        Run userDefault = kafkaConfigs("--alter", "--entity-type", "users", "--entity-default",
                "--add-config", "producer_byte_rate=524288");
        assertEquals(0, userDefault.exit, "kafka-configs --alter --add-config (default user):\n" + userDefault.output);
        assertTrue(userDefault.output.contains("Completed updating default config for users in the cluster."),
                userDefault.output);
        Run client = kafkaConfigs("--alter", "--entity-type", "clients", "--entity-name", "app-1",
                "--add-config", "request_percentage=50");
        assertEquals(0, client.exit, "kafka-configs --alter --add-config (client):\n" + client.output);
        assertTrue(client.output.contains("Completed updating config for client app-1."), client.output);

        // kafka-configs --describe prints the quotas, sorted by key, as doubles.
        Run describe = kafkaConfigs("--describe", "--entity-type", "users", "--entity-name", "quota-user");
        assertEquals(0, describe.exit, "kafka-configs --describe (user):\n" + describe.output);
        assertEquals("Quota configs for user-principal 'quota-user' are consumer_byte_rate=2097152.0, "
                + "producer_byte_rate=1048576.0", quotaLine(describe.output, "user-principal 'quota-user'"));
        describe = kafkaConfigs("--describe", "--entity-type", "users", "--entity-default");
        assertEquals(0, describe.exit, "kafka-configs --describe (default user):\n" + describe.output);
        assertEquals("Quota configs for the default user-principal are producer_byte_rate=524288.0",
                quotaLine(describe.output, "the default user-principal"));

        // The admin API sees exactly the three entities (the SCRAM users have no quotas).
        ClientQuotaEntity quotaUser = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "quota-user"));
        ClientQuotaEntity defaultUser = new ClientQuotaEntity(Collections.singletonMap(ClientQuotaEntity.USER, null));
        ClientQuotaEntity app1 = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, "app-1"));
        assertEquals(Map.of(
                        quotaUser, Map.of("producer_byte_rate", 1048576.0, "consumer_byte_rate", 2097152.0),
                        defaultUser, Map.of("producer_byte_rate", 524288.0),
                        app1, Map.of("request_percentage", 50.0)),
                admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get(), "DescribeClientQuotas");

        Run delete = kafkaConfigs("--alter", "--entity-type", "users", "--entity-name", "quota-user",
                "--delete-config", "consumer_byte_rate");
        assertEquals(0, delete.exit, "kafka-configs --alter --delete-config:\n" + delete.output);
        assertTrue(delete.output.contains("Completed updating config for user quota-user."), delete.output);
        Map<ClientQuotaEntity, Map<String, Double>> after =
                admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
        assertEquals(Map.of("producer_byte_rate", 1048576.0), after.get(quotaUser), "quota-user after the delete: " + after);
        assertEquals(Map.of("producer_byte_rate", 524288.0), after.get(defaultUser), "the default user after the delete");
        assertEquals(Map.of("request_percentage", 50.0), after.get(app1), "app-1 after the delete");
        assertEquals(3, after.size(), "entities after the delete: " + after);

        // An unknown key: kafka-configs refuses it itself (exit 1, nothing sent), as it does against
        // Kafka; sent through the admin API, the broker refuses it as Kafka does (INVALID_REQUEST).
        Run unknown = kafkaConfigs("--alter", "--entity-type", "users", "--entity-name", "quota-user",
                "--add-config", "no_such_quota=1");
        assertEquals(1, unknown.exit, "kafka-configs --add-config no_such_quota=1:\n" + unknown.output);
        // (4.1's tool printed "Set(no_such_quota)", 4.4's the bare name.)
        assertTrue(unknown.output.contains("Unexpected config names:") && unknown.output.contains("no_such_quota"),
                unknown.output);
        ExecutionException refused = assertThrows(ExecutionException.class, () -> admin.alterClientQuotas(List.of(
                new ClientQuotaAlteration(quotaUser, List.of(new ClientQuotaAlteration.Op("no_such_quota", 1.0)))))
                .all().get());
        assertInstanceOf(InvalidRequestException.class, refused.getCause(), "no_such_quota: " + refused.getCause());
        assertEquals(after, admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get(),
                "quotas after the refused keys");
    }

    // ---------------------------------------------------------------- SASL_SSL

    @ParameterizedTest
    @ValueSource(strings = {"SCRAM-SHA-256", "SCRAM-SHA-512"})
    void saslSslProduceAndConsumeInAGroup(String mechanism) throws Exception {
        final int records = 300;
        String user = mechanism.equals("SCRAM-SHA-256") ? USER_256 : USER_512;
        String password = mechanism.equals("SCRAM-SHA-256") ? PASSWORD_256 : PASSWORD_512;
        Map<String, Object> sasl = saslSsl(mechanism, user, password);
        String topic = Clients.unique("sasl-topic");
        Clients.createTopic(admin, topic, 3);
        double succeeded = broker.metric(SUCCEEDED);

        Map<TopicPartition, List<String>> sent = new HashMap<>();
        try (KafkaProducer<String, String> p = Clients.producer(broker, sasl)) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < records; i++) {
                fs.add(p.send(new ProducerRecord<>(topic, "k" + (i % 17), "v" + i)));
            }
            p.flush();
            for (int i = 0; i < records; i++) {
                RecordMetadata md = fs.get(i).get();
                sent.computeIfAbsent(new TopicPartition(topic, md.partition()), k -> new ArrayList<>()).add("v" + i);
            }
        }
        assertEquals(3, sent.size(), "records went to every partition");

        String group = Clients.unique("sasl-group");
        Map<TopicPartition, List<String>> got = new HashMap<>();
        try (KafkaConsumer<String, String> c = Clients.consumer(broker, group, "sasl-reader", sasl)) {
            c.subscribe(List.of(topic));
            int n = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (n < records) {
                if (System.nanoTime() > deadline) {
                    fail("read " + n + " of " + records + " records over SASL_SSL in 30 s");
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    got.computeIfAbsent(new TopicPartition(r.topic(), r.partition()), k -> new ArrayList<>()).add(r.value());
                    n++;
                }
            }
            c.commitSync();
        }
        assertEquals(sent, got, "each partition's records, once each and in order");

        // The group's offsets, read back over SASL_SSL.
        try (Admin a = Clients.admin(broker, sasl)) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                    a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Map<TopicPartition, Long> offsets = new HashMap<>();
            committed.forEach((tp, om) -> offsets.put(tp, om.offset()));
            Map<TopicPartition, Long> expected = new HashMap<>();
            sent.forEach((tp, vs) -> expected.put(tp, (long) vs.size()));
            assertEquals(expected, offsets, "committed offsets");
        }
        // Producer, consumer and admin client each authenticated at least once.
        assertTrue(broker.metric(SUCCEEDED) - succeeded >= 3,
                "SASL authentications counted: " + (broker.metric(SUCCEEDED) - succeeded));
    }

    @Test
    void badCredentialsFailAndGoodOnesStillWork() throws Exception {
        String topic = Clients.unique("auth-topic");
        Clients.createTopic(admin, topic, 1);
        double failed = broker.metric(FAILED);

        // A wrong password.
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(saslSsl("SCRAM-SHA-256", USER_256, "wrong")))) {
            long t0 = System.nanoTime();
            SaslAuthenticationException e = assertThrows(SaslAuthenticationException.class, () -> p.partitionsFor(topic));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue(ms < 10_000, "the failure took " + ms + " ms: " + e);
        }
        // A mechanism the user has no credential for (user-256 has SCRAM-SHA-256 only); send fails.
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(saslSsl("SCRAM-SHA-512", USER_256, PASSWORD_256)))) {
            Future<RecordMetadata> f = p.send(new ProducerRecord<>(topic, "k", "never"));
            ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(15, TimeUnit.SECONDS));
            assertInstanceOf(SaslAuthenticationException.class, e.getCause(), "send: " + e.getCause());
        }
        assertTrue(broker.metric(FAILED) - failed >= 2, "failed authentications counted: " + (broker.metric(FAILED) - failed));

        // The right password, right after, from the same address.
        try (KafkaProducer<String, String> p = Clients.producer(broker, bounded(saslSsl("SCRAM-SHA-256", USER_256, PASSWORD_256)))) {
            for (int i = 0; i < 10; i++) {
                assertEquals(i, p.send(new ProducerRecord<>(topic, "k", "v" + i)).get(15, TimeUnit.SECONDS).offset());
            }
        }
        assertEquals(10, admin.listOffsets(Map.of(new TopicPartition(topic, 0), OffsetSpec.latest()))
                .all().get().get(new TopicPartition(topic, 0)).offset(), "only the good client's records");
    }

    // ---------------------------------------------------------------- mTLS

    @Test
    void mutualTlsAdmitsOnlyClientsWithTheCasCertificates() throws Exception {
        int[] sslPort = new int[1];
        try (Broker b = Broker.start("SecurityTest-mtls", x -> {
            sslPort[0] = freePort();
            return securityEnv(x, Map.of("SSL", sslPort[0]), "required", 0);
        }); Admin plain = Clients.admin(b)) {
            String topic = Clients.unique("mtls-topic");
            Clients.createTopic(plain, topic, 1);
            TopicPartition tp = new TopicPartition(topic, 0);

            Map<String, Object> good = new HashMap<>(ssl(sslPort[0]));
            good.put(SslConfigs.SSL_KEYSTORE_LOCATION_CONFIG, certs.resolve("client.p12").toString());
            good.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PKCS12");
            good.put(SslConfigs.SSL_KEYSTORE_PASSWORD_CONFIG, STORE_PASSWORD);
            good.put(SslConfigs.SSL_KEY_PASSWORD_CONFIG, STORE_PASSWORD);
            try (KafkaProducer<String, String> p = Clients.producer(b, good)) {
                for (int i = 0; i < 50; i++) {
                    p.send(new ProducerRecord<>(topic, 0, "k", "v" + i));
                }
                p.flush();
                assertEquals(50, p.send(new ProducerRecord<>(topic, 0, "k", "last")).get().offset());
            }
            List<String> read = new ArrayList<>();
            try (KafkaConsumer<String, String> c = Clients.consumer(b, null, "mtls-reader", good)) {
                c.assign(List.of(tp));
                c.seekToBeginning(List.of(tp));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (read.size() < 51 && System.nanoTime() < deadline) {
                    c.poll(Duration.ofMillis(200)).forEach(r -> read.add(r.value()));
                }
            }
            assertEquals(51, read.size(), "records read over mTLS: " + read.size());
            assertEquals("v0", read.get(0));
            assertEquals("last", read.get(50));

            // No certificate, and only a certificate of another CA (which Java's key manager does not
            // offer, the broker naming its CA): nothing gets through.
            Map<String, Object> none = bounded(ssl(sslPort[0]));
            Map<String, Object> other = bounded(ssl(sslPort[0]));
            other.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PEM");
            other.put(SslConfigs.SSL_KEYSTORE_CERTIFICATE_CHAIN_CONFIG,
                    Files.readString(certs.resolve("other-client.pem"), StandardCharsets.US_ASCII));
            other.put(SslConfigs.SSL_KEYSTORE_KEY_CONFIG,
                    Files.readString(certs.resolve("other-client.key"), StandardCharsets.US_ASCII));
            for (Map.Entry<String, Map<String, Object>> client : Map.of("no certificate", none,
                    "another CA's certificate", other).entrySet()) {
                try (KafkaProducer<String, String> p = Clients.producer(b, client.getValue())) {
                    long t0 = System.nanoTime();
                    Exception e = assertThrows(Exception.class,
                            () -> p.send(new ProducerRecord<>(topic, 0, "k", "intruder")).get(15, TimeUnit.SECONDS),
                            "a client with " + client.getKey() + " produced");
                    Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
                    assertTrue(cause instanceof SslAuthenticationException || cause instanceof TimeoutException,
                            "a client with " + client.getKey() + ": " + cause);
                    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                    System.out.println("mTLS, " + client.getKey() + ": refused in " + ms + " ms: " + cause);
                }
            }
            assertEquals(51, plain.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset(),
                    "records of refused clients were written");
        }
    }

    // ---------------------------------------------------------------- KIP-368

    @Test
    void clientsReauthenticateBeforeTheirSessionsEnd() throws Exception {
        int[] port = new int[1];
        try (Broker b = Broker.start("SecurityTest-reauth", x -> {
            port[0] = freePort();
            return securityEnv(x, Map.of("SASL_SSL", port[0]), "none", 2000);
        }); Admin plain = Clients.admin(b)) {
            plain.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion("carol",
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), "carol-secret"))).all().get();
            String topic = Clients.unique("reauth-topic");
            Clients.createTopic(plain, topic, 1);
            Map<String, Object> sasl = saslSsl("SCRAM-SHA-512", "carol", "carol-secret");
            sasl.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:" + port[0]);

            List<Exception> failures = Collections.synchronizedList(new ArrayList<>());
            List<Long> offsets = Collections.synchronizedList(new ArrayList<>());
            AtomicInteger sent = new AtomicInteger();
            double connections;
            double reauths;
            double reauthFailures;
            try (KafkaProducer<String, String> p = Clients.producer(b, sasl)) {
                long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(7);
                while (System.nanoTime() < end) {
                    int i = sent.getAndIncrement();
                    p.send(new ProducerRecord<>(topic, 0, "k", "v" + i), (md, e) -> {
                        if (e != null) {
                            failures.add(e);
                        } else {
                            offsets.add(md.offset());
                        }
                    });
                    Thread.sleep(10);
                }
                p.flush();
                connections = clientMetric(p.metrics(), "producer-metrics", "connection-creation-total");
                reauths = clientMetric(p.metrics(), "producer-metrics", "successful-reauthentication-total");
                reauthFailures = clientMetric(p.metrics(), "producer-metrics", "failed-reauthentication-total");
            }
            assertEquals(List.of(), failures, "failed sends");
            assertEquals(sent.get(), offsets.size(), "acknowledged records");
            for (int i = 0; i < offsets.size(); i++) {
                assertEquals(i, offsets.get(i), "offsets in order, none twice");
            }
            assertEquals(sent.get(), plain.listOffsets(Map.of(new TopicPartition(topic, 0), OffsetSpec.latest()))
                    .all().get().get(new TopicPartition(topic, 0)).offset(), "records in the partition");

            double succeeded = b.metric(SUCCEEDED);
            String summary = "client: " + connections + " connections, " + reauths + " re-authentications ("
                    + reauthFailures + " failed); broker: " + succeeded + " authentications, "
                    + b.metric(FAILED) + " failed";
            System.out.println("KIP-368, " + sent.get() + " records: " + summary);
            assertEquals(0, reauthFailures, summary);
            assertEquals(0, b.metric(FAILED), summary);
            assertTrue(reauths >= 2, "the client re-authenticated: " + summary);
            assertTrue(succeeded >= 3 && succeeded >= connections + 2,
                    "more authentications than connections: " + summary);
        }
    }

    // ---------------------------------------------------------------- helpers

    /**
     * The environment of a broker with its PLAINTEXT listener on {@link Broker#port} and the
     * {@code extra} ones (name, which is also the protocol, to port), the test certificates,
     * SCRAM mechanisms, and client auth and re-authentication as given.
     */
    private static Map<String, String> securityEnv(Broker b, Map<String, Integer> extra, String clientAuth,
            long reauthMs) {
        StringBuilder listeners = new StringBuilder("PLAINTEXT://127.0.0.1:" + b.port);
        extra.forEach((name, port) -> listeners.append(',').append(name).append("://127.0.0.1:").append(port));
        return Map.of(
                "WEIR_SECURITY_LISTENERS", listeners.toString(),
                "WEIR_SECURITY_SASL_ENABLED_MECHANISMS", "SCRAM-SHA-256,SCRAM-SHA-512",
                "WEIR_SECURITY_SSL_KEYSTORE_LOCATION", certs.resolve("server.pem").toString(),
                "WEIR_SECURITY_SSL_TRUSTSTORE_LOCATION", certs.resolve("ca.pem").toString(),
                "WEIR_SECURITY_SSL_CLIENT_AUTH", clientAuth,
                "WEIR_SECURITY_CONNECTIONS_MAX_REAUTH_MS", Long.toString(reauthMs));
    }

    /** Client settings for the SSL listener on {@code port}: the CA from truststore.p12. */
    private static Map<String, Object> ssl(int port) {
        Map<String, Object> m = new HashMap<>();
        m.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:" + port);
        m.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SSL");
        m.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, certs.resolve("truststore.p12").toString());
        m.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PKCS12");
        m.put(SslConfigs.SSL_TRUSTSTORE_PASSWORD_CONFIG, STORE_PASSWORD);
        return m;
    }

    /** Client settings for the class broker's SASL_SSL listener. */
    private static Map<String, Object> saslSsl(String mechanism, String user, String password) {
        Map<String, Object> m = ssl(saslSslPort);
        m.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_SSL");
        m.put(SaslConfigs.SASL_MECHANISM, mechanism);
        m.put(SaslConfigs.SASL_JAAS_CONFIG, ScramLoginModule.class.getName()
                + " required username=\"" + user + "\" password=\"" + password + "\";");
        return m;
    }

    /** Producer settings that give up within 10 s (a client that cannot connect). */
    private static Map<String, Object> bounded(Map<String, Object> m) {
        Map<String, Object> out = new HashMap<>(m);
        out.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 10_000);
        out.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 5_000);
        out.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 10_000);
        out.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        return out;
    }

    private static double clientMetric(Map<MetricName, ? extends Metric> metrics, String group, String name) {
        for (Map.Entry<MetricName, ? extends Metric> e : metrics.entrySet()) {
            if (e.getKey().group().equals(group) && e.getKey().name().equals(name)) {
                return ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        throw new AssertionError("no client metric " + group + "/" + name);
    }

    private static int freePort() {
        try {
            return Broker.freePorts(1)[0];
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static void makeCerts(Path dir) throws Exception {
        Path script = Broker.repoRoot().resolve("tests/compat/tls/make-certs.sh");
        Path log = dir.resolve("make-certs.out");
        Process p = new ProcessBuilder("bash", script.toString(), dir.toString()).redirectErrorStream(true)
                .redirectOutput(log.toFile()).start();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new IllegalStateException("make-certs.sh timed out\n" + Files.readString(log));
        }
        if (p.exitValue() != 0) {
            throw new IllegalStateException("make-certs.sh exited " + p.exitValue() + "\n" + Files.readString(log));
        }
        for (String f : List.of("ca.pem", "server.pem", "client.p12", "truststore.p12", "other-client.pem",
                "other-client.key")) {
            if (!Files.isRegularFile(dir.resolve(f))) {
                throw new IllegalStateException("make-certs.sh made no " + f + " (truststore.p12 needs keytool)");
            }
        }
    }

    private record Run(int exit, String output) {}

    /**
     * Runs Kafka's kafka-configs (org.apache.kafka.tools.ConfigCommand, from the jars tools/kafka/kafka.sh
     * installs) against the class broker's PLAINTEXT listener; its exit code and output (stdout
     * and stderr), which also go to this class's output.
     */
    private static Run kafkaConfigs(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of("bash", Broker.repoRoot().resolve("tools/kafka/kafka.sh").toString(),
                "tool", "configs", "--bootstrap-server", broker.bootstrap()));
        cmd.addAll(List.of(args));
        Path out = Files.createTempFile(certs, "kafka-configs-", ".out");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile()).start();
        if (!p.waitFor(45, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("kafka-configs " + String.join(" ", args) + " timed out\n" + Files.readString(out));
        }
        String output = Files.readString(out);
        System.out.println("kafka-configs " + String.join(" ", args) + " -> exit " + p.exitValue() + "\n" + output);
        return new Run(p.exitValue(), output);
    }

    /** kafka-configs --describe's line of an entity's quotas ({@code what}: "user-principal 'x'", ...). */
    private static String quotaLine(String output, String what) {
        String prefix = "Quota configs for " + what + " are ";
        return output.lines().filter(l -> l.startsWith(prefix)).findFirst()
                .orElseThrow(() -> new AssertionError("no quota line for " + what + " in:\n" + output));
    }

    /** kafka-configs --describe's line of a user's SCRAM credentials. */
    private static String scramLine(String output, String user) {
        String prefix = "SCRAM credential configs for user-principal '" + user + "' are ";
        return output.lines().filter(l -> l.startsWith(prefix)).findFirst()
                .orElseThrow(() -> new AssertionError("no SCRAM credentials line for " + user + " in:\n" + output));
    }
}
