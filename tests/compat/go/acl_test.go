package compat

// ACLs (Weir only): CreateAcls, DescribeAcls and DeleteAcls through kadm, and their enforcement
// on a SASL_PLAINTEXT listener as Kafka's StandardAuthorizer and KafkaApis enforce them. Each
// test starts a broker of its own with WEIR_SECURITY_AUTHORIZER=acl, PLAINTEXT first on the
// port the harness waits on and SASL_PLAINTEXT on another; User:ANONYMOUS is a super user, so
// the PLAINTEXT listener is the tests' admin door (SCRAM users, topics, ACLs), while the users
// (alice, bob, carol: SCRAM-SHA-256) connect over SASL_PLAINTEXT.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const weirOnlyACL = "the ACL tests configure a Weir broker of their own (WEIR_SECURITY_AUTHORIZER=acl)"

// aclBroker is a Weir broker enforcing ACLs, with its admin (a super user over PLAINTEXT) and
// its SASL_PLAINTEXT listener.
type aclBroker struct {
	*Broker
	sasl  listener
	admCl *kgo.Client // the super user's client, over PLAINTEXT
	adm   *kadm.Client
}

// startACLBroker starts an ACL-enforcing broker (env added) and creates the SCRAM-SHA-256
// users, each with the password "<user>-secret".
func startACLBroker(t *testing.T, name string, users []string, env ...string) *aclBroker {
	t.Helper()
	a := &aclBroker{}
	a.Broker = startBroker(t, name, func(b *Broker) error {
		ports, err := b.MorePorts(1)
		if err != nil {
			return err
		}
		saslAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
		a.sasl = listener{b, saslAddr}
		b.env = append(b.env,
			"WEIR_SECURITY_LISTENERS=PLAINTEXT://"+b.Addr()+",SASL_PLAINTEXT://"+saslAddr,
			"WEIR_SECURITY_AUTHORIZER=acl",
			"WEIR_SECURITY_SUPER_USERS=User:ANONYMOUS")
		b.env = append(b.env, env...)
		return nil
	})
	a.admCl = newClient(t, a.Broker, kgo.ClientID("compat-admin"))
	a.adm = kadm.NewClient(a.admCl)
	var us []kadm.UpsertSCRAM
	for _, u := range users {
		us = append(us, kadm.UpsertSCRAM{User: u, Mechanism: kadm.ScramSha256, Iterations: 4096, Password: u + "-secret"})
	}
	if len(us) > 0 {
		upsertUsers(t, a.adm, us...)
	}
	return a
}

// as is a client of user over SASL_PLAINTEXT (SCRAM-SHA-256).
func (a *aclBroker) as(t *testing.T, user string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	mech := scram.Auth{User: user, Pass: user + "-secret"}.AsSha256Mechanism()
	return newClient(t, a.sasl, append([]kgo.Opt{kgo.ClientID("compat-" + user), kgo.SASL(mech)}, opts...)...)
}

// producerAs is an idempotent producer (franz-go's default) of user, acks=all.
func (a *aclBroker) producerAs(t *testing.T, user string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	mech := scram.Auth{User: user, Pass: user + "-secret"}.AsSha256Mechanism()
	return newProducer(t, a.sasl, append([]kgo.Opt{kgo.SASL(mech)}, opts...)...)
}

// grant creates the builder's ACLs (as the super user) and fails the test unless every one of
// them was created.
func grant(t *testing.T, adm *kadm.Client, b *kadm.ACLBuilder) {
	t.Helper()
	res, err := adm.CreateACLs(ctxFor(t, 30*time.Second), b)
	if err != nil {
		t.Fatalf("create ACLs: %v", err)
	}
	if len(res) == 0 {
		t.Fatalf("create ACLs: the builder made no binding")
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create ACL %s: %v (%s)", created(r), r.Err, r.ErrMessage)
		}
	}
}

func binding(kind kmsg.ACLResourceType, name string, pattern kadm.ACLPattern, principal, host string,
	op kadm.ACLOperation, perm kmsg.ACLPermissionType) string {
	return fmt.Sprintf("%v:%s:%v %s@%s %v %v", kind, name, pattern, principal, host, op, perm)
}

func created(r kadm.CreateACLsResult) string {
	return binding(r.Type, r.Name, r.Pattern, r.Principal, r.Host, r.Operation, r.Permission)
}

// describeACLs returns the bindings matching the builder's filters, sorted, as binding strings.
func describeACLs(t *testing.T, adm *kadm.Client, b *kadm.ACLBuilder) []string {
	t.Helper()
	res, err := adm.DescribeACLs(ctxFor(t, 30*time.Second), b)
	if err != nil {
		t.Fatalf("describe ACLs: %v", err)
	}
	var out []string
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("describe ACLs: %v (%s)", r.Err, r.ErrMessage)
		}
		for _, d := range r.Described {
			out = append(out, binding(d.Type, d.Name, d.Pattern, d.Principal, d.Host, d.Operation, d.Permission))
		}
	}
	slices.Sort(out)
	return out
}

// allACLs is a filter matching every binding.
func allACLs() *kadm.ACLBuilder {
	return kadm.NewACLs().AnyResource().Allow().AllowHosts().Deny().DenyHosts().Operations().
		ResourcePatternType(kadm.ACLPatternAny)
}

func sameBindings(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
	}
}

// produceOne produces one record and returns its error; the produce must end by itself within
// 20 s (an authorization failure is not retried).
func produceOne(t *testing.T, cl *kgo.Client, topic, value string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("produce to %s did not end within 20 s: %v", topic, err)
	}
	return err
}

// endOffsets lists the topic's end offsets (as the super user).
func endOffsets(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	l, err := adm.ListEndOffsets(ctxFor(t, 30*time.Second), topic)
	return listOffsets(t, l, err, topic)
}

// codeName is an error code's Kafka name ("NONE" for 0).
func codeName(code int16) string {
	var ke *kerr.Error
	if errors.As(kerr.ErrorForCode(code), &ke) {
		return ke.Message
	}
	if code == 0 {
		return "NONE"
	}
	return fmt.Sprintf("error code %d", code)
}

// initProducerID sends InitProducerId straight to the broker (no coordinator lookup) and
// returns the response's error.
func initProducerID(t *testing.T, cl *kgo.Client, node int32, txnID *string) (*kmsg.InitProducerIDResponse, error) {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = txnID
	req.TransactionTimeoutMillis = 30000
	req.ProducerID = -1
	req.ProducerEpoch = -1
	resp, err := req.RequestWith(ctxFor(t, 20*time.Second), cl.Broker(int(node)))
	if err != nil {
		t.Fatalf("InitProducerId: %v", err)
	}
	return resp, kerr.ErrorForCode(resp.ErrorCode)
}

// TestAclCreateDescribeDelete: CreateAcls stores alice's WRITE and READ on topic "orders"
// (literal), bob's READ on topics prefixed "logs-" and alice's READ on group "g1";
// DescribeAcls returns exactly those for a match-all filter, alice's three for a filter on her
// principal, bob's prefixed one (and nothing else) for a MATCH filter on topic "logs-x",
// alice's two for MATCH on "orders", none for LITERAL "logs-"; DeleteAcls with a filter on
// alice's WRITE on "orders" deletes and reports that binding only, and a filter matching
// nothing reports nothing; a CreateAcls with an empty topic name and a principal without a
// type fails those two bindings with INVALID_REQUEST while the valid one of the same request
// is stored.
func TestAclCreateDescribeDelete(t *testing.T) {
	skipUnlessWeir(t, weirOnlyACL)
	a := startACLBroker(t, "acl-crud", nil)
	adm := a.adm
	const allow = kmsg.ACLPermissionTypeAllow
	topic, group := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup
	lit, pre := kadm.ACLPatternLiteral, kadm.ACLPatternPrefixed
	aliceWrite := binding(topic, "orders", lit, "User:alice", "*", kadm.OpWrite, allow)
	aliceRead := binding(topic, "orders", lit, "User:alice", "*", kadm.OpRead, allow)
	bobLogs := binding(topic, "logs-", pre, "User:bob", "*", kadm.OpRead, allow)
	aliceG1 := binding(group, "g1", lit, "User:alice", "*", kadm.OpRead, allow)

	sameBindings(t, "ACLs of a new broker", describeACLs(t, adm, allACLs()))
	grant(t, adm, kadm.NewACLs().Allow("User:alice").Topics("orders").Operations(kadm.OpWrite, kadm.OpRead))
	grant(t, adm, kadm.NewACLs().Allow("User:bob").Topics("logs-").ResourcePatternType(pre).Operations(kadm.OpRead))
	grant(t, adm, kadm.NewACLs().Allow("User:alice").Groups("g1").Operations(kadm.OpRead))

	sameBindings(t, "every ACL", describeACLs(t, adm, allACLs()), aliceWrite, aliceRead, bobLogs, aliceG1)
	sameBindings(t, "alice's ACLs",
		describeACLs(t, adm, kadm.NewACLs().AnyResource().Allow("User:alice").AllowHosts().Operations().ResourcePatternType(kadm.ACLPatternAny)),
		aliceWrite, aliceRead, aliceG1)
	sameBindings(t, "DENY ACLs", describeACLs(t, adm, kadm.NewACLs().AnyResource().Deny().DenyHosts().Operations().ResourcePatternType(kadm.ACLPatternAny)))
	sameBindings(t, "ACLs that MATCH topic logs-x",
		describeACLs(t, adm, kadm.NewACLs().Topics("logs-x").Allow().AllowHosts().Deny().DenyHosts().Operations().ResourcePatternType(kadm.ACLPatternMatch)),
		bobLogs)
	sameBindings(t, "ACLs that MATCH topic orders",
		describeACLs(t, adm, kadm.NewACLs().Topics("orders").Allow().AllowHosts().Deny().DenyHosts().Operations().ResourcePatternType(kadm.ACLPatternMatch)),
		aliceWrite, aliceRead)
	sameBindings(t, "LITERAL ACLs of topic logs-",
		describeACLs(t, adm, kadm.NewACLs().Topics("logs-").Allow().AllowHosts().Deny().DenyHosts().Operations().ResourcePatternType(lit)))
	sameBindings(t, "PREFIXED ACLs of topic logs-",
		describeACLs(t, adm, kadm.NewACLs().Topics("logs-").Allow().AllowHosts().Deny().DenyHosts().Operations().ResourcePatternType(pre)),
		bobLogs)
	sameBindings(t, "READ ACLs of groups",
		describeACLs(t, adm, kadm.NewACLs().Groups().Allow().AllowHosts().Deny().DenyHosts().Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternAny)),
		aliceG1)

	// Delete alice's WRITE on orders, and (in the same request) what matches nothing.
	del := kadm.NewACLs().Topics("orders", "payments").Allow("User:alice").AllowHosts().Operations(kadm.OpWrite)
	res, err := adm.DeleteACLs(ctxFor(t, 30*time.Second), del)
	if err != nil {
		t.Fatalf("delete ACLs: %v", err)
	}
	deleted := map[string][]string{}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("delete ACLs filter %v: %v (%s)", *r.Name, r.Err, r.ErrMessage)
		}
		for _, d := range r.Deleted {
			if d.Err != nil {
				t.Fatalf("delete ACLs: matching ACL with an error: %+v", d)
			}
			deleted[*r.Name] = append(deleted[*r.Name], binding(d.Type, d.Name, d.Pattern, d.Principal, d.Host, d.Operation, d.Permission))
		}
	}
	if len(res) != 2 || len(deleted) != 1 || !slices.Equal(deleted["orders"], []string{aliceWrite}) {
		t.Fatalf("delete alice's WRITE on orders and payments: %d filter results, deleted %q; want only %q from the orders filter", len(res), deleted, aliceWrite)
	}
	sameBindings(t, "ACLs after the delete", describeACLs(t, adm, allACLs()), aliceRead, bobLogs, aliceG1)

	// One request: a valid binding between an empty topic name and a principal without a type.
	req := kmsg.NewPtrCreateACLsRequest()
	for _, c := range []struct{ name, principal string }{{"", "User:carol"}, {"valid", "User:carol"}, {"valid", "carol"}} {
		cr := kmsg.NewCreateACLsRequestCreation()
		cr.ResourceType = topic
		cr.ResourceName = c.name
		cr.ResourcePatternType = lit
		cr.Principal = c.principal
		cr.Host = "*"
		cr.Operation = kadm.OpDescribe
		cr.PermissionType = allow
		req.Creations = append(req.Creations, cr)
	}
	resp, err := req.RequestWith(ctxFor(t, 30*time.Second), a.admCl)
	if err != nil {
		t.Fatalf("create ACLs: %v", err)
	}
	var got []string
	for _, r := range resp.Results {
		msg := ""
		if r.ErrorMessage != nil {
			msg = *r.ErrorMessage
		}
		got = append(got, fmt.Sprintf("%s %s", codeName(r.ErrorCode), msg))
	}
	if len(resp.Results) != 3 || !errors.Is(kerr.ErrorForCode(resp.Results[0].ErrorCode), kerr.InvalidRequest) ||
		resp.Results[1].ErrorCode != 0 || !errors.Is(kerr.ErrorForCode(resp.Results[2].ErrorCode), kerr.InvalidRequest) {
		t.Fatalf("create (empty name, valid, principal \"carol\"): results %q, want INVALID_REQUEST, success, INVALID_REQUEST", got)
	}
	t.Logf("create (empty name, valid, principal \"carol\"): %q", got)
	sameBindings(t, "ACLs after a partly invalid create", describeACLs(t, adm, allACLs()),
		aliceRead, bobLogs, aliceG1, binding(topic, "valid", lit, "User:carol", "*", kadm.OpDescribe, allow))
}

// pollGroupError polls a group consumer until a poll brings err (within 20 s); it fails the
// test if a record arrives or another error does.
func pollGroupError(t *testing.T, cl *kgo.Client, want error) error {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollRecords(ctx, 100)
		cancel()
		if n := len(fs.Records()); n > 0 {
			t.Fatalf("a consumer that should be refused read %d records", n)
		}
		for _, fe := range fs.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				continue
			}
			if !errors.Is(fe.Err, want) {
				t.Fatalf("poll error %s/%d: %v, want %v", fe.Topic, fe.Partition, fe.Err, want)
			}
			return fe.Err
		}
	}
	t.Fatalf("no %v from the consumer within 20 s", want)
	return nil
}

// TestAclEnforcedOnProduceConsumeAndGroups: with alice allowed WRITE and READ on topic
// "orders" and READ on group "g1" (and nothing else), over SASL_PLAINTEXT:
//   - alice produces 20 records to orders (idempotently), but a record to "payments" fails with
//     TOPIC_AUTHORIZATION_FAILED, as does bob's record to orders (bob has no ACL on it);
//     neither is stored;
//   - alice's consumer of group g1 reads her 20 records and commits their end offsets; in group
//     g2 her consumer gets GROUP_AUTHORIZATION_FAILED, and no offset of g2 is stored;
//   - an OffsetCommit of g1 for orders and payments commits orders and answers
//     TOPIC_AUTHORIZATION_FAILED for payments (READ on the topic is needed too);
//   - Metadata for every topic lists orders but not payments (which exists), and Metadata
//     for orders and payments answers orders and TOPIC_AUTHORIZATION_FAILED for payments;
//   - alice's CreateAcls gets CLUSTER_AUTHORIZATION_FAILED and stores nothing;
//   - alice's CreateTopics of "alice-new" gets TOPIC_AUTHORIZATION_FAILED and creates nothing;
//     once she may CREATE topics prefixed "alice-", she creates "alice-new2".
func TestAclEnforcedOnProduceConsumeAndGroups(t *testing.T) {
	skipUnlessWeir(t, weirOnlyACL)
	a := startACLBroker(t, "acl-enforced", []string{"alice", "bob"})
	createTopic(t, a.adm, "orders", 2)
	createTopic(t, a.adm, "payments", 1)
	grant(t, a.adm, kadm.NewACLs().Allow("User:alice").Topics("orders").Operations(kadm.OpWrite, kadm.OpRead))
	grant(t, a.adm, kadm.NewACLs().Allow("User:alice").Groups("g1").Operations(kadm.OpRead))
	acls := describeACLs(t, a.adm, allACLs())

	// Produce.
	alice := a.producerAs(t, "alice")
	sent := keyedRecords("orders", 0, 20, 4)
	produceAll(t, alice, sent)
	_, end := byPartition(t, sent, map[int32]int64{0: 0, 1: 0})
	if err := produceOne(t, alice, "payments", "alice"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice's produce to payments: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := produceOne(t, a.producerAs(t, "bob"), "orders", "bob"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob's produce to orders: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	emptyTopic(t, a.adm, "payments")
	if got := endOffsets(t, a.adm, "orders"); !equalOffsets(got, end) {
		t.Fatalf("orders end offsets %v after alice's records and bob's refused one, want %v", got, end)
	}

	// Consume and commit in g1.
	cons := a.as(t, "alice", kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	want, got := map[string]int{}, map[string]int{}
	for _, r := range sent {
		want[string(r.Value)]++
	}
	count := 0
	deadline := time.Now().Add(20 * time.Second)
	for count < len(sent) {
		if time.Now().After(deadline) {
			t.Fatalf("alice's consumer of g1 read %d of %d records", count, len(sent))
		}
		for _, r := range pollSome(t, cons, 500*time.Millisecond, 1000) {
			got[string(r.Value)]++
			count++
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("alice's consumer of g1 read %v, want %v", got, want)
	}
	if err := cons.CommitUncommittedOffsets(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatalf("alice's commit in g1: %v", err)
	}
	if c := committedOffsets(t, a.adm, "g1", "orders"); !equalOffsets(c, end) {
		t.Fatalf("g1's committed offsets %v, want the end offsets %v", c, end)
	}
	cons.Close() // leaves g1, so that a commit of no member is accepted below

	// g2: no ACL.
	g2 := a.as(t, "alice", kgo.ConsumerGroup("g2"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	t.Logf("alice's consumer of g2: %v", pollGroupError(t, g2, kerr.GroupAuthorizationFailed))
	g2.Close()
	if c := committedOffsets(t, a.adm, "g2", "orders"); len(c) != 0 {
		t.Fatalf("g2 has committed offsets %v", c)
	}

	// OffsetCommit needs READ on each topic besides READ on the group.
	aliceCl := a.as(t, "alice")
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group = "g1"
	commit.Generation = -1
	for _, topic := range []string{"orders", "payments"} {
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = topic
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition = 0
		cp.Offset = 1
		ct.Partitions = append(ct.Partitions, cp)
		commit.Topics = append(commit.Topics, ct)
	}
	commitResp, err := commit.RequestWith(ctxFor(t, 20*time.Second), aliceCl)
	if err != nil {
		t.Fatalf("alice's OffsetCommit of g1: %v", err)
	}
	results := map[string]string{}
	for _, rt := range commitResp.Topics {
		for _, rp := range rt.Partitions {
			results[fmt.Sprintf("%s/%d", rt.Topic, rp.Partition)] = codeName(rp.ErrorCode)
		}
	}
	if wantRes := map[string]string{"orders/0": "NONE", "payments/0": "TOPIC_AUTHORIZATION_FAILED"}; !maps.Equal(results, wantRes) {
		t.Fatalf("alice's OffsetCommit of g1 for orders/0 and payments/0: %v, want %v", results, wantRes)
	}
	end[0] = 1
	if c := committedOffsets(t, a.adm, "g1", "orders"); !equalOffsets(c, end) {
		t.Fatalf("g1's committed offsets %v after committing orders/0 at 1, want %v", c, end)
	}
	if c := committedOffsets(t, a.adm, "g1", "payments"); len(c) != 0 {
		t.Fatalf("g1 has committed offsets of payments: %v", c)
	}

	// Metadata.
	aliceAdm := kadm.NewClient(aliceCl)
	all, err := aliceAdm.ListTopics(ctxFor(t, 20*time.Second))
	if err != nil {
		t.Fatalf("alice's metadata: %v", err)
	}
	if td, ok := all["orders"]; !ok || td.Err != nil || len(td.Partitions) != 2 {
		t.Fatalf("alice's metadata of every topic: orders %v %+v, want it with 2 partitions", ok, td)
	}
	if _, ok := all["payments"]; ok || len(all) != 1 {
		t.Fatalf("alice's metadata of every topic lists %v, want orders only", all.Names())
	}
	if adminAll, err := a.adm.ListTopics(ctxFor(t, 20*time.Second)); err != nil || !slices.Contains(adminAll.Names(), "payments") {
		t.Fatalf("the super user's metadata: %v %v, want payments in it", err, adminAll.Names())
	}
	mreq := kmsg.NewPtrMetadataRequest()
	for _, topic := range []string{"orders", "payments"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		mreq.Topics = append(mreq.Topics, mt)
	}
	mresp, err := mreq.RequestWith(ctxFor(t, 20*time.Second), aliceCl)
	if err != nil {
		t.Fatalf("alice's metadata of orders and payments: %v", err)
	}
	mres := map[string]string{}
	for _, mt := range mresp.Topics {
		mres[*mt.Topic] = fmt.Sprintf("%s, %d partitions", codeName(mt.ErrorCode), len(mt.Partitions))
	}
	if wantRes := map[string]string{"orders": "NONE, 2 partitions", "payments": "TOPIC_AUTHORIZATION_FAILED, 0 partitions"}; !maps.Equal(mres, wantRes) {
		t.Fatalf("alice's metadata of orders and payments: %v, want %v", mres, wantRes)
	}

	// Cluster: CreateAcls.
	res, err := aliceAdm.CreateACLs(ctxFor(t, 20*time.Second), kadm.NewACLs().Allow("User:alice").Topics("payments").Operations(kadm.OpAll))
	if err != nil || len(res) != 1 || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice's CreateAcls: %v %+v, want CLUSTER_AUTHORIZATION_FAILED", err, res)
	}
	sameBindings(t, "ACLs after alice's refused CreateAcls", describeACLs(t, a.adm, allACLs()), acls...)

	// CreateTopics.
	if _, err := aliceAdm.CreateTopic(ctxFor(t, 20*time.Second), 1, 1, nil, "alice-new"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice creates alice-new: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if tds, err := a.adm.ListTopics(ctxFor(t, 20*time.Second), "alice-new"); err != nil || !errors.Is(tds["alice-new"].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("metadata of alice-new after a refused create: %v %+v, want UNKNOWN_TOPIC_OR_PARTITION", err, tds["alice-new"])
	}
	grant(t, a.adm, kadm.NewACLs().Allow("User:alice").Topics("alice-").ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpCreate))
	if _, err := aliceAdm.CreateTopic(ctxFor(t, 20*time.Second), 1, 1, nil, "alice-new2"); err != nil {
		t.Fatalf("alice creates alice-new2 with CREATE on the prefix alice-: %v", err)
	}
	waitTopic(t, a.adm, "alice-new2", 1)
}

// TestAclDenyWinsAndRevocation: with every user allowed WRITE on every topic (literal "*")
// and bob denied WRITE on "secret", bob produces to "public" but not to "secret"
// (TOPIC_AUTHORIZATION_FAILED, nothing stored; alice still produces to it: the DENY is bob's);
// a DENY of alice's WRITE on public from host 10.1.2.3 does not stop her (she connects from
// 127.0.0.1), one from 127.0.0.1 does; once bob's DENY is deleted, his producer gets a record
// into secret within 3 s.
func TestAclDenyWinsAndRevocation(t *testing.T) {
	skipUnlessWeir(t, weirOnlyACL)
	a := startACLBroker(t, "acl-deny", []string{"alice", "bob"})
	createTopic(t, a.adm, "public", 1)
	createTopic(t, a.adm, "secret", 1)
	grant(t, a.adm, kadm.NewACLs().Allow("User:*").Topics("*").Operations(kadm.OpWrite))
	denyBob := kadm.NewACLs().Deny("User:bob").Topics("secret").Operations(kadm.OpWrite)
	grant(t, a.adm, denyBob)

	bob := a.producerAs(t, "bob")
	if err := produceOne(t, bob, "public", "bob"); err != nil {
		t.Fatalf("bob's produce to public: %v", err)
	}
	if err := produceOne(t, bob, "secret", "bob"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("bob's produce to secret: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	emptyTopic(t, a.adm, "secret")
	alice := a.producerAs(t, "alice")
	if err := produceOne(t, alice, "secret", "alice"); err != nil {
		t.Fatalf("alice's produce to secret: %v", err)
	}

	// A DENY applies on its host only: the clients connect from 127.0.0.1.
	grant(t, a.adm, kadm.NewACLs().Deny("User:alice").DenyHosts("10.1.2.3").Topics("public").Operations(kadm.OpWrite))
	if err := produceOne(t, alice, "public", "alice"); err != nil {
		t.Fatalf("alice's produce to public, denied from 10.1.2.3 only: %v", err)
	}
	grant(t, a.adm, kadm.NewACLs().Deny("User:alice").DenyHosts("127.0.0.1").Topics("public").Operations(kadm.OpWrite))
	if err := produceOne(t, alice, "public", "alice"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice's produce to public, denied from 127.0.0.1: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if got := endOffsets(t, a.adm, "public"); got[0] != 2 {
		t.Fatalf("public's end offset %d after bob's and alice's records, want 2", got[0])
	}

	res, err := a.adm.DeleteACLs(ctxFor(t, 20*time.Second), kadm.NewACLs().Deny("User:bob").DenyHosts().Topics("secret").Operations(kadm.OpWrite))
	if err != nil || len(res) != 1 || res[0].Err != nil || len(res[0].Deleted) != 1 {
		t.Fatalf("delete bob's DENY: %v %+v, want it deleted", err, res)
	}
	revoked := time.Now()
	var last error
	for {
		if last = produceOne(t, bob, "secret", "bob"); last == nil {
			break
		}
		if !errors.Is(last, kerr.TopicAuthorizationFailed) {
			t.Fatalf("bob's produce to secret after the DENY was deleted: %v", last)
		}
		if time.Since(revoked) > 3*time.Second {
			t.Fatalf("bob still cannot produce to secret %v after the DENY was deleted: %v", time.Since(revoked), last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("bob produced to secret %v after the DENY was deleted", time.Since(revoked).Round(time.Millisecond))
	if got := endOffsets(t, a.adm, "secret"); got[0] != 2 {
		t.Fatalf("secret's end offset %d after alice's and bob's records, want 2", got[0])
	}
}

// TestAclIdempotentAndTransactional: with alice allowed WRITE on "orders" (no IDEMPOTENT_WRITE
// on the cluster), her InitProducerId succeeds and she produces idempotently (KIP-679: WRITE
// on any topic suffices). carol, without any ACL, gets CLUSTER_AUTHORIZATION_FAILED from
// InitProducerId, and her idempotent produce fails (TOPIC_AUTHORIZATION_FAILED from Metadata
// first); allowed DESCRIBE on orders, her idempotent produce fails with
// CLUSTER_AUTHORIZATION_FAILED and a non-idempotent one with TOPIC_AUTHORIZATION_FAILED;
// allowed IDEMPOTENT_WRITE on the cluster, her InitProducerId succeeds. Allowed WRITE on
// transactional id "tx-a", alice commits a transaction of 5 records that a read_committed
// consumer reads; with "tx-b" FindCoordinator and InitProducerId answer
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED and her transactional produce fails, storing nothing.
func TestAclIdempotentAndTransactional(t *testing.T) {
	skipUnlessWeir(t, weirOnlyACL)
	a := startACLBroker(t, "acl-txn", []string{"alice", "carol"})
	createTopic(t, a.adm, "orders", 1)
	grant(t, a.adm, kadm.NewACLs().Allow("User:alice").Topics("orders").Operations(kadm.OpWrite))

	// Idempotence.
	if resp, err := initProducerID(t, a.as(t, "alice"), a.NodeID, nil); err != nil || resp.ProducerID < 0 {
		t.Fatalf("alice's InitProducerId: %v, producer id %d", err, resp.ProducerID)
	}
	if err := produceOne(t, a.producerAs(t, "alice"), "orders", "alice"); err != nil {
		t.Fatalf("alice's idempotent produce to orders: %v", err)
	}
	carolCl := a.as(t, "carol")
	if _, err := initProducerID(t, carolCl, a.NodeID, nil); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("carol's InitProducerId: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	if err := produceOne(t, a.producerAs(t, "carol"), "orders", "carol"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("carol's idempotent produce without any ACL: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	grant(t, a.adm, kadm.NewACLs().Allow("User:carol").Topics("orders").Operations(kadm.OpDescribe))
	if err := produceOne(t, a.producerAs(t, "carol"), "orders", "carol"); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("carol's idempotent produce with DESCRIBE on orders: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	if err := produceOne(t, a.producerAs(t, "carol", kgo.DisableIdempotentWrite()), "orders", "carol"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("carol's non-idempotent produce with DESCRIBE on orders: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if got := endOffsets(t, a.adm, "orders"); got[0] != 1 {
		t.Fatalf("orders end offset %d after alice's record and carol's refused ones, want 1", got[0])
	}
	grant(t, a.adm, kadm.NewACLs().Allow("User:carol").Clusters().Operations(kadm.OpIdempotentWrite))
	if resp, err := initProducerID(t, carolCl, a.NodeID, nil); err != nil || resp.ProducerID < 0 {
		t.Fatalf("carol's InitProducerId with IDEMPOTENT_WRITE on the cluster: %v, producer id %d", err, resp.ProducerID)
	}

	// Transactions.
	grant(t, a.adm, kadm.NewACLs().Allow("User:alice").TransactionalIDs("tx-a").Operations(kadm.OpWrite))
	txa := a.producerAs(t, "alice", kgo.TransactionalID("tx-a"))
	if err := txa.BeginTransaction(); err != nil {
		t.Fatalf("tx-a: begin: %v", err)
	}
	produceAll(t, txa, keyedRecords("orders", 0, 5, 5))
	if err := txa.EndTransaction(ctxFor(t, 20*time.Second), kgo.TryCommit); err != nil {
		t.Fatalf("tx-a: commit: %v", err)
	}
	// The commit marker follows the commit's answer (in Kafka as in Weir): wait for it.
	end := endOffsets(t, a.adm, "orders")[0]
	for deadline := time.Now().Add(20 * time.Second); end < 7 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		end = endOffsets(t, a.adm, "orders")[0]
	}
	if end != 7 { // alice's record, 5 records, the commit marker
		t.Fatalf("orders end offset %d after tx-a's commit, want 7", end)
	}
	rc := newClient(t, a.Broker, kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().At(1)}}))
	var seen []string
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("a read_committed consumer read %q of tx-a's 5 records", seen)
		}
		for _, r := range pollSome(t, rc, 500*time.Millisecond, 100) {
			seen = append(seen, fmt.Sprintf("%d:%s", r.Offset, r.Value))
		}
	}
	if want := []string{"1:key-00#0", "2:key-01#0", "3:key-02#0", "4:key-03#0", "5:key-04#0"}; !slices.Equal(seen, want) {
		t.Fatalf("a read_committed consumer read %q, want tx-a's records %q", seen, want)
	}

	if resp, err := initProducerID(t, a.as(t, "alice"), a.NodeID, kmsg.StringPtr("tx-b")); !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("alice's InitProducerId of tx-b: %v (%+v), want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err, resp)
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType = 1
	fc.CoordinatorKeys = []string{"tx-b"}
	fc.CoordinatorKey = "tx-b"
	fcResp, err := fc.RequestWith(ctxFor(t, 20*time.Second), a.as(t, "alice").Broker(int(a.NodeID)))
	if err != nil || len(fcResp.Coordinators) != 1 || !errors.Is(kerr.ErrorForCode(fcResp.Coordinators[0].ErrorCode), kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("alice's FindCoordinator of tx-b: %v %+v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err, fcResp)
	}
	txb := a.producerAs(t, "alice", kgo.TransactionalID("tx-b"))
	// franz-go initializes a transactional producer's id as the client starts: BeginTransaction
	// reports the failure if it came in time, else the produce does.
	err = txb.BeginTransaction()
	if err == nil {
		err = produceOne(t, txb, "orders", "tx-b")
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("tx-b: begin and produce: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
	}
	t.Logf("tx-b: %v", err)
	if got := endOffsets(t, a.adm, "orders")[0]; got != end {
		t.Fatalf("orders end offset %d after tx-b's refused produce, want %d", got, end)
	}
}

// TestAclFetchSessions: incremental fetch sessions (KIP-227) while ACLs are enforced. alice,
// allowed READ on topics "feed" and "side", reads both through a session (the broker counts
// incremental fetches). Once her READ on "side" is deleted, her session's fetches, which name
// neither topic, answer TOPIC_AUTHORIZATION_FAILED for side's partition and do not deliver the
// records produced to side after the deletion, while those produced to feed keep coming (a
// fetch that began before the deletion may still deliver: authorization is checked when a
// fetch begins). A sessionless Fetch of side is refused too, and counted in
// weir_authorization_denied_total.
func TestAclFetchSessions(t *testing.T) {
	skipUnlessWeir(t, weirOnlyACL)
	a := startACLBroker(t, "acl-sessions", []string{"alice"})
	createTopic(t, a.adm, "feed", 2)
	createTopic(t, a.adm, "side", 1)
	grant(t, a.adm, kadm.NewACLs().Allow("User:alice").Topics("feed", "side").Operations(kadm.OpRead))
	prod := newProducer(t, a.Broker) // the super user, over PLAINTEXT
	produceAll(t, prod, keyedRecords("feed", 0, 10, 2))
	produceAll(t, prod, keyedRecords("side", 0, 5, 1))
	before := sessionCounters(t, a.Broker)

	cons := a.as(t, "alice", kgo.ConsumeTopics("feed", "side"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	read := map[string]int{}
	revoked := false
	var refused error // side's error after the deletion
	readUntil := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !done() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: read %v, side's error %v", what, read, refused)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			fs := cons.PollRecords(ctx, 1000)
			cancel()
			for _, r := range fs.Records() {
				read[r.Topic]++
			}
			for _, fe := range fs.Errors() {
				switch {
				case errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled):
				case revoked && fe.Topic == "side" && errors.Is(fe.Err, kerr.TopicAuthorizationFailed):
					refused = fe.Err
				default:
					t.Fatalf("%s: fetch error %s/%d: %v", what, fe.Topic, fe.Partition, fe.Err)
				}
			}
		}
	}
	readUntil("alice's first records", func() bool { return read["feed"] == 10 && read["side"] == 5 })
	// Rounds of new records on feed alone: the session's fetches name only what moved.
	for round := 1; round <= 3; round++ {
		produceAll(t, prod, keyedRecords("feed", 10*round, 10, 2))
		readUntil(fmt.Sprintf("round %d", round), func() bool { return read["feed"] == 10+10*round })
	}
	after := sessionCounters(t, a.Broker)
	created := after["weir_fetch_sessions_created_total"] - before["weir_fetch_sessions_created_total"]
	incremental := after["weir_fetch_incremental_total"] - before["weir_fetch_incremental_total"]
	if created < 1 || incremental < 3 {
		t.Fatalf("alice's fetches with ACLs enforced: %v sessions created, %v incremental fetches", created, incremental)
	}
	t.Logf("alice's fetches: %v sessions created, %v incremental", created, incremental)

	// READ on side taken away while the session goes on.
	res, err := a.adm.DeleteACLs(ctxFor(t, 30*time.Second),
		kadm.NewACLs().Topics("side").Allow("User:alice").AllowHosts().Operations(kadm.OpRead))
	if err != nil || len(res) != 1 || res[0].Err != nil || len(res[0].Deleted) != 1 {
		t.Fatalf("delete alice's READ on side: %v %+v", err, res)
	}
	revoked = true
	// A fetch authorizes when it begins (as Kafka's does): the long poll in flight during the
	// deletion may still answer. Records on feed end it; every fetch after them begins after
	// the deletion.
	produceAll(t, prod, keyedRecords("feed", 40, 10, 2))
	readUntil("feed after the deletion", func() bool { return read["feed"] == 50 })
	produceAll(t, prod, keyedRecords("side", 5, 3, 1))
	produceAll(t, prod, keyedRecords("feed", 50, 10, 2))
	readUntil("feed, and side refused", func() bool { return read["feed"] == 60 && refused != nil })
	// One more round: side's records must not come late either.
	produceAll(t, prod, keyedRecords("feed", 60, 10, 2))
	readUntil("the last round", func() bool { return read["feed"] == 70 })
	if read["side"] != 5 {
		t.Fatalf("alice read %d records of side, 5 of them before her READ was deleted", read["side"])
	}
	cons.Close()

	// One sessionless Fetch of side as alice, nothing else going on: refused, and counted.
	raw := a.as(t, "alice")
	if err := raw.Ping(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatalf("alice's client: %v", err)
	}
	deniedBefore := weirMetrics(t, a.Broker, "weir_authorization_denied_total")["weir_authorization_denied_total"]
	details, err := a.adm.ListTopics(ctxFor(t, 20*time.Second), "side")
	if err != nil || details["side"].Err != nil {
		t.Fatalf("side's topic id: %v %v", err, details["side"].Err)
	}
	fetch := kmsg.NewPtrFetchRequest() // the version both sides support: side by id and name
	fetch.MaxWaitMillis = 100
	fetch.MaxBytes = 1 << 20
	fetch.SessionEpoch = -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "side"
	ft.TopicID = details["side"].ID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	fr, err := fetch.RequestWith(ctxFor(t, 20*time.Second), raw)
	if err != nil {
		t.Fatalf("alice's Fetch of side: %v", err)
	}
	if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 ||
		!errors.Is(kerr.ErrorForCode(fr.Topics[0].Partitions[0].ErrorCode), kerr.TopicAuthorizationFailed) ||
		len(fr.Topics[0].Partitions[0].RecordBatches) != 0 {
		t.Fatalf("alice's Fetch of side: %+v, want TOPIC_AUTHORIZATION_FAILED and no records", fr.Topics)
	}
	denied := weirMetrics(t, a.Broker, "weir_authorization_denied_total")["weir_authorization_denied_total"] - deniedBefore
	if denied != 1 {
		t.Fatalf("weir_authorization_denied_total rose by %v for one refused Fetch, want 1", denied)
	}
	t.Logf("after the deletion: read %v, side: %v", read, refused)
}
