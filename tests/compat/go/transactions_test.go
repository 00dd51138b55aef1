package compat

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// endValue is the last record written to every partition of a topic whose transactions are
// over: a reader that got it got everything before it.
const endValue = "end"

// TestTransactionalProducer: a plain transactional producer (kgo.TransactionalID) aborts a
// transaction, then commits one; each transaction's records are contiguous and its marker takes
// one offset. A read_committed client gets only the committed records, a read_uncommitted one
// both; while a third transaction is open, ListOffsets under read_committed (the last stable
// offset) stops at its first offset and under read_uncommitted is the high watermark.
func TestTransactionalProducer(t *testing.T) {
	const partitions = 2
	b := sharedBroker(t)
	adm := newAdmin(t, b)
	topic := unique("txn-producer")
	createTopic(t, adm, topic, partitions)
	cl := newProducer(t, b, kgo.TransactionalID(unique("txn-go")), kgo.ClientID("compat-txn-producer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))

	txn := func(prefix string, n int, end kgo.TransactionEndTry) []*kgo.Record {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction: %v", err)
		}
		rs := numbered(topic, prefix, n, partitions)
		produceAll(t, cl, rs)
		if err := cl.EndTransaction(ctxFor(t, 60*time.Second), end); err != nil {
			t.Fatalf("end transaction (commit %v): %v", end, err)
		}
		return rs
	}
	aborted := txn("aborted", 20, kgo.TryAbort)
	committed := txn("committed", 20, kgo.TryCommit)
	// Per partition: 10 aborted records at 0-9, their marker at 10, 10 committed at 11-20, marker at 21.
	contiguous(t, aborted, 0)
	contiguous(t, committed, 11)
	settled := waitOffsets(t, adm, topic, map[int32]int64{0: 22, 1: 22})
	if !equalOffsets(settled, map[int32]int64{0: 22, 1: 22}) {
		t.Fatalf("end offsets %v, want 22 in both partitions (20 records, 2 markers)", settled)
	}

	// An open transaction on partition 0.
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin transaction: %v", err)
	}
	open := []*kgo.Record{{Topic: topic, Partition: 0, Value: []byte("open-00000")}, {Topic: topic, Partition: 0, Value: []byte("open-00001")}}
	produceAll(t, cl, open)
	if open[0].Offset != 22 {
		t.Fatalf("open transaction's first record at %d, want 22", open[0].Offset)
	}
	l, err := adm.ListCommittedOffsets(ctxFor(t, 30*time.Second), topic)
	if lso := listOffsets(t, l, err, topic); !equalOffsets(lso, map[int32]int64{0: 22, 1: 22}) {
		t.Fatalf("read_committed end offsets with a transaction open: %v, want 22 (its first offset) and 22", lso)
	}
	l, err = adm.ListEndOffsets(ctxFor(t, 30*time.Second), topic)
	if hw := listOffsets(t, l, err, topic); !equalOffsets(hw, map[int32]int64{0: 24, 1: 22}) {
		t.Fatalf("read_uncommitted end offsets with a transaction open: %v, want 24 and 22", hw)
	}
	if err := cl.EndTransaction(ctxFor(t, 60*time.Second), kgo.TryAbort); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if s := waitOffsets(t, adm, topic, map[int32]int64{0: 25, 1: 22}); !equalOffsets(s, map[int32]int64{0: 25, 1: 22}) {
		t.Fatalf("end offsets %v after the abort, want 25 and 22", s)
	}
	writeEnd(t, b, topic, partitions)

	rc := readToEnd(t, b, topic, partitions, kgo.ReadCommitted())
	ru := readToEnd(t, b, topic, partitions, kgo.ReadUncommitted())
	want := sortedValues(committed)
	if got := sortedValues(rc); !equalStrings(got, want) {
		t.Fatalf("read_committed got %d records %v, want the %d committed ones", len(got), got, len(want))
	}
	wantAll := sortedValues(append(append(append([]*kgo.Record{}, aborted...), committed...), open...))
	if got := sortedValues(ru); !equalStrings(got, wantAll) {
		t.Fatalf("read_uncommitted got %d records, want %d (aborted ones too)", len(got), len(wantAll))
	}
	acked := map[string]int64{}
	for _, r := range append(append(append([]*kgo.Record{}, aborted...), committed...), open...) {
		acked[string(r.Value)] = r.Offset
	}
	for _, rs := range [][]*kgo.Record{rc, ru} {
		for _, r := range rs {
			if len(r.Key) != 0 {
				t.Fatalf("record with key %q at %d/%d: a control record?", r.Key, r.Partition, r.Offset)
			}
			if o, ok := acked[string(r.Value)]; ok && o != r.Offset {
				t.Fatalf("%s read at offset %d, acknowledged at %d", r.Value, r.Offset, o)
			}
		}
	}
}

// TestTransactSession: a kgo.GroupTransactSession copies 3000 numbered records from an input
// topic to an output topic, one transaction per poll (End with TryCommit); one batch is
// deliberately ended with TryAbort and its records come again. At the end, read_committed,
// each output partition is its input partition exactly once, in order.
func TestTransactSession(t *testing.T) {
	transactSession(t, sharedBroker(t), 3000, nil)
}

// TestTransactSessionBrokerRestart: the same with 6000 records on a broker of its own, which is
// stopped (SIGTERM) half-way while a transaction is open (its records and offsets sent) and
// started again; the session ends that transaction once the broker is back. A session that
// fails meanwhile is replaced by a new one with the same transactional id.
func TestTransactSessionBrokerRestart(t *testing.T) {
	skipInClusterMode(t, "stops and restarts a broker process of its own")
	b := startBroker(t, "txn-restart")
	transactSession(t, b, 6000, b)
}

// transactSession copies n records with a GroupTransactSession; with own != nil, that broker
// is restarted half-way with a transaction open.
func transactSession(t *testing.T, b Target, n int, own *Broker) {
	const partitions = 3
	adm := newAdmin(t, b)
	in, out, group, txnID := unique("txn-in"), unique("txn-out"), unique("txn-group"), unique("txn-session")
	createTopic(t, adm, in, partitions)
	createTopic(t, adm, out, partitions)
	inputs := numbered(in, "v", n, partitions)
	produceAll(t, newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner())), inputs)
	inParts, ends := byPartition(t, inputs, map[int32]int64{0: 0, 1: 0, 2: 0})

	newSession := func() *kgo.GroupTransactSession {
		t.Helper()
		s, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(b.Seeds()...),
			kgo.ClientID("compat-txn-session"),
			kgo.TransactionalID(txnID),
			kgo.TransactionTimeout(60*time.Second),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.RequireStableFetchOffsets(),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(in),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(10*time.Second),
			kgo.HeartbeatInterval(500*time.Millisecond),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.RequestRetries(20),
			kgo.RetryTimeout(30*time.Second),
		)
		if err != nil {
			t.Fatalf("new transact session: %v", err)
		}
		return s
	}

	sess := newSession()
	defer func() { sess.Close() }()
	var (
		copied, batches, sessions = 0, 0, 1
		abortedBatch              = map[string]bool{} // values of the batch ended with TryAbort
		seenAgain                 = map[string]bool{}
		restartDone               chan error // the restart's result, once it is over
		restartOver               atomic.Bool
	)
	deadline := time.Now().Add(150 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("not done after 150s: %d records copied in %d batches by %d sessions; committed %v, want %v",
				copied, batches, sessions, committedOffsets(t, adm, group, in), ends)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := sess.PollRecords(ctx, 200)
		cancel()
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) && !errors.Is(fe.Err, context.Canceled) {
				t.Logf("fetch error %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
			}
		}
		rs := fs.Records()
		if len(rs) == 0 {
			restarting := restartDone != nil && !restartOver.Load()
			if !restarting && equalOffsets(tryCommitted(adm, group, in), ends) {
				break
			}
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		abort := len(abortedBatch) == 0 && copied >= n/4
		e := kgo.AbortingFirstErrPromise(sess.Client())
		for _, r := range rs {
			if abortedBatch[string(r.Value)] {
				seenAgain[string(r.Value)] = true
			}
			sess.Produce(context.Background(), &kgo.Record{Topic: out, Partition: r.Partition, Value: append([]byte("copy-"), r.Value...)}, e.Promise())
		}
		end := kgo.TransactionEndTry(e.Err() == nil)
		if own != nil && restartDone == nil && copied >= n/2 {
			// The broker goes down with this transaction open, its records written and the
			// group's offsets sent; End waits for it to come back.
			if err := sess.Client().Flush(ctxFor(t, 60*time.Second)); err != nil {
				t.Fatalf("flush: %v", err)
			}
			t.Logf("restarting the broker after %d records copied, with a transaction of %d open", copied, len(rs))
			start := time.Now()
			if err := own.Stop(); err != nil {
				t.Fatalf("stop broker: %v", err)
			}
			restartDone = make(chan error, 1)
			go func() {
				err := own.Start()
				t.Logf("broker stopped and started again in %v (err %v)", time.Since(start), err)
				restartDone <- err
				restartOver.Store(true)
			}()
		}
		if abort {
			// The batch's records reach the log (aborted): flush them before ending.
			if err := sess.Client().Flush(ctxFor(t, 60*time.Second)); err != nil {
				t.Fatalf("flush: %v", err)
			}
			end = kgo.TryAbort
		}
		ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
		committed, err := sess.End(ctx, end)
		cancel()
		switch {
		case err != nil:
			// No error of End is retryable: this session is done, a new one takes over (and
			// fences it).
			t.Logf("end of batch %d: %v; starting a new session", batches, err)
			sess.Close()
			sess = newSession()
			sessions++
		case abort:
			if committed {
				t.Fatalf("a batch ended with TryAbort committed")
			}
			for _, r := range rs {
				abortedBatch[string(r.Value)] = true
			}
			t.Logf("aborted a batch of %d records after %d copied", len(rs), copied)
		case committed:
			copied += len(rs)
			batches++
		}
	}
	if restartDone != nil {
		if err := <-restartDone; err != nil {
			t.Fatalf("broker restart: %v", err)
		}
	}
	t.Logf("copied %d records in %d committed batches, %d sessions", n, batches, sessions)
	if len(abortedBatch) == 0 {
		t.Fatalf("no batch was aborted")
	}
	if len(seenAgain) != len(abortedBatch) {
		t.Fatalf("%d of the %d records of the aborted batch came again", len(seenAgain), len(abortedBatch))
	}
	if got := committedOffsets(t, adm, group, in); !equalOffsets(got, ends) {
		t.Fatalf("group offsets %v, want %v", got, ends)
	}

	waitSettled(t, adm, out)
	writeEnd(t, b, out, partitions)
	rc := readToEnd(t, b, out, partitions, kgo.ReadCommitted())
	got := map[int32][]string{}
	for _, r := range rc {
		if string(r.Value) != endValue {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
		}
	}
	for p := int32(0); p < partitions; p++ {
		want := make([]string, 0, len(inParts[p]))
		for _, r := range inParts[p] {
			want = append(want, "copy-"+string(r.Value))
		}
		if !equalStrings(got[p], want) {
			distinct := map[string]bool{}
			for _, v := range got[p] {
				distinct[v] = true
			}
			t.Fatalf("output partition %d: %d records (%d distinct), want the %d of input partition %d in order",
				p, len(got[p]), len(distinct), len(want), p)
		}
	}
	ru := readToEnd(t, b, out, partitions, kgo.ReadUncommitted())
	if len(ru)-partitions < n+len(abortedBatch) {
		t.Fatalf("read_uncommitted: %d records, want at least %d (the aborted batch too)", len(ru)-partitions, n+len(abortedBatch))
	}
}

// contiguous checks that, in each partition, the acknowledged records are at offsets base,
// base+1, ... in produce order.
func contiguous(t *testing.T, rs []*kgo.Record, base int64) {
	t.Helper()
	next := map[int32]int64{}
	for _, r := range rs {
		want, ok := next[r.Partition]
		if !ok {
			want = base
		}
		if r.Offset != want {
			t.Fatalf("%s acknowledged at %d/%d, want offset %d", r.Value, r.Partition, r.Offset, want)
		}
		next[r.Partition] = want + 1
	}
}

// tryCommitted is the group's committed offsets on topic, or nil if the broker does not
// answer now (it may be restarting) or an offset is pending in a transaction.
func tryCommitted(adm *kadm.Client, group, topic string) map[int32]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil
	}
	out := map[int32]int64{}
	for p, o := range resp[topic] {
		if o.Err != nil {
			return nil
		}
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out
}

// numbered makes n records "prefix-00000"... with no key, spread round-robin over the
// partitions (for a client with the manual partitioner).
func numbered(topic, prefix string, n int, partitions int32) []*kgo.Record {
	rs := make([]*kgo.Record, 0, n)
	for i := 0; i < n; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(fmt.Sprintf("%s-%05d", prefix, i))})
	}
	return rs
}

// waitSettled waits (up to 30 s: a transaction's markers are written after EndTxn is answered)
// until no transaction is open on the topic: ListOffsets under read_committed (the last stable
// offset) equals the high watermark in every partition. Returns the offsets.
func waitSettled(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	return waitFor(t, adm, topic, func(lso, hw map[int32]int64) bool { return equalOffsets(lso, hw) }, true)
}

// waitOffsets waits (up to 30 s) until topic's last stable offsets and high watermarks are both
// want, and returns the high watermarks last seen. A transaction's markers follow the answer to
// its EndTxn, in Kafka as in Weir; and a partition closes the transaction when it appends the
// marker, a moment before the marker is durable and counted in the high watermark, so "last
// stable offset equals high watermark" alone can be seen just before the marker.
func waitOffsets(t *testing.T, adm *kadm.Client, topic string, want map[int32]int64) map[int32]int64 {
	t.Helper()
	return waitFor(t, adm, topic, func(lso, hw map[int32]int64) bool {
		return equalOffsets(lso, want) && equalOffsets(hw, want)
	}, false)
}

// waitFor polls topic's last stable offsets and high watermarks (up to 30 s) until done says
// so, and returns the high watermarks last seen; past the deadline it fails the test if fatal.
func waitFor(t *testing.T, adm *kadm.Client, topic string, done func(lso, hw map[int32]int64) bool, fatal bool) map[int32]int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := adm.ListCommittedOffsets(ctxFor(t, 30*time.Second), topic)
		lso := listOffsets(t, l, err, topic)
		l, err = adm.ListEndOffsets(ctxFor(t, 30*time.Second), topic)
		hw := listOffsets(t, l, err, topic)
		if done(lso, hw) {
			return hw
		}
		if time.Now().After(deadline) {
			if fatal {
				t.Fatalf("%s: last stable offsets %v, high watermarks %v", topic, lso, hw)
			}
			return hw
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeEnd writes endValue (idempotent, not transactional) as the last record of every partition.
func writeEnd(t *testing.T, b Target, topic string, partitions int32) {
	t.Helper()
	var rs []*kgo.Record
	for p := int32(0); p < partitions; p++ {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(endValue)})
	}
	produceAll(t, newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner())), rs)
}

// readToEnd reads every partition of topic from the start with the isolation level (no
// group) up to and including its endValue record; returns the records in delivery order.
func readToEnd(t *testing.T, b Target, topic string, partitions int32, level kgo.IsolationLevel) []*kgo.Record {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for p := int32(0); p < partitions; p++ {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl := newClient(t, b, kgo.ClientID("compat-txn-reader"), kgo.FetchIsolationLevel(level),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	defer cl.Close()
	var out []*kgo.Record
	ended := map[int32]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for int32(len(ended)) < partitions {
		if time.Now().After(deadline) {
			t.Fatalf("%s: end not reached in every partition (ended: %v) after %d records", topic, ended, len(out))
		}
		for _, r := range pollSome(t, cl, 500*time.Millisecond, 5000) {
			if ended[r.Partition] {
				t.Fatalf("%s/%d: record %q at %d after the end", topic, r.Partition, r.Value, r.Offset)
			}
			out = append(out, r)
			if string(r.Value) == endValue {
				ended[r.Partition] = true
			}
		}
	}
	return out
}

// sortedValues: the records' values, endValue left out, sorted.
func sortedValues(rs []*kgo.Record) []string {
	var out []string
	for _, r := range rs {
		if string(r.Value) != endValue {
			out = append(out, string(r.Value))
		}
	}
	sort.Strings(out)
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
