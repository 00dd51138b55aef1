package compat

// Coordinators under concurrency: transactional consume-transform-produce pipelines whose
// groups rebalance all the time (members come and go, so open transactions are aborted while
// other members commit offsets in theirs), one pipeline per group protocol (classic eager,
// classic cooperative, classic with static members, KIP-848), all at once, beside a prober that
// keeps asking the broker for what every client needs: idempotent producer ids and produce,
// group listings and descriptions, offset fetches, topic creation. Each probe must be answered
// within its timeout (liveness), and each pipeline's output must be its input exactly once, in
// order per partition (safety).
//
// Before answers that wait ran on tasks of their own, this wedged a broker within seconds: a
// JoinGroup's answer was handed the metadata store's connection while its own connection
// waited inside the next request for that connection (franz-go's TestTxnEtl found it).
//
// WEIR_STRESS_SECONDS sets how long members keep coming and going (default 12; `make chaos`
// runs it longer).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// stressChurn is how long members of each pipeline keep joining and leaving.
func stressChurn() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("WEIR_STRESS_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 12 * time.Second
}

// probeTimeout is the longest any probe may take: far above a healthy broker's answer, far
// below a wedged broker's never.
const probeTimeout = 20 * time.Second

func TestTxnPipelinesUnderRebalances(t *testing.T) {
	b := sharedBroker(t)
	churn := stressChurn()
	side := unique("stress-side")
	createTopic(t, newAdmin(t, b), side, 2)
	stop := make(chan struct{})
	probed := make(chan probeStats, 1)
	go func() { probed <- probe(t, b, side, stop) }()

	kinds := []struct {
		name string
		opts func(worker int) []kgo.Opt
	}{
		{"eager", func(int) []kgo.Opt { return []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())} }},
		{"cooperative", func(int) []kgo.Opt { return []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())} }},
		{"static", func(w int) []kgo.Opt {
			// Three instance ids among all workers: a new worker takes the place of one that
			// left, as a rolled pod would.
			return []kgo.Opt{kgo.Balancers(kgo.StickyBalancer()), kgo.InstanceID(fmt.Sprintf("static-%d", w%3))}
		}},
		{"consumer", func(int) []kgo.Opt { return []kgo.Opt{kgo.ServerSideBalancer()} }},
	}
	// Set up in this goroutine (the helpers stop the test on failure); run all at once.
	pipelines := make([]*pipeline, len(kinds))
	for i, k := range kinds {
		pipelines[i] = newPipeline(t, b, k.name, k.opts)
	}
	var wg sync.WaitGroup
	for _, p := range pipelines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.run(t, churn)
		}()
	}
	wg.Wait()
	close(stop)
	s := <-probed
	t.Logf("probes: %d answered, slowest %v", s.answered, s.slowest)
	if br, ok := b.(*Broker); ok && br.Kind == "weir" {
		// Whether one lock for all groups still holds under this load.
		_, body := adminGet(t, br, "/metrics")
		for _, h := range []string{"weir_group_lock_wait_seconds", "weir_group_lock_held_seconds"} {
			t.Logf("%s: %s", h, histogramSummary(body, h))
		}
	}
	if s.answered == 0 {
		t.Errorf("no probe was answered")
	}
	if t.Failed() {
		return
	}
	for _, p := range pipelines {
		p.check(t)
	}
}

type probeStats struct {
	answered int
	slowest  time.Duration
}

// probe asks the broker, in turn and until stop, what other clients need from its
// coordinators and its metadata store; a probe not answered within probeTimeout fails the test.
func probe(t *testing.T, b Target, side string, stop <-chan struct{}) probeStats {
	adm := newAdmin(t, b)
	var s probeStats
	calls := []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"InitProducerId and an idempotent Produce from a new client", func(ctx context.Context) error {
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Seeds()...), kgo.RequestRetries(100))
			if err != nil {
				return err
			}
			defer cl.Close()
			return cl.ProduceSync(ctx, &kgo.Record{Topic: side, Value: []byte("probe")}).FirstErr()
		}},
		{"ListGroups", func(ctx context.Context) error { _, err := adm.ListGroups(ctx); return err }},
		{"DescribeGroups", func(ctx context.Context) error {
			_, err := adm.DescribeGroups(ctx, "stress-missing-group")
			return err
		}},
		{"OffsetFetch", func(ctx context.Context) error {
			r, err := adm.FetchOffsets(ctx, "stress-missing-group")
			if err == nil {
				err = r.Error()
			}
			return err
		}},
		{"CreateTopics", func(ctx context.Context) error {
			r, err := adm.CreateTopic(ctx, 1, 1, nil, unique("stress-new"))
			if err == nil {
				err = r.Err
			}
			return err
		}},
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return s
		case <-time.After(200 * time.Millisecond):
		}
		c := calls[i%len(calls)]
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		start := time.Now()
		err := c.call(ctx)
		took := time.Since(start)
		cancel()
		if took > s.slowest {
			s.slowest = took
		}
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("%s: not answered within %v: the broker is wedged", c.what, probeTimeout)
			return s
		case err != nil:
			t.Logf("%s: %v", c.what, err)
		default:
			s.answered++
		}
	}
}

const stressPartitions = 6

// pipeline copies an input topic, fed during the churn, to an output topic with transactional
// workers of one group: two at all times, one replaced every second during the churn (each
// replacement a rebalance that aborts transactions in flight), then two until every input
// offset is committed. The output, read_committed, must be the input exactly once, in order.
type pipeline struct {
	b              Target
	kind           string
	opts           func(int) []kgo.Opt
	in, out, group string
	// What the feeder got acknowledged, by partition, in offset order.
	acked map[int32][]string
	ends  map[int32]int64
}

func newPipeline(t *testing.T, b Target, kind string, opts func(int) []kgo.Opt) *pipeline {
	p := &pipeline{b: b, kind: kind, opts: opts,
		in: unique("stress-in-" + kind), out: unique("stress-out-" + kind), group: unique("stress-group-" + kind),
		acked: map[int32][]string{}, ends: map[int32]int64{}}
	adm := newAdmin(t, b)
	createTopic(t, adm, p.in, stressPartitions)
	createTopic(t, adm, p.out, stressPartitions)
	return p
}

// feed produces numbered records to the input until stop, 60 at a time; errors fail the test.
func (p *pipeline) feed(t *testing.T, stop <-chan struct{}) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.b.Seeds()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ClientID("stress-feeder-"+p.kind))
	if err != nil {
		t.Errorf("%s: feeder: %v", p.kind, err)
		return
	}
	defer cl.Close()
	for i := 0; ; {
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		var rs []*kgo.Record
		for j := 0; j < 60; j, i = j+1, i+1 {
			rs = append(rs, &kgo.Record{Topic: p.in, Partition: int32(i % stressPartitions), Value: []byte(fmt.Sprintf("%s-%06d", p.kind, i))})
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		results := cl.ProduceSync(ctx, rs...)
		cancel()
		if err := results.FirstErr(); err != nil {
			t.Errorf("%s: feeding the input: %v", p.kind, err)
			return
		}
		for _, r := range results {
			p.acked[r.Record.Partition] = append(p.acked[r.Record.Partition], string(r.Record.Value))
			p.ends[r.Record.Partition] = r.Record.Offset + 1
		}
	}
}

func (p *pipeline) run(t *testing.T, churn time.Duration) {
	adm := newAdmin(t, p.b)
	var (
		done      atomic.Bool
		failures  atomic.Int64
		committed atomic.Int64
		workers   sync.WaitGroup
	)
	worker := func(id int, quit <-chan struct{}) {
		defer workers.Done()
		o := append([]kgo.Opt{
			kgo.SeedBrokers(p.b.Seeds()...),
			kgo.ClientID(fmt.Sprintf("stress-%s-%d", p.kind, id)),
			kgo.TransactionalID(fmt.Sprintf("%s-w%d", p.group, id)),
			kgo.TransactionTimeout(60 * time.Second),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.RequireStableFetchOffsets(),
			kgo.ConsumerGroup(p.group),
			kgo.ConsumeTopics(p.in),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(10 * time.Second),
			kgo.HeartbeatInterval(500 * time.Millisecond),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequestRetries(50),
			kgo.RetryTimeout(60 * time.Second),
		}, p.opts(id)...)
		sess, err := kgo.NewGroupTransactSession(o...)
		if err != nil {
			t.Errorf("%s: new session: %v", p.kind, err)
			return
		}
		defer sess.Close()
		for {
			select {
			case <-quit:
				return
			default:
			}
			if done.Load() {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			fs := sess.PollRecords(ctx, 100)
			cancel()
			rs := fs.Records()
			if len(rs) == 0 {
				continue
			}
			if err := sess.Begin(); err != nil {
				t.Errorf("%s: begin: %v", p.kind, err)
				return
			}
			for _, r := range rs {
				sess.Produce(context.Background(), &kgo.Record{Topic: p.out, Partition: r.Partition, Value: append([]byte("copy-"), r.Value...)}, nil)
			}
			ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
			ok, err := sess.End(ctx, kgo.TryCommit)
			cancel()
			switch {
			case err != nil:
				failures.Add(1)
				t.Logf("%s worker %d: end: %v; this worker stops", p.kind, id, err)
				return
			case ok:
				committed.Add(int64(len(rs)))
			}
		}
	}

	var quits []chan struct{}
	next := 0
	spawn := func() {
		q := make(chan struct{})
		quits = append(quits, q)
		workers.Add(1)
		go worker(next, q)
		next++
	}
	stopFeeding := make(chan struct{})
	fed := make(chan struct{})
	go func() { p.feed(t, stopFeeding); close(fed) }()
	spawn()
	spawn()
	churnEnd := time.Now().Add(churn)
	deadline := churnEnd.Add(150 * time.Second)
	for {
		time.Sleep(time.Second)
		if time.Now().Before(churnEnd) {
			// Replace the oldest worker: the group rebalances, transactions in flight abort.
			close(quits[0])
			quits = quits[1:]
			spawn()
			continue
		}
		if stopFeeding != nil {
			close(stopFeeding)
			<-fed
			stopFeeding = nil
		}
		if equalOffsets(tryCommitted(adm, p.group, p.in), p.ends) {
			break
		}
		if time.Now().After(deadline) || t.Failed() {
			t.Errorf("%s: not done %v after the churn: committed %v, want %v", p.kind, time.Since(churnEnd), tryCommitted(adm, p.group, p.in), p.ends)
			break
		}
	}
	done.Store(true)
	workers.Wait()
	t.Logf("%s: %d workers, %d records committed, %d sessions failed", p.kind, next, committed.Load(), failures.Load())
}

// check reads the output back: each partition is its input partition exactly once, in order.
func (p *pipeline) check(t *testing.T) {
	waitSettled(t, newAdmin(t, p.b), p.out)
	writeEnd(t, p.b, p.out, stressPartitions)
	rc := readToEnd(t, p.b, p.out, stressPartitions, kgo.ReadCommitted())
	got := map[int32][]string{}
	for _, r := range rc {
		if string(r.Value) != endValue {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
		}
	}
	for part := int32(0); part < stressPartitions; part++ {
		want := make([]string, 0, len(p.acked[part]))
		for _, v := range p.acked[part] {
			want = append(want, "copy-"+v)
		}
		if !equalStrings(got[part], want) {
			t.Errorf("%s: output partition %d: %d committed records, want the %d of input partition %d exactly once, in order",
				p.kind, part, len(got[part]), len(want), part)
		}
	}
}

// histogramSummary reads a histogram of /metrics: its count, mean, and the upper bounds of the
// buckets holding its 99th and 99.9th percentiles and its largest sample.
func histogramSummary(body, name string) string {
	re := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(name) + `_bucket\{le="([^"]+)"\} (\d+)$`)
	type bucket struct {
		le    string
		count float64
	}
	var bs []bucket
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		n, _ := strconv.ParseFloat(m[2], 64)
		bs = append(bs, bucket{m[1], n})
	}
	if len(bs) == 0 {
		return "absent"
	}
	total := bs[len(bs)-1].count
	sum := metricIn(body, name+"_sum")
	at := func(q float64) string {
		for _, b := range bs {
			if b.count >= q*total {
				return b.le
			}
		}
		return "+Inf"
	}
	max := "0"
	for i := len(bs) - 1; i > 0; i-- {
		if bs[i-1].count < total {
			max = bs[i].le
			break
		}
	}
	if total == 0 {
		return "no samples"
	}
	return fmt.Sprintf("%.0f samples, mean %.1f µs, p99 <= %s s, p99.9 <= %s s, max <= %s s",
		total, sum/total*1e6, at(0.99), at(0.999), max)
}

// metricIn reads one sample's value from a /metrics body (0 if absent).
func metricIn(body, sample string) float64 {
	m := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(sample) + " ([0-9.e+-]+)$").FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
