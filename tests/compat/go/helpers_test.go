package compat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The target shared by every test but TestBrokerRestart and TestTransactSessionBrokerRestart
// (a broker, or a cluster with WEIR_COMPAT_TARGET=cluster); started on first use.
var shared struct {
	once sync.Once
	b    Target
	err  error
}

func TestMain(m *testing.M) {
	mine := os.Getenv("WEIR_HARNESS_PORTS_FILE") == ""
	ports := portsFile()
	code := m.Run()
	if mine {
		os.Remove(ports)
	}
	if shared.b != nil {
		if err := shared.b.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "stop shared broker: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

func sharedBroker(t *testing.T) Target {
	t.Helper()
	shared.once.Do(func() { shared.b, shared.err = StartTarget("shared") })
	if shared.err != nil {
		t.Fatalf("start shared broker: %v", shared.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker log tail:\n%s", shared.b.LogTail(60))
		}
	})
	return shared.b
}

func unique(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, b Target, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{
		kgo.SeedBrokers(b.Seeds()...),
		kgo.RequestRetries(20),
		kgo.RetryTimeout(30 * time.Second),
	}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func newAdmin(t *testing.T, b Target) *kadm.Client {
	return kadm.NewClient(newClient(t, b, kgo.ClientID("compat-admin")))
}

// newProducer returns an idempotent producer (franz-go's default) with acks=all.
func newProducer(t *testing.T, b Target, opts ...kgo.Opt) *kgo.Client {
	return newClient(t, b, append([]kgo.Opt{
		kgo.ClientID("compat-producer"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5 * time.Millisecond),
		// No RecordDeliveryTimeout: franz-go measures it from the record's own timestamp,
		// so records with explicit past timestamps would time out at once. produceAll bounds
		// the wait with a context instead.
	}, opts...)...)
}

func createTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	resp, err := adm.CreateTopic(ctxFor(t, 30*time.Second), partitions, 1, nil, topic)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if resp.Err != nil {
		t.Fatalf("create topic %s: %v (%s)", topic, resp.Err, resp.ErrMessage)
	}
	waitTopic(t, adm, topic, partitions)
}

// waitTopic waits (up to 15 s: Kafka propagates metadata asynchronously) until metadata shows
// the topic with n partitions, each with a leader.
func waitTopic(t *testing.T, adm *kadm.Client, topic string, n int32) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		tds, err := adm.ListTopics(ctxFor(t, 30*time.Second), topic)
		var state string
		if err != nil {
			state = err.Error()
		} else if td := tds[topic]; td.Err != nil {
			state = td.Err.Error()
		} else if int32(len(td.Partitions)) != n {
			state = fmt.Sprintf("%d partitions", len(td.Partitions))
		} else {
			state = ""
			for _, pd := range td.Partitions {
				if pd.Err != nil || pd.Leader < 0 {
					state = fmt.Sprintf("partition %d: leader %d, %v", pd.Partition, pd.Leader, pd.Err)
				}
			}
			if state == "" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s not ready in metadata: %s", topic, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// produceAll produces the records, waits for every acknowledgement and fails the test if any
// send failed. The records come back with Partition and Offset set.
func produceAll(t *testing.T, cl *kgo.Client, rs []*kgo.Record) {
	t.Helper()
	ctx := ctxFor(t, 90*time.Second)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	wg.Add(len(rs))
	for _, r := range rs {
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s key %s: %w", r.Topic, r.Key, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d sends failed; first: %v", len(errs), len(rs), errs[0])
	}
}

// keyedRecords makes n records over `keys` keys; value "key#seq", seq counting per key from
// firstSeq/keys on.
func keyedRecords(topic string, first, n, keys int) []*kgo.Record {
	rs := make([]*kgo.Record, 0, n)
	for i := first; i < first+n; i++ {
		key := fmt.Sprintf("key-%02d", i%keys)
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(fmt.Sprintf("%s#%d", key, i/keys))})
	}
	return rs
}

// byPartition groups acknowledged records by partition and checks that each partition's
// offsets continue exactly from start[p] with no gap or duplicate. Returns the new end offsets.
func byPartition(t *testing.T, rs []*kgo.Record, start map[int32]int64) (map[int32][]*kgo.Record, map[int32]int64) {
	t.Helper()
	parts := map[int32][]*kgo.Record{}
	for _, r := range rs {
		parts[r.Partition] = append(parts[r.Partition], r)
	}
	end := map[int32]int64{}
	for p, list := range parts {
		sort.Slice(list, func(i, j int) bool { return list[i].Offset < list[j].Offset })
		for i, r := range list {
			if want := start[p] + int64(i); r.Offset != want {
				t.Fatalf("partition %d: acknowledged offsets not contiguous: #%d is %d, want %d", p, i, r.Offset, want)
			}
		}
		end[p] = start[p] + int64(len(list))
	}
	for p, s := range start {
		if _, ok := end[p]; !ok {
			end[p] = s
		}
	}
	return parts, end
}

func listOffsets(t *testing.T, l kadm.ListedOffsets, err error, topic string) map[int32]int64 {
	t.Helper()
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	out := map[int32]int64{}
	for p, o := range l[topic] {
		if o.Err != nil {
			t.Fatalf("list offsets %s/%d: %v", topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out
}

func committedOffsets(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	resp, err := adm.FetchOffsets(ctxFor(t, 30*time.Second), group)
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		if o.Err != nil {
			t.Fatalf("fetch offsets %s %s/%d: %v", group, topic, p, o.Err)
		}
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out
}

func equalOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// pollSome polls once for up to d, failing the test on a fetch error.
func pollSome(t *testing.T, cl *kgo.Client, d time.Duration, max int) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	fs := cl.PollRecords(ctx, max)
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
			continue
		}
		t.Fatalf("fetch error %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
	}
	return fs.Records()
}

// readRange reads partition p of topic from `from` (no group) until offset end-1, and returns
// the records in order.
func readRange(t *testing.T, b Target, topic string, p int32, from kgo.Offset, end int64) []*kgo.Record {
	t.Helper()
	cl := newClient(t, b, kgo.ClientID("compat-reader"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: from}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	for len(out) == 0 || out[len(out)-1].Offset < end-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%s/%d: read %d records from %v, did not reach %d", topic, p, len(out), from, end)
		}
		out = append(out, pollSome(t, cl, 500*time.Millisecond, 1000)...)
	}
	return out
}

// ---- consumer group members -----------------------------------------------------------

// member is one group member. New members start with the topic paused, so that nothing is
// consumed until a phase resumes it; franz-go runs the group protocol in the background.
type member struct {
	name  string
	topic string
	cl    *kgo.Client

	mu    sync.Mutex
	owned map[int32]bool
}

func newMember(t *testing.T, b Target, name, group, topic string) *member {
	t.Helper()
	m := &member{name: name, topic: topic, owned: map[int32]bool{}}
	drop := func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, p := range ps[topic] {
			delete(m.owned, p)
		}
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Seeds()...),
		kgo.ClientID(name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(10*time.Second),
		kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.RequestRetries(20),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range ps[topic] {
				m.owned[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(drop),
		kgo.OnPartitionsLost(drop),
	)
	if err != nil {
		t.Fatalf("new member %s: %v", name, err)
	}
	cl.PauseFetchTopics(topic)
	m.cl = cl
	t.Cleanup(m.close)
	return m
}

func (m *member) close() {
	if m.cl != nil {
		m.cl.Close() // leaves the group
		m.cl = nil
	}
}

func (m *member) assignment() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []int32
	for p := range m.owned {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

// splitsAll: every member owns something, and the assignments are disjoint and cover 0..n-1.
func splitsAll(ms []*member, n int) bool {
	seen := map[int32]bool{}
	total := 0
	for _, m := range ms {
		a := m.assignment()
		if len(a) == 0 {
			return false
		}
		for _, p := range a {
			seen[p] = true
		}
		total += len(a)
	}
	if total != n || len(seen) != n {
		return false
	}
	for p := int32(0); p < int32(n); p++ {
		if !seen[p] {
			return false
		}
	}
	return true
}

func describeAssignments(ms []*member) string {
	s := ""
	for _, m := range ms {
		s += fmt.Sprintf("%s=%v ", m.name, m.assignment())
	}
	return s
}

func waitUntil(t *testing.T, what string, ms []*member, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s; assignments: %s", what, describeAssignments(ms))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consume polls the members round-robin, taking records below limit[p] and committing after
// every poll, until every partition's next offset reaches its limit. Each record must arrive
// exactly at next[p]: lower is a re-delivery of consumed (committed) data, higher a gap. A
// partition that reaches its limit is paused and its position set back to the limit.
func consume(t *testing.T, phase string, ms []*member, topic string, next, limit map[int32]int64, sink map[int32][]*kgo.Record) {
	t.Helper()
	for _, m := range ms {
		var todo, done []int32
		for p := range limit {
			if next[p] < limit[p] {
				todo = append(todo, p)
			} else {
				done = append(done, p)
			}
		}
		if len(done) > 0 {
			m.cl.PauseFetchPartitions(map[string][]int32{topic: done})
		}
		m.cl.ResumeFetchPartitions(map[string][]int32{topic: todo})
		m.cl.ResumeFetchTopics(topic)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !equalOffsets(next, limit) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out; next offsets %v, wanted %v; assignments: %s", phase, next, limit, describeAssignments(ms))
		}
		for _, m := range ms {
			var commit []*kgo.Record
			reached := map[int32]bool{}
			for _, r := range pollSome(t, m.cl, 200*time.Millisecond, 50) {
				p := r.Partition
				if r.Offset >= limit[p] {
					reached[p] = true
					continue
				}
				if r.Offset < next[p] {
					t.Fatalf("%s: %s got %s/%d@%d again (already consumed and committed up to %d)", phase, m.name, topic, p, r.Offset, next[p])
				}
				if r.Offset != next[p] {
					t.Fatalf("%s: %s got %s/%d@%d, expected %d (gap)", phase, m.name, topic, p, r.Offset, next[p])
				}
				sink[p] = append(sink[p], r)
				next[p] = r.Offset + 1
				commit = append(commit, r)
				if next[p] == limit[p] {
					reached[p] = true
				}
			}
			if len(commit) > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := m.cl.CommitRecords(ctx, commit...)
				cancel()
				if err != nil {
					t.Fatalf("%s: %s commit: %v", phase, m.name, err)
				}
			}
			for p := range reached {
				m.cl.PauseFetchPartitions(map[string][]int32{topic: {p}})
				m.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {p: {Epoch: -1, Offset: limit[p]}}})
			}
		}
	}
}

// checkGroup compares the coordinator's view of the group with the members' own.
func checkGroup(t *testing.T, adm *kadm.Client, group, state string, ms []*member) kadm.DescribedGroup {
	t.Helper()
	dgs, err := adm.DescribeGroups(ctxFor(t, 30*time.Second), group)
	if err != nil {
		t.Fatalf("describe group %s: %v", group, err)
	}
	g, ok := dgs[group]
	if !ok || g.Err != nil {
		t.Fatalf("describe group %s: %v %v", group, ok, g.Err)
	}
	if g.State != state {
		t.Fatalf("group %s state %q, want %q", group, g.State, state)
	}
	if len(g.Members) != len(ms) {
		t.Fatalf("group %s has %d members, want %d: %+v", group, len(g.Members), len(ms), g.Members)
	}
	if len(ms) > 0 {
		if g.ProtocolType != "consumer" {
			t.Fatalf("group protocol type %q, want consumer", g.ProtocolType)
		}
		if g.Protocol != "cooperative-sticky" {
			t.Fatalf("group protocol %q, want cooperative-sticky (franz-go's default balancer)", g.Protocol)
		}
	}
	described := map[string][]int32{}
	for _, dm := range g.Members {
		if dm.MemberID == "" || dm.ClientHost == "" {
			t.Fatalf("member without id or host: %+v", dm)
		}
		a, ok := dm.Assigned.AsConsumer()
		if !ok {
			t.Fatalf("member %s: assignment is not a consumer assignment", dm.ClientID)
		}
		var ps []int32
		for _, at := range a.Topics {
			if at.Topic == ms[0].topic {
				ps = append(ps, at.Partitions...)
			}
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		described[dm.ClientID] = ps
	}
	for _, m := range ms {
		if got, want := fmt.Sprint(described[m.name]), fmt.Sprint(m.assignment()); got != want {
			t.Fatalf("described assignment of %s is %s, member holds %s", m.name, got, want)
		}
	}
	return g
}
