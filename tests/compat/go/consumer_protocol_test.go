package compat

// The KIP-848 consumer group protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe, the
// server-side assignors) with franz-go's opt-in kgo.ServerSideBalancer(): cooperative-sticky
// maps to the broker's "uniform" assignor, range to "range". Every consumer here commits
// (autocommit every 500 ms, and a blocking commit when partitions are revoked or the client
// leaves), so delivery is at least once: the checks are that every acknowledged record is
// consumed, with its value, and nothing is lost; duplicates are only counted.
//
// TestConsumerProtocolGroup, TestConsumerProtocolRangeAssignor and TestConsumerProtocolRegex
// use the shared target, TestConsumerProtocolBrokerRestart a broker of its own (skipped in
// cluster mode), and TestConsumerProtocolCoordinatorFailover (WEIR_COMPAT_TARGET=cluster only)
// a cluster of its own, of which it kills the group's coordinator.
//
// WEIR_COMPAT_KGO_LOG=info|debug writes the consumers' franz-go logs to stderr.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// requireConsumerProtocol fails unless every broker advertises ConsumerGroupHeartbeat v1 and
// ConsumerGroupDescribe: without them franz-go silently falls back to the classic protocol.
func requireConsumerProtocol(t *testing.T, adm *kadm.Client) {
	t.Helper()
	vs, err := adm.ApiVersions(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatalf("api versions: %v", err)
	}
	if len(vs) == 0 {
		t.Fatalf("api versions: no broker answered")
	}
	vs.Each(func(v kadm.BrokerApiVersions) {
		if v.Err != nil {
			t.Fatalf("api versions of broker %d: %v", v.NodeID, v.Err)
		}
		if max, ok := v.KeyMaxVersion(int16(kmsg.ConsumerGroupHeartbeat)); !ok || max < 1 {
			t.Fatalf("broker %d: ConsumerGroupHeartbeat max version %d (advertised %v), want >= 1", v.NodeID, max, ok)
		}
		if _, ok := v.KeyMaxVersion(int16(kmsg.ConsumerGroupDescribe)); !ok {
			t.Fatalf("broker %d does not advertise ConsumerGroupDescribe", v.NodeID)
		}
	})
}

// ---- what the consumers got ------------------------------------------------------------

// cpSink collects consumed records: topic -> partition -> offset -> value.
type cpSink struct {
	mu    sync.Mutex
	got   map[string]map[int32]map[int64]string
	by    map[string]int // consumer -> records (duplicates included)
	dups  int
	total int
}

func newCPSink() *cpSink {
	return &cpSink{got: map[string]map[int32]map[int64]string{}, by: map[string]int{}}
}

func (s *cpSink) add(consumer string, rs []*kgo.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		ps := s.got[r.Topic]
		if ps == nil {
			ps = map[int32]map[int64]string{}
			s.got[r.Topic] = ps
		}
		offs := ps[r.Partition]
		if offs == nil {
			offs = map[int64]string{}
			ps[r.Partition] = offs
		}
		if v, ok := offs[r.Offset]; ok {
			s.dups++
			if v != string(r.Value) {
				// Same offset, another value: keep the conflict visible to missing().
				offs[r.Offset] = "CONFLICT: " + v + " / " + string(r.Value)
			}
		} else {
			offs[r.Offset] = string(r.Value)
		}
		s.by[consumer]++
		s.total++
	}
}

// missing says how many of want have not been consumed (with their value), and names a few.
func (s *cpSink) missing(want []*kgo.Record) (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	var first []string
	for _, r := range want {
		v, ok := s.got[r.Topic][r.Partition][r.Offset]
		if ok && v == string(r.Value) {
			continue
		}
		n++
		if len(first) < 5 {
			if ok {
				first = append(first, fmt.Sprintf("%s/%d@%d is %q, want %q", r.Topic, r.Partition, r.Offset, v, r.Value))
			} else {
				first = append(first, fmt.Sprintf("%s/%d@%d (%q)", r.Topic, r.Partition, r.Offset, r.Value))
			}
		}
	}
	return n, strings.Join(first, ", ")
}

// count is how many distinct offsets of topic were consumed.
func (s *cpSink) count(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, offs := range s.got[topic] {
		n += len(offs)
	}
	return n
}

func (s *cpSink) stats() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d records consumed (%d duplicates), per consumer %v", s.total, s.dups, s.by)
}

func (s *cpSink) byConsumer() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.by {
		out[k] = v
	}
	return out
}

// waitAll waits until every record of want has been consumed.
func (s *cpSink) waitAll(t *testing.T, what string, want []*kgo.Record, d time.Duration, cs []*cpConsumer) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n, first := s.missing(want)
		if n == 0 {
			t.Logf("%s: all %d records consumed; %s", what, len(want), s.stats())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d records not consumed within %v, e.g. %s; %s; consumers: %s",
				what, n, len(want), d, first, s.stats(), describeCPs(cs))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ---- consumer-protocol consumers ----------------------------------------------------------

// cpConsumer is a franz-go group consumer on the consumer protocol that polls in the
// background into a sink and keeps track of the partitions it holds.
type cpConsumer struct {
	name string
	cl   *kgo.Client

	mu    sync.Mutex
	owned map[string]map[int32]bool
	errs  []string // fetch errors and failed commits on revocation, reported by the test

	stop   context.CancelFunc
	done   chan struct{}
	closed bool
}

func cpLogger(name string) []kgo.Opt {
	var level kgo.LogLevel
	switch strings.ToLower(os.Getenv("WEIR_COMPAT_KGO_LOG")) {
	case "debug":
		level = kgo.LogLevelDebug
	case "info":
		level = kgo.LogLevelInfo
	default:
		return nil
	}
	return []kgo.Opt{kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, func() string {
		return time.Now().Format("15:04:05.000 ") + name + " "
	}))}
}

// startCP starts a consumer in group; the topics in paused are not fetched until resumed.
func startCP(t *testing.T, b Target, name, group string, sink *cpSink, paused []string, opts ...kgo.Opt) *cpConsumer {
	t.Helper()
	c := &cpConsumer{name: name, owned: map[string]map[int32]bool{}, done: make(chan struct{})}
	all := []kgo.Opt{
		kgo.SeedBrokers(b.Seeds()...),
		kgo.ClientID(name),
		kgo.ConsumerGroup(group),
		kgo.ServerSideBalancer(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), // the broker's "uniform" assignor
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitInterval(500 * time.Millisecond),
		kgo.RequestRetries(20),
		kgo.RetryTimeout(30 * time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			c.mu.Lock()
			defer c.mu.Unlock()
			for topic, list := range ps {
				if c.owned[topic] == nil {
					c.owned[topic] = map[int32]bool{}
				}
				for _, p := range list {
					c.owned[topic][p] = true
				}
			}
		}),
		// Replaces autocommit's commit on revocation: commit everything polled (the poll
		// loop has put it in the sink) before the partitions go to another member.
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
			c.drop(ps)
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				c.note("commit on revocation of %v: %v", ps, err)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { c.drop(ps) }),
	}
	all = append(append(all, cpLogger(name)...), opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("new consumer %s: %v", name, err)
	}
	if len(paused) > 0 {
		cl.PauseFetchTopics(paused...)
	}
	c.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := cl.PollRecords(pctx, 1000)
			pcancel()
			if fs.IsClientClosed() {
				return
			}
			fs.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					c.note("fetch error %s/%d: %v", topic, p, err)
				}
			})
			sink.add(name, fs.Records())
		}
	}()
	t.Cleanup(c.close)
	return c
}

func (c *cpConsumer) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) < 50 {
		c.errs = append(c.errs, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	}
}

func (c *cpConsumer) drop(ps map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, list := range ps {
		for _, p := range list {
			delete(c.owned[topic], p)
		}
		if len(c.owned[topic]) == 0 {
			delete(c.owned, topic)
		}
	}
}

// holds is what the consumer holds, as "topic:[p ...]" sorted by topic.
func (c *cpConsumer) holds() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := kadm.TopicsSet{}
	for topic, ps := range c.owned {
		for p := range ps {
			ts.Add(topic, p)
		}
	}
	return topicsString(ts)
}

func (c *cpConsumer) errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...)
}

// close stops polling and closes the client, which commits what it polled and leaves the
// group (ConsumerGroupHeartbeat with member epoch -1).
func (c *cpConsumer) close() {
	if c.closed {
		return
	}
	c.closed = true
	c.stop()
	<-c.done
	c.cl.Close()
}

// commit commits everything polled (the sink has it).
func (c *cpConsumer) commit(t *testing.T) {
	t.Helper()
	if err := c.cl.CommitUncommittedOffsets(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatalf("%s: commit: %v", c.name, err)
	}
}

func describeCPs(cs []*cpConsumer) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s holds %s", c.name, c.holds()))
	}
	return strings.Join(parts, "; ")
}

// logCPErrors logs what the consumers noted (fetch errors, failed commits on revocation).
func logCPErrors(t *testing.T, cs ...*cpConsumer) {
	t.Helper()
	for _, c := range cs {
		if errs := c.errors(); len(errs) > 0 {
			t.Logf("%s noted %d error(s):\n  %s", c.name, len(errs), strings.Join(errs, "\n  "))
		}
	}
}

// ---- the coordinator's view ---------------------------------------------------------------

func topicsString(ts kadm.TopicsSet) string {
	var topics []string
	for topic, ps := range ts {
		if len(ps) > 0 {
			topics = append(topics, topic)
		}
	}
	sort.Strings(topics)
	var parts []string
	for _, topic := range topics {
		var list []int32
		for p := range ts[topic] {
			list = append(list, p)
		}
		sort.Slice(list, func(i, j int) bool { return list[i] < list[j] })
		parts = append(parts, fmt.Sprintf("%s:%v", topic, list))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func describeConsumerGroup(adm *kadm.Client, group string) (kadm.DescribedConsumerGroup, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	dgs, err := adm.DescribeConsumerGroups(ctx, group)
	if err != nil {
		return kadm.DescribedConsumerGroup{}, err
	}
	g, ok := dgs[group]
	if !ok {
		return g, fmt.Errorf("group %s missing from the describe response", group)
	}
	return g, g.Err
}

func describedString(g kadm.DescribedConsumerGroup) string {
	var ms []string
	for _, m := range g.Members {
		regex := ""
		if m.SubscribedTopicRegex != nil {
			regex = " regex=" + *m.SubscribedTopicRegex
		}
		ms = append(ms, fmt.Sprintf("{%s id=%s epoch=%d type=%d topics=%v%s assigned=%s target=%s}", m.ClientID, m.MemberID,
			m.MemberEpoch, m.MemberType, m.SubscribedTopics, regex, topicsString(m.Assignment), topicsString(m.TargetAssignment)))
	}
	return fmt.Sprintf("state=%s epoch=%d assignment-epoch=%d assignor=%q members=%s", g.State, g.Epoch, g.AssignmentEpoch,
		g.AssignorName, strings.Join(ms, " "))
}

// settled says why (ConsumerGroupDescribe) group g is not yet Stable with exactly the
// consumers cs as members, each member's assignment equal to its target and to what the client
// holds, no member empty, and the assignments disjoint and covering every partition of the
// topics in want (topic -> partition count) and nothing else. "" when it is.
func settled(g kadm.DescribedConsumerGroup, want map[string]int32, assignor string, cs []*cpConsumer) string {
	if g.State != "Stable" {
		return "state " + g.State
	}
	if g.AssignorName != assignor {
		return fmt.Sprintf("assignor %q, want %q", g.AssignorName, assignor)
	}
	if len(g.Members) != len(cs) {
		return fmt.Sprintf("%d members, want %d", len(g.Members), len(cs))
	}
	byName := map[string]*cpConsumer{}
	for _, c := range cs {
		byName[c.name] = c
	}
	union := kadm.TopicsSet{}
	total := 0
	for _, m := range g.Members {
		c, ok := byName[m.ClientID]
		if !ok {
			return fmt.Sprintf("member %s (client id %q) is none of the consumers", m.MemberID, m.ClientID)
		}
		delete(byName, m.ClientID)
		if m.MemberID == "" || m.ClientHost == "" || m.MemberEpoch <= 0 || m.MemberType != 1 {
			return fmt.Sprintf("member %s: id %q, host %q, epoch %d, type %d (want 1, consumer)", m.ClientID, m.MemberID, m.ClientHost, m.MemberEpoch, m.MemberType)
		}
		a := topicsString(m.Assignment)
		if a != topicsString(m.TargetAssignment) {
			return fmt.Sprintf("member %s: assigned %s, target %s", m.ClientID, a, topicsString(m.TargetAssignment))
		}
		if h := c.holds(); a != h {
			return fmt.Sprintf("member %s: assigned %s, the client holds %s", m.ClientID, a, h)
		}
		n := 0
		for topic, ps := range m.Assignment {
			if _, ok := want[topic]; !ok && len(ps) > 0 {
				return fmt.Sprintf("member %s: assigned %s, which it should not be", m.ClientID, topic)
			}
			n += len(ps)
		}
		if n == 0 {
			return fmt.Sprintf("member %s has no partitions", m.ClientID)
		}
		total += n
		union.Merge(m.Assignment)
	}
	wantTotal := 0
	for topic, n := range want {
		wantTotal += int(n)
		for p := int32(0); p < n; p++ {
			if _, ok := union[topic][p]; !ok {
				return fmt.Sprintf("%s/%d is assigned to no member", topic, p)
			}
		}
	}
	if total != wantTotal {
		return fmt.Sprintf("%d partitions assigned, want %d (overlapping assignments)", total, wantTotal)
	}
	return ""
}

// waitCPSettled polls ConsumerGroupDescribe until settled holds, and returns the group.
func waitCPSettled(t *testing.T, what string, adm *kadm.Client, group string, want map[string]int32, assignor string, cs []*cpConsumer) kadm.DescribedConsumerGroup {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		g, err := describeConsumerGroup(adm, group)
		why := ""
		if err != nil {
			why = "describe: " + err.Error()
		} else {
			why = settled(g, want, assignor, cs)
		}
		if why == "" {
			t.Logf("%s: %s", what, describedString(g))
			return g
		}
		if time.Now().After(deadline) {
			logCPErrors(t, cs...)
			t.Fatalf("%s: group %s not settled within 45s: %s\n  described: %s\n  clients: %s", what, group, why, describedString(g), describeCPs(cs))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func memberIDs(g kadm.DescribedConsumerGroup) map[string]string {
	out := map[string]string{}
	for _, m := range g.Members {
		out[m.ClientID] = m.MemberID
	}
	return out
}

// checkListed checks with raw ListGroups (v5, every broker) that group is listed once, of
// type consumer (protocol type consumer) in one of the states, and not among classic groups.
func checkListed(t *testing.T, cl *kgo.Client, group string, states ...string) {
	t.Helper()
	list := func(types ...string) []kmsg.ListGroupsResponseGroup {
		req := kmsg.NewPtrListGroupsRequest()
		req.TypesFilter = types
		var out []kmsg.ListGroupsResponseGroup
		for _, shard := range cl.RequestSharded(ctxFor(t, 30*time.Second), req) {
			if shard.Err != nil {
				t.Fatalf("list groups (broker %d): %v", shard.Meta.NodeID, shard.Err)
			}
			resp := shard.Resp.(*kmsg.ListGroupsResponse)
			if resp.Version < 5 {
				t.Fatalf("list groups answered at v%d, want v5 (group types)", resp.Version)
			}
			if resp.ErrorCode != 0 {
				t.Fatalf("list groups (broker %d): error code %d", shard.Meta.NodeID, resp.ErrorCode)
			}
			for _, g := range resp.Groups {
				if g.Group == group {
					out = append(out, g)
				}
			}
		}
		return out
	}
	all := list()
	if len(all) != 1 {
		t.Fatalf("ListGroups lists group %s %d times: %+v", group, len(all), all)
	}
	g := all[0]
	if g.GroupType != "consumer" || g.ProtocolType != "consumer" {
		t.Fatalf("ListGroups: group %s type %q, protocol type %q; want consumer, consumer", group, g.GroupType, g.ProtocolType)
	}
	ok := false
	for _, s := range states {
		ok = ok || g.GroupState == s
	}
	if !ok {
		t.Fatalf("ListGroups: group %s state %q, want one of %v", group, g.GroupState, states)
	}
	if got := list("consumer"); len(got) != 1 {
		t.Fatalf("ListGroups filtered to type consumer lists group %s %d times", group, len(got))
	}
	if got := list("classic"); len(got) != 0 {
		t.Fatalf("ListGroups filtered to type classic lists group %s: %+v", group, got)
	}
}

// waitCommitted polls the committed offsets until they equal want.
func waitCommitted(t *testing.T, adm *kadm.Client, group, topic string, want map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := tryCommitted(adm, group, topic)
		if equalOffsets(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: committed offsets of %s are %v, want %v", group, topic, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func zeroOffsets(partitions int32) map[int32]int64 {
	m := map[int32]int64{}
	for p := int32(0); p < partitions; p++ {
		m[p] = 0
	}
	return m
}

// ---- a producer that keeps producing -------------------------------------------------------

// trickle produces numbered records round robin over the partitions, one every 10 ms, until
// stopped; it keeps the acknowledged records.
type trickle struct {
	mu    sync.Mutex
	acked []*kgo.Record
	errs  []error
	stopc chan struct{}
	done  chan struct{}
	cl    *kgo.Client
}

func startTrickle(cl *kgo.Client, topic, prefix string, partitions int32) *trickle {
	tr := &trickle{stopc: make(chan struct{}), done: make(chan struct{}), cl: cl}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-tr.stopc:
				return
			case <-tick.C:
			}
			r := &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(fmt.Sprintf("%s-%05d", prefix, i))}
			cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
				tr.mu.Lock()
				defer tr.mu.Unlock()
				if err != nil {
					tr.errs = append(tr.errs, err)
				} else {
					tr.acked = append(tr.acked, r)
				}
			})
		}
	}()
	return tr
}

func (tr *trickle) ackedCount() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.acked)
}

// waitAcked waits until n records in all have been acknowledged.
func (tr *trickle) waitAcked(t *testing.T, what string, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for tr.ackedCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d records acknowledged within %v, want %d", what, tr.ackedCount(), d, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finish stops producing, waits for every outstanding acknowledgement and returns the
// acknowledged records; a failed send fails the test.
func (tr *trickle) finish(t *testing.T) []*kgo.Record {
	t.Helper()
	close(tr.stopc)
	<-tr.done
	if err := tr.cl.Flush(ctxFor(t, 60*time.Second)); err != nil {
		t.Fatalf("flush: %v", err)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.errs) > 0 {
		t.Fatalf("%d sends failed; first: %v", len(tr.errs), tr.errs[0])
	}
	return tr.acked
}

// ---- the tests ---------------------------------------------------------------------------

// TestConsumerProtocolGroup: three franz-go consumers on the consumer protocol (uniform
// assignor) split a 6-partition topic, as ConsumerGroupDescribe shows, and consume 3000
// records, each of them consuming; ListGroups v5 lists the group as of type consumer. One
// consumer leaves: the other two take over all partitions and consume 1000 more records;
// nothing is lost and the committed offsets reach the end. When the last one leaves the group
// is Empty and keeps its offsets.
func TestConsumerProtocolGroup(t *testing.T) {
	const partitions = 6
	b := sharedBroker(t)
	raw := newClient(t, b, kgo.ClientID("compat-admin"))
	adm := kadm.NewClient(raw)
	requireConsumerProtocol(t, adm)
	topic, group := unique("cp-topic"), unique("cp-group")
	createTopic(t, adm, topic, partitions)
	want := map[string]int32{topic: partitions}

	prod := newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	sent := numbered(topic, "first", 3000, partitions)
	produceAll(t, prod, sent)
	_, end := byPartition(t, sent, zeroOffsets(partitions))

	// Three consumers, paused until the group has split the partitions among them.
	sink := newCPSink()
	var cs []*cpConsumer
	for i := 1; i <= 3; i++ {
		cs = append(cs, startCP(t, b, fmt.Sprintf("cp-member-%d", i), group, sink, []string{topic}, kgo.ConsumeTopics(topic)))
	}
	start := time.Now()
	g := waitCPSettled(t, "three members", adm, group, want, "uniform", cs)
	t.Logf("three members settled in %v", time.Since(start))
	for _, m := range g.Members {
		// Kafka answers an empty regex rather than null.
		if len(m.SubscribedTopics) != 1 || m.SubscribedTopics[0] != topic || (m.SubscribedTopicRegex != nil && *m.SubscribedTopicRegex != "") {
			t.Fatalf("member %s subscribes to %v (regex %s), want [%s]", m.ClientID, m.SubscribedTopics, describedString(g), topic)
		}
	}
	checkListed(t, raw, group, "Stable")
	if lg, err := adm.ListGroupsByType(ctxFor(t, 30*time.Second), []string{"consumer"}); err != nil {
		t.Fatalf("list consumer groups: %v", err)
	} else if _, ok := lg[group]; !ok {
		t.Fatalf("kadm ListGroupsByType(consumer) does not list %s", group)
	}

	for _, c := range cs {
		c.cl.ResumeFetchTopics(topic)
	}
	sink.waitAll(t, "three members", sent, 60*time.Second, cs)
	for name, n := range sink.byConsumer() {
		if n == 0 {
			t.Fatalf("%s consumed nothing (%s)", name, sink.stats())
		}
	}
	if len(sink.byConsumer()) != 3 {
		t.Fatalf("not every member consumed: %s", sink.stats())
	}

	// One leaves; the other two take everything over and consume what comes next.
	cs[0].close()
	rest := cs[1:]
	g2 := waitCPSettled(t, "after one left", adm, group, want, "uniform", rest)
	if g2.Epoch <= g.Epoch {
		t.Fatalf("group epoch %d after a member left, was %d", g2.Epoch, g.Epoch)
	}
	more := numbered(topic, "second", 1000, partitions)
	produceAll(t, prod, more)
	_, end2 := byPartition(t, more, end)
	sink.waitAll(t, "after one left", append(append([]*kgo.Record(nil), sent...), more...), 60*time.Second, rest)
	for _, c := range rest {
		c.commit(t)
	}
	waitCommitted(t, adm, group, topic, end2)

	// Everyone leaves: the group is Empty, still a consumer group, offsets kept.
	for _, c := range rest {
		c.close()
	}
	logCPErrors(t, cs...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		g3, err := describeConsumerGroup(adm, group)
		if err == nil && g3.State == "Empty" && len(g3.Members) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group after all left: %v %s", err, describedString(g3))
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkListed(t, raw, group, "Empty")
	if got := committedOffsets(t, adm, group, topic); !equalOffsets(got, end2) {
		t.Fatalf("committed offsets after all left: %v, want %v", got, end2)
	}
}

// TestConsumerProtocolRangeAssignor: consumers with franz-go's range balancer ask for the
// broker's "range" assignor; two of them on a 6-partition topic each get a contiguous range of
// three partitions, and consume every record.
func TestConsumerProtocolRangeAssignor(t *testing.T) {
	const partitions = 6
	b := sharedBroker(t)
	adm := newAdmin(t, b)
	requireConsumerProtocol(t, adm)
	topic, group := unique("cp-range"), unique("cp-range-group")
	createTopic(t, adm, topic, partitions)
	want := map[string]int32{topic: partitions}
	sent := numbered(topic, "range", 600, partitions)
	produceAll(t, newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner())), sent)

	sink := newCPSink()
	var cs []*cpConsumer
	for i := 1; i <= 2; i++ {
		cs = append(cs, startCP(t, b, fmt.Sprintf("cp-range-%d", i), group, sink, []string{topic},
			kgo.ConsumeTopics(topic), kgo.Balancers(kgo.RangeBalancer())))
	}
	g := waitCPSettled(t, "two members", adm, group, want, "range", cs)
	for _, m := range g.Members {
		var ps []int32
		for p := range m.Assignment[topic] {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		if len(ps) != partitions/2 || ps[len(ps)-1]-ps[0] != int32(len(ps)-1) {
			t.Fatalf("range assignor gave %s partitions %v, want a range of %d: %s", m.ClientID, ps, partitions/2, describedString(g))
		}
	}
	for _, c := range cs {
		c.cl.ResumeFetchTopics(topic)
	}
	sink.waitAll(t, "two members", sent, 60*time.Second, cs)
	if len(sink.byConsumer()) != 2 {
		t.Fatalf("not every member consumed: %s", sink.stats())
	}
	for _, c := range cs {
		c.commit(t)
	}
	_, end := byPartition(t, sent, zeroOffsets(partitions))
	waitCommitted(t, adm, group, topic, end)
	logCPErrors(t, cs...)
}

// TestConsumerProtocolRegex: a consumer subscribed by a regular expression (kgo.ConsumeRegex,
// sent as SubscribedTopicRegex) is assigned and consumes the two topics that match, and a
// third matching topic created later; a topic that does not match is neither assigned nor
// consumed.
func TestConsumerProtocolRegex(t *testing.T) {
	const partitions = 2
	b := sharedBroker(t)
	adm := newAdmin(t, b)
	requireConsumerProtocol(t, adm)
	base := unique("cp-regex")
	ta, tb, tc, other := base+"-in-alpha", base+"-in-beta", base+"-in-gamma", base+"-out-delta"
	group := unique("cp-regex-group")
	for _, topic := range []string{ta, tb, other} {
		createTopic(t, adm, topic, partitions)
	}
	prod := newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var sent []*kgo.Record
	for _, topic := range []string{ta, tb, other} {
		rs := numbered(topic, topic, 200, partitions)
		produceAll(t, prod, rs)
		if topic != other {
			sent = append(sent, rs...)
		}
	}

	sink := newCPSink()
	pattern := regexp.QuoteMeta(base) + "-in-[a-z]+"
	c := startCP(t, b, "cp-regex-member", group, sink, nil, kgo.ConsumeTopics(pattern), kgo.ConsumeRegex())
	cs := []*cpConsumer{c}
	g := waitCPSettled(t, "two matching topics", adm, group, map[string]int32{ta: partitions, tb: partitions}, "uniform", cs)
	if m := g.Members[0]; m.SubscribedTopicRegex == nil || !strings.Contains(*m.SubscribedTopicRegex, pattern) {
		t.Fatalf("member subscribes to regex %v, want one containing %q", m.SubscribedTopicRegex, pattern)
	}
	sink.waitAll(t, "two matching topics", sent, 60*time.Second, cs)

	// More records for the topic that does not match, then a third matching topic, created
	// now: it is assigned and consumed too.
	produceAll(t, prod, numbered(other, other+"-later", 50, partitions))
	start := time.Now()
	createTopic(t, adm, tc, partitions)
	rs := numbered(tc, tc, 200, partitions)
	produceAll(t, prod, rs)
	sent = append(sent, rs...)
	waitCPSettled(t, "three matching topics", adm, group, map[string]int32{ta: partitions, tb: partitions, tc: partitions}, "uniform", cs)
	sink.waitAll(t, "three matching topics", sent, 60*time.Second, cs)
	t.Logf("the topic created later was consumed %v after its creation", time.Since(start))

	// The topic that does not match: nothing consumed, although its records were there all along.
	if n := sink.count(other); n != 0 {
		t.Fatalf("consumed %d records of %s, which does not match %q", n, other, pattern)
	}
	waitCPSettled(t, "at the end", adm, group, map[string]int32{ta: partitions, tb: partitions, tc: partitions}, "uniform", cs)
	c.commit(t)
	c.close()
	logCPErrors(t, cs...)
	if got := tryCommitted(adm, group, other); len(got) != 0 {
		t.Fatalf("offsets committed for %s, which does not match: %v", other, got)
	}
}

// cpSurvive runs a consumer-protocol group of two through an outage: records produced before,
// consumed; a trickle of records produced throughout; outage() (a broker restarted or the
// coordinator killed); afterwards the same members (same member ids: the group's state
// survived) hold all partitions, every acknowledged record is consumed, and the committed
// offsets reach the end.
func cpSurvive(t *testing.T, b Target, adm *kadm.Client, outage func(group string)) {
	const partitions = 6
	topic, group := unique("cp-outage"), unique("cp-outage-group")
	createTopic(t, adm, topic, partitions)
	want := map[string]int32{topic: partitions}
	prod := newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	sent := numbered(topic, "before", 1200, partitions)
	produceAll(t, prod, sent)

	sink := newCPSink()
	cs := []*cpConsumer{
		startCP(t, b, "cp-outage-1", group, sink, nil, kgo.ConsumeTopics(topic)),
		startCP(t, b, "cp-outage-2", group, sink, nil, kgo.ConsumeTopics(topic)),
	}
	g := waitCPSettled(t, "before", adm, group, want, "uniform", cs)
	ids := memberIDs(g)
	sink.waitAll(t, "before", sent, 60*time.Second, cs)

	tr := startTrickle(prod, topic, "during", partitions)
	tr.waitAcked(t, "before the outage", 100, 30*time.Second)
	start := time.Now()
	outage(group)
	t.Logf("outage over in %v", time.Since(start))
	n := tr.ackedCount()
	tr.waitAcked(t, "after the outage", n+300, 60*time.Second)
	t.Logf("produced %d records after the outage in %v", tr.ackedCount()-n, time.Since(start))
	during := tr.finish(t)
	_, end := byPartition(t, append(append([]*kgo.Record(nil), sent...), during...), zeroOffsets(partitions))

	sink.waitAll(t, "after the outage", append(append([]*kgo.Record(nil), sent...), during...), 60*time.Second, cs)
	// A fresh admin client: franz-go keeps a group's coordinator cached for sharded requests
	// (ConsumerGroupDescribe) and does not drop it on dial errors, so the old one would keep
	// dialling a killed coordinator.
	adm = newAdmin(t, b)
	g2 := waitCPSettled(t, "after the outage", adm, group, want, "uniform", cs)
	if got := memberIDs(g2); fmt.Sprint(got) != fmt.Sprint(ids) {
		logCPErrors(t, cs...)
		t.Fatalf("member ids after the outage %v, before %v: the group did not carry on", got, ids)
	}
	// No member rejoined (a rejoin bumps the group epoch and the member's epoch).
	if got, was := memberEpochs(g2), memberEpochs(g); g2.Epoch != g.Epoch || got != was {
		logCPErrors(t, cs...)
		t.Fatalf("after the outage group epoch %d, member epochs %s; before %d, %s", g2.Epoch, got, g.Epoch, was)
	}
	// Commits with the members' epochs are accepted, and the coordinator still manages the
	// group: when one member leaves, the other gets everything.
	for _, c := range cs {
		c.commit(t)
	}
	waitCommitted(t, adm, group, topic, end)
	cs[0].close()
	g3 := waitCPSettled(t, "one left after the outage", adm, group, want, "uniform", cs[1:])
	if g3.Epoch <= g2.Epoch {
		t.Fatalf("group epoch %d after a member left, was %d", g3.Epoch, g2.Epoch)
	}
	logCPErrors(t, cs...)
}

func memberEpochs(g kadm.DescribedConsumerGroup) string {
	var parts []string
	for _, m := range g.Members {
		parts = append(parts, fmt.Sprintf("%s=%d", m.ClientID, m.MemberEpoch))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// TestConsumerProtocolBrokerRestart: a consumer-protocol group consumes while its (single)
// broker is restarted (SIGTERM, started again on the same data dir); the group carries on with
// the same members and every record produced before, during and after is consumed.
func TestConsumerProtocolBrokerRestart(t *testing.T) {
	skipInClusterMode(t, "restarts a broker process of its own")
	b := startBroker(t, "cp-restart")
	adm := newAdmin(t, b)
	requireConsumerProtocol(t, adm)
	cpSurvive(t, b, adm, func(string) {
		if err := b.Restart(); err != nil {
			t.Fatalf("restart: %v", err)
		}
	})
}

// TestConsumerProtocolCoordinatorFailover (WEIR_COMPAT_TARGET=cluster): in a cluster of three,
// the broker that coordinates a consumer-protocol group is killed (SIGKILL); FindCoordinator
// names another broker, which carries on with the group's stored state (the same members), and
// every record produced before, during and after is consumed.
func TestConsumerProtocolCoordinatorFailover(t *testing.T) {
	if cluster, _ := clusterMode(); !cluster {
		t.Skip("kills a cluster's coordinator: runs with WEIR_COMPAT_TARGET=cluster")
	}
	c := startCluster(t, "cp-failover")
	adm := newAdmin(t, c)
	requireConsumerProtocol(t, adm)
	coordinator := func(group string) (int32, error) {
		r := adm.FindGroupCoordinators(ctxFor(t, 15*time.Second), group)[group]
		if r.Err != nil {
			return -1, r.Err
		}
		return r.NodeID, nil
	}
	cpSurvive(t, c, adm, func(group string) {
		node, err := coordinator(group)
		if err != nil {
			t.Fatalf("find coordinator of %s: %v", group, err)
		}
		idx := -1
		for i, b := range c.Brokers {
			if b.NodeID == node {
				idx = i
			}
		}
		if idx < 0 {
			t.Fatalf("coordinator %d is none of the brokers", node)
		}
		if err := c.Kill(idx); err != nil {
			t.Fatalf("kill broker %d: %v", node, err)
		}
		t.Logf("killed broker %d, the coordinator of %s", node, group)
		deadline := time.Now().Add(30 * time.Second)
		for {
			now, err := coordinator(group)
			if err == nil && now != node && now > 0 {
				t.Logf("coordinator now broker %d", now)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("coordinator of %s 30s after broker %d was killed: %d, %v", group, node, now, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}
