#!/usr/bin/env bash
# Compatibility tests with the official Java client (org.apache.kafka:kafka-clients), and with
# Kafka Streams and Kafka Connect (kafka-streams, connect-runtime) on top of it.
#
#   tests/compat/java/run.sh                        # against Weir: needs WEIR_BIN=/path/to/weir
#   WEIR_TEST_BROKER=kafka tests/compat/java/run.sh # against Apache Kafka (tools/kafka/kafka.sh)
#   WEIR_COMPAT_TARGET=cluster tests/compat/java/run.sh
#       each test class gets a three-broker Weir cluster (PostgreSQL + s3s-fs + 3 brokers,
#       Cluster.java) instead of a single broker.
#
# Extra arguments go to Maven, e.g. -Dtest=ConsumerGroupTest.
# Each test class starts its own single-node broker on free loopback ports in a temp dir.
# Client logs: target/surefire-reports/*-output.txt; broker logs: target/broker-logs/.
#
# The test classes (src/test/java/dev/weir/compat; each class's javadoc says what it checks):
#   AdminTopicsTest, DeleteRecordsTest, ListOffsetsTest   topics, configs, log start, offsets by time
#   ConsumerGroupTest       a classic group: split, commit, a member lost and restarted
#   ConsumerProtocolTest    KIP-848 groups (group.protocol=consumer): uniform and range assignors,
#                           a member leaving, regex subscriptions (client- and broker-resolved;
#                           matching nothing yet; a new topic), an empty group converted
#                           classic -> consumer -> classic, ListGroups types, DeleteGroups, a
#                           rolling upgrade of a classic group with members to the consumer
#                           protocol and back (online migration) with a producer writing
#   TransactionsTest        ListTransactions/DescribeTransactions, read_committed, the LSO
#   ExactlyOnceTest         consume-transform-produce in transactions, fenced and restarted
#   StreamsEosTest          Kafka Streams (kafka-streams) exactly_once_v2 word count: a stream
#                           thread dies mid-transaction, a second instance restores from the
#                           changelog; exact counts, read_committed; the changelog compacted
#   ConnectDistributedTest  a Kafka Connect worker (connect-runtime) in distributed mode in this
#                           JVM: FileStreamSource through REST, the worker restarted, the
#                           connector's config and offsets read back from its compacted topics,
#                           each line once; again with exactly.once.source.support=enabled
#   SecurityTest            (Weir, single broker only) listeners, SASL and TLS: SCRAM users made and
#                           deleted with Kafka's kafka-configs (tools/kafka/kafka.sh's jars) and
#                           the admin API, client quotas set, described and deleted with
#                           kafka-configs, SCRAM-SHA-256/512 over SASL_SSL (a producer and a
#                           group), bad credentials refused, mTLS (client auth required), KIP-368
#                           re-authentication; certificates from tests/compat/tls/make-certs.sh
#   AclTest                 (single broker; also against Kafka) ACLs: Kafka's kafka-acls adds,
#                           lists (literal, prefixed, match) and removes them; producers,
#                           classic and KIP-848 group members and the admin API as SCRAM users
#                           over SASL_PLAINTEXT are allowed or refused as Kafka's authorizer
#                           decides (DENY wins, implied operations, User:* and "*", hosts,
#                           auto-creation needs CREATE, idempotence needs WRITE somewhere,
#                           transactional ids, listings filtered, per-principal authorized
#                           operations); a removed ACL refuses the next request
#   ShareGroupTest          share groups (KIP-932) with KafkaShareConsumer 4.4: records split
#                           among consumers and accepted once; RELEASE, REJECT; lock expiry;
#                           RENEW (v2) past the lock; the delivery limit; a consumer's JVM
#                           killed holding records;
#                           read_committed skipping aborted transactions; kafka-share-groups
#                           (list, describe, reset-offsets, delete-offsets, delete)
#   StreamsGroupTest        Kafka Streams 4.4 with group.protocol=streams (KIP-1071), at-least-
#                           once and exactly_once_v2: a word count (a standby per count task)
#                           and a stream-table join scaled 1 -> 3 -> 1 instances, one instance's
#                           JVM killed and replaced; kafka-streams-groups (list, describe,
#                           reset-offsets, delete)
#   ShareGroupClusterTest   (cluster only) a share group across partition moves and a broker
#                           killed: nothing accepted is delivered again
#   ClusterHarnessTest      the cluster harness (WEIR_COMPAT_TARGET=cluster only)
set -euo pipefail

# Resolve a relative WEIR_BIN against the caller's directory before moving.
if [[ -n ${WEIR_BIN:-} && ${WEIR_BIN} != /* ]]; then
  WEIR_BIN="$(pwd)/${WEIR_BIN}"
  export WEIR_BIN
fi
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT=$(cd ../../.. && pwd)

case "${WEIR_TEST_BROKER:-weir}" in
  kafka) bash "$ROOT/tools/kafka/kafka.sh" install ;;
  weir)
    [[ -n ${WEIR_BIN:-} ]] || { echo "run.sh: set WEIR_BIN to the weir binary (or WEIR_TEST_BROKER=kafka)" >&2; exit 2; }
    [[ -x $WEIR_BIN ]] || { echo "run.sh: WEIR_BIN=$WEIR_BIN is not an executable" >&2; exit 2; }
    # SecurityTest and AclTest run Kafka's kafka-configs and kafka-acls from these jars
    # (fetched once, then cached).
    bash "$ROOT/tools/kafka/kafka.sh" install
    ;;
  *) echo "run.sh: WEIR_TEST_BROKER must be weir or kafka" >&2; exit 2 ;;
esac

MVN=(mvn -B -ntp -T1 -Dstyle.color=never)
# Prefetch every plugin and dependency first, so a registry hiccup fails here, not mid-test.
"${MVN[@]}" -q dependency:go-offline
"${MVN[@]}" -q test-compile
start=$SECONDS
if "${MVN[@]}" test "$@"; then
  echo "java compat: passed against ${WEIR_TEST_BROKER:-weir} in $((SECONDS - start))s"
else
  rc=$?
  echo "java compat: FAILED against ${WEIR_TEST_BROKER:-weir} (client logs: $(pwd)/target/surefire-reports," \
       "broker logs: $(pwd)/target/broker-logs)" >&2
  exit "$rc"
fi
