package compat

// TestZones (WEIR_COMPAT_TARGET=cluster): six brokers in three zones on one PostgreSQL and one
// s3s-fs. In each zone an idempotent franz-go producer (zone from its client.id tag) and a
// consumer group (az1, az2: client.id tag; az3: client.rack only, KIP-392) produce and read a
// six-partition topic. Every acknowledged record is read back exactly once, in order, by
// every zone's group, and the data bytes that cross zones (the brokers' own meters,
// weir_net_bytes_total) stay within 1% of the data bytes produced and consumed: first in a
// steady run and through a partition moved to another zone, then through a broker killed
// with SIGKILL and started again. TestZonesTransactional does the same with transactional
// producers and read_committed groups.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var zoneNames = []string{"az1", "az2", "az3"}

// zoneBytes are weir_net_bytes_total counters summed over brokers: (src, dst, kind) -> bytes.
type zoneBytes map[[3]string]float64

var netBytesLine = regexp.MustCompile(`^weir_net_bytes_total\{src_zone="([^"]*)",dst_zone="([^"]*)",kind="([^"]*)"\} ([0-9.e+]+)$`)

// Zone routing's own counters, kept as (name, "", "") entries.
var zoneCounterLine = regexp.MustCompile(`^weir_(handoff_entries|zone_remote_fetches|zone_forwarded_partitions)_total ([0-9.e+]+)$`)

func scrapeZoneBytes(t *testing.T, b *Broker) zoneBytes {
	t.Helper()
	out := zoneBytes{}
	r, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://127.0.0.1:" + strconv.Itoa(b.Port2) + "/metrics")
	if err != nil {
		t.Fatalf("metrics of broker %d: %v", b.NodeID, err)
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := netBytesLine.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[4], 64)
			out[[3]string{m[1], m[2], m[3]}] += v
		} else if m := zoneCounterLine.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[[3]string{m[1], "", ""}] += v
		}
	}
	return out
}

func (z zoneBytes) add(o zoneBytes, sign float64) {
	for k, v := range o {
		z[k] += sign * v
	}
}

// crossing lists the data bytes that crossed zones.
func (z zoneBytes) crossing() string {
	var parts []string
	for k, v := range z {
		if (k[2] == "produce" || k[2] == "fetch") && (k[0] != k[1] || k[0] == "unknown") && v > 0 {
			parts = append(parts, fmt.Sprintf("%s->%s %s: %.0f", k[0], k[1], k[2], v))
		}
	}
	return strings.Join(parts, "; ")
}

// dataRatio: data bytes (produce, fetch) whose source and destination zones differ (an unknown
// zone counts as crossing), over all data bytes; and the totals.
func (z zoneBytes) dataRatio() (float64, float64, float64) {
	var cross, all float64
	for k, v := range z {
		if k[2] != "produce" && k[2] != "fetch" {
			continue
		}
		all += v
		if k[0] != k[1] || k[0] == "unknown" {
			cross += v
		}
	}
	if all == 0 {
		return 0, 0, 0
	}
	return cross / all, cross, all
}

func (z zoneBytes) String() string {
	var parts []string
	for k, v := range z {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s->%s %s: %.0f", k[0], k[1], k[2], v))
		}
	}
	return strings.Join(parts, "; ")
}

// zoneConsumer reads the topic from the start in the zone's group and keeps every record.
type zoneConsumer struct {
	zone string
	cl   *kgo.Client
	mu   sync.Mutex
	got  map[int32][]*kgo.Record
	stop context.CancelFunc
	done chan struct{}
}

func startZoneConsumer(t *testing.T, c *Cluster, zone, topic string, byRack bool, extra ...kgo.Opt) *zoneConsumer {
	id := "zones-consumer,weir_az=" + zone
	opts := append([]kgo.Opt{
		kgo.ConsumerGroup(unique("zones-" + zone)),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}, extra...)
	if byRack {
		// KIP-392: the zone from the fetches' RackId, with a client id that says nothing.
		id = "zones-consumer-" + zone
		opts = append(opts, kgo.Rack(zone))
	}
	zc := &zoneConsumer{zone: zone, got: map[int32][]*kgo.Record{}, done: make(chan struct{})}
	zc.cl = newClient(t, c, append(opts, kgo.ClientID(id))...)
	ctx, cancel := context.WithCancel(context.Background())
	zc.stop = cancel
	go func() {
		defer close(zc.done)
		for ctx.Err() == nil {
			fs := zc.cl.PollFetches(ctx)
			zc.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { zc.got[r.Partition] = append(zc.got[r.Partition], r) })
			zc.mu.Unlock()
		}
	}()
	return zc
}

func (zc *zoneConsumer) count() int {
	zc.mu.Lock()
	defer zc.mu.Unlock()
	n := 0
	for _, rs := range zc.got {
		n += len(rs)
	}
	return n
}

// check: the records read are exactly the acknowledged ones, once each, in offset order.
// A group member may re-read records after a rebalance (at-least-once between commits):
// repeats of an offset already read are allowed only as a re-read of the same record.
func (zc *zoneConsumer) check(t *testing.T, acked map[int32]map[int64]string) {
	t.Helper()
	zc.mu.Lock()
	defer zc.mu.Unlock()
	for p, want := range acked {
		seen := map[int64]string{}
		for _, r := range zc.got[p] {
			v := string(r.Value)
			if prev, ok := seen[r.Offset]; ok && prev != v {
				t.Fatalf("zone %s group: partition %d offset %d read as %q and %q", zc.zone, p, r.Offset, prev, v)
			}
			seen[r.Offset] = v
		}
		for off, v := range want {
			if seen[off] != v {
				t.Fatalf("zone %s group: partition %d offset %d is %q, acknowledged as %q", zc.zone, p, off, seen[off], v)
			}
		}
		if len(seen) != len(want) {
			t.Fatalf("zone %s group: partition %d has %d records, %d acknowledged", zc.zone, p, len(seen), len(want))
		}
		// Offsets are contiguous from 0: nothing was lost or written twice.
		for off := int64(0); off < int64(len(want)); off++ {
			if _, ok := want[off]; !ok {
				t.Fatalf("partition %d: offset %d missing from the acknowledged records (%d acknowledged)", p, off, len(want))
			}
		}
	}
}

// produceZones produces n records from each zone's producer (values "zone#i", keys spread
// over the partitions) and records every acknowledgement. It checks per-key order: a later
// record of a key never lands at a lower offset.
func produceZones(t *testing.T, producers map[string]*kgo.Client, topic string, first, n int, acked map[int32]map[int64]string, mu *sync.Mutex) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(producers))
	for zone, cl := range producers {
		wg.Add(1)
		go func(zone string, cl *kgo.Client) {
			defer wg.Done()
			rs := make([]*kgo.Record, 0, n)
			for i := first; i < first+n; i++ {
				rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("%s-key-%02d", zone, i%24)),
					Value: []byte(fmt.Sprintf("%s#%06d", zone, i))})
			}
			res := cl.ProduceSync(ctxFor(t, 120*time.Second), rs...)
			if err := res.FirstErr(); err != nil {
				errs <- fmt.Errorf("zone %s: %w", zone, err)
				return
			}
			last := map[string]int64{}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range res {
				rec := r.Record
				if acked[rec.Partition] == nil {
					acked[rec.Partition] = map[int64]string{}
				}
				acked[rec.Partition][rec.Offset] = string(rec.Value)
				k := string(rec.Key) + "/" + strconv.Itoa(int(rec.Partition))
				if prev, ok := last[k]; ok && rec.Offset <= prev {
					errs <- fmt.Errorf("zone %s: key %s out of order (%d after %d)", zone, rec.Key, rec.Offset, prev)
					return
				}
				last[k] = rec.Offset
			}
		}(zone, cl)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// produceWhile produces from every zone in rounds of `batch` records (values numbered on from
// *next) until `until` is closed, so that records are in flight through whatever happens
// meanwhile; returns the number of records each zone sent.
func produceWhile(t *testing.T, producers map[string]*kgo.Client, topic string, next *int, batch int, until <-chan struct{}, acked map[int32]map[int64]string, mu *sync.Mutex) int {
	t.Helper()
	rounds := 0
	for {
		select {
		case <-until:
			return rounds * batch
		default:
		}
		produceZones(t, producers, topic, *next, batch, acked, mu)
		*next += batch
		rounds++
		time.Sleep(10 * time.Millisecond)
	}
}

// sumZoneBytes scrapes the brokers' meters and adds them up.
func sumZoneBytes(t *testing.T, brokers []*Broker) zoneBytes {
	t.Helper()
	z := zoneBytes{}
	for _, b := range brokers {
		z.add(scrapeZoneBytes(t, b), 1)
	}
	return z
}

// otherZoneTarget returns topic-p's leader and the first broker of another zone.
func otherZoneTarget(t *testing.T, c *Cluster, adm *kadm.Client, topic string, p int32) (int32, int32) {
	t.Helper()
	meta, err := adm.Metadata(ctxFor(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	leader := meta.Topics[topic].Partitions[p].Leader
	if leader < 1 || int(leader) > len(c.Brokers) {
		t.Fatalf("%s/%d: leader %d", topic, p, leader)
	}
	for _, b := range c.Brokers {
		if b.Zone != c.Brokers[leader-1].Zone {
			return leader, b.NodeID
		}
	}
	t.Fatalf("no broker outside zone %s", c.Brokers[leader-1].Zone)
	return 0, 0
}

// movePartition assigns topic-p to broker `target` alone (safe outside the test goroutine).
func movePartition(t *testing.T, adm *kadm.Client, topic string, p, target int32) error {
	req := kadm.AlterPartitionAssignmentsReq{}
	req.Assign(topic, p, []int32{target})
	resp, err := adm.AlterPartitionAssignments(ctxFor(t, 20*time.Second), req)
	if err == nil {
		err = resp.Error()
	}
	return err
}

// startZonedCluster starts n brokers over the three zones for one test and closes them when it
// ends (broker log tails in the output if it failed); the test skips outside
// WEIR_COMPAT_TARGET=cluster.
func startZonedCluster(t *testing.T, name string, n int) *Cluster {
	t.Helper()
	if cluster, _ := clusterMode(); !cluster {
		t.Skip("zones run with WEIR_COMPAT_TARGET=cluster")
	}
	c, err := StartZonedCluster(name, n, zoneNames)
	if err != nil {
		t.Fatalf("start the zoned cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker log tails:\n%s", c.LogTail(30))
		}
		if err := c.Close(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

func TestZones(t *testing.T) {
	c := startZonedCluster(t, "zones", 6)
	topic := unique("zones")
	adm := newAdmin(t, c)
	createTopic(t, adm, topic, 6)

	producers := map[string]*kgo.Client{}
	for _, z := range zoneNames {
		producers[z] = newProducer(t, c, kgo.ClientID("zones-producer,weir_az="+z))
	}
	var consumers []*zoneConsumer
	for _, z := range zoneNames {
		consumers = append(consumers, startZoneConsumer(t, c, z, topic, z == "az3"))
	}
	defer func() {
		for _, zc := range consumers {
			zc.stop()
			<-zc.done
		}
	}()
	acked := map[int32]map[int64]string{}
	var mu sync.Mutex
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, m := range acked {
			n += len(m)
		}
		return n
	}
	waitRead := func(phase string) {
		t.Helper()
		want := total()
		deadline := time.Now().Add(90 * time.Second)
		for _, zc := range consumers {
			for zc.count() < want {
				if time.Now().After(deadline) {
					t.Fatalf("%s: zone %s group read %d of %d records", phase, zc.zone, zc.count(), want)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		for _, zc := range consumers {
			zc.check(t, acked)
		}
	}
	sumBytes := func(brokers []*Broker) zoneBytes { return sumZoneBytes(t, brokers) }

	// Steady: 2,000 records from each zone.
	produceZones(t, producers, topic, 0, 2000, acked, &mu)
	waitRead("steady")
	steady := sumBytes(c.Brokers)
	ratio, cross, all := steady.dataRatio()
	t.Logf("steady: %d records; cross-zone data bytes %.0f of %.0f (%.3f%%): %s", total(), cross, all, 100*ratio, steady.crossing())
	if all == 0 || ratio > 0.01 {
		t.Fatalf("steady: cross-zone data bytes %.3f%% of data bytes (over 1%%): %s", 100*ratio, steady)
	}
	// The zone paths were taken: produces forwarded through hand-off objects, fetches served
	// for leaders in other zones (without them, two thirds of the bytes would cross).
	forwarded := steady[[3]string{"handoff_entries", "", ""}]
	remote := steady[[3]string{"zone_remote_fetches", "", ""}]
	t.Logf("steady: %.0f produces forwarded through object storage, %.0f partition fetches served for another zone's leader", forwarded, remote)
	if forwarded == 0 || remote == 0 {
		t.Fatalf("zone routing was not used: %.0f forwarded, %.0f remote fetches", forwarded, remote)
	}

	// A leader moved to another zone while records flow.
	leader0, target := otherZoneTarget(t, c, adm, topic, 0)
	moved := make(chan error, 1)
	moveDone := make(chan struct{})
	go func() {
		defer close(moveDone)
		time.Sleep(500 * time.Millisecond)
		moved <- movePartition(t, adm, topic, 0, target)
		time.Sleep(1 * time.Second) // records keep flowing after the move
	}()
	next := 2000
	sent := produceWhile(t, producers, topic, &next, 100, moveDone, acked, &mu)
	if err := <-moved; err != nil {
		t.Fatalf("moving partition 0 to broker %d: %v", target, err)
	}
	t.Logf("move: %d records from each zone while partition 0 moved", sent)
	waitRead("move")
	afterMove := sumBytes(c.Brokers)
	ratio, cross, all = afterMove.dataRatio()
	t.Logf("after moving partition 0 from broker %d to %d: %d records; cross-zone data bytes %.0f of %.0f (%.3f%%): %s", leader0, target, total(), cross, all, 100*ratio, afterMove.crossing())
	if ratio > 0.01 {
		t.Fatalf("move: cross-zone data bytes %.3f%% (over 1%%): %s", 100*ratio, afterMove)
	}

	// An in-zone broker killed (node 5, zone az2) while records flow, then started again.
	// Its meters die with it: the run's bytes are the survivors' since the last scrape, plus
	// the restarted broker's.
	victim := c.Brokers[4]
	survivors := append(append([]*Broker{}, c.Brokers[:4]...), c.Brokers[5])
	before := sumBytes(survivors)
	killed := make(chan error, 1)
	killDone := make(chan struct{})
	go func() {
		defer close(killDone)
		time.Sleep(500 * time.Millisecond)
		if err := c.Kill(4); err != nil {
			killed <- err
			return
		}
		// Down past its session: its zone's clients move to the zone's other broker.
		time.Sleep(5 * time.Second)
		killed <- c.Start(4)
		time.Sleep(1 * time.Second)
	}()
	sent = produceWhile(t, producers, topic, &next, 100, killDone, acked, &mu)
	if err := <-killed; err != nil {
		t.Fatal(err)
	}
	t.Logf("kill: %d records from each zone while broker %d was killed, down and started again", sent, victim.NodeID)
	waitRead("kill")
	run := sumBytes(survivors)
	run.add(before, -1)
	run.add(scrapeZoneBytes(t, victim), 1)
	ratio, cross, all = run.dataRatio()
	t.Logf("through a kill -9 of broker %d: %d records in all; cross-zone data bytes %.0f of %.0f (%.3f%%): %s", victim.NodeID, total(), cross, all, 100*ratio, run.crossing())
	if ratio > 0.01 {
		t.Fatalf("kill: cross-zone data bytes %.3f%% (over 1%%): %s", 100*ratio, run)
	}
}

// txnOutcome is how a transaction ended, as its producer saw it.
type txnOutcome int

const (
	txnCommitted txnOutcome = iota
	// Ended with TryAbort (asked for, or after a failed produce), or a commit never sent: none
	// of its records may ever be read under read_committed.
	txnAborted
	// EndTransaction(TryCommit) answered an error: committed or aborted, all or nothing.
	txnUnknown
)

func (o txnOutcome) String() string {
	return [...]string{"committed", "aborted", "unknown"}[o]
}

// zoneTxn is one transaction of a zone's producer and the records it sent (acked[i]: record
// i was acknowledged, its Partition and Offset are set).
type zoneTxn struct {
	zone    string
	seq     int
	outcome txnOutcome
	recs    []*kgo.Record
	acked   []bool
	began   time.Time
	ended   time.Time
}

func (tx *zoneTxn) String() string {
	return fmt.Sprintf("zone %s transaction %d (%s, %d records, %s to %s)", tx.zone, tx.seq, tx.outcome, len(tx.recs),
		tx.began.Format(clock), tx.ended.Format(clock))
}

// clock is how the test logs times, to set beside the brokers' logs (UTC).
const clock = "15:04:05.000"

// txnProducer is a zone's transactional producer: transactions of 50 records over the
// partitions (manual partitioner: record i to partition i%partitions), every third ended
// with TryAbort, the others with TryCommit.
type txnProducer struct {
	t          *testing.T
	c          *Cluster
	ctx        context.Context // canceled if the test gives up
	zone       string
	topic      string
	id         string
	partitions int32
	cl         *kgo.Client
	txns       []*zoneTxn
	commits    atomic.Int64 // committed transactions so far (read by the test goroutine)
	exited     atomic.Bool  // run returned

	retried   int           // meant to commit, aborted after an abortable error instead (the next one goes on)
	unknown   int           // commit answered an error
	abortErrs int           // TryAbort answered an error
	renewed   int           // clients replaced by a new one with the same transactional id (it fences the old)
	longest   time.Duration // the longest transaction, begin to end
}

// renew replaces the client: the new one's InitProducerId bumps the epoch, which completes or
// aborts whatever the old one left open.
func (tp *txnProducer) renew() error {
	if tp.cl != nil {
		tp.cl.Close()
		tp.renewed++
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(tp.c.Seeds()...),
		kgo.RequestRetries(20),
		kgo.RetryTimeout(30*time.Second),
		kgo.ClientID("zones-txn-producer,weir_az="+tp.zone),
		kgo.TransactionalID(tp.id),
		kgo.TransactionTimeout(20*time.Second),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		return fmt.Errorf("zone %s: new transactional client: %w", tp.zone, err)
	}
	tp.cl = cl
	return nil
}

// txn runs one transaction of rs and records its outcome; an error is one the producer cannot
// go on after.
func (tp *txnProducer) txn(seq int, rs []*kgo.Record, commit bool) (*zoneTxn, error) {
	if err := tp.cl.BeginTransaction(); err != nil {
		tp.t.Logf("zone %s: begin transaction %d: %v; a new client", tp.zone, seq, err)
		if err := tp.renew(); err != nil {
			return nil, err
		}
		if err := tp.cl.BeginTransaction(); err != nil {
			return nil, fmt.Errorf("zone %s: begin transaction %d on a new client: %w", tp.zone, seq, err)
		}
	}
	tx := &zoneTxn{zone: tp.zone, seq: seq, recs: rs, acked: make([]bool, len(rs)), began: time.Now().UTC()}
	tp.txns = append(tp.txns, tx)
	defer func() {
		tx.ended = time.Now().UTC()
		tp.longest = max(tp.longest, tx.ended.Sub(tx.began))
	}()
	var (
		mu      sync.Mutex
		failed  int
		prodErr error
		wg      sync.WaitGroup
	)
	wg.Add(len(rs))
	for i, r := range rs {
		tp.cl.Produce(tp.ctx, r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if prodErr == nil {
					prodErr = err
				}
				return
			}
			tx.acked[i] = true
		})
	}
	fctx, fcancel := context.WithTimeout(tp.ctx, 60*time.Second)
	defer fcancel()
	if err := tp.cl.Flush(fctx); err != nil {
		// What is still buffered fails; those records are aborted with the transaction.
		actx, acancel := context.WithTimeout(tp.ctx, 30*time.Second)
		_ = tp.cl.AbortBufferedRecords(actx)
		acancel()
		mu.Lock()
		if prodErr == nil {
			prodErr = fmt.Errorf("flush: %w", err)
		}
		mu.Unlock()
	}
	wg.Wait()
	end := kgo.TransactionEndTry(commit && prodErr == nil)
	ctx, cancel := context.WithTimeout(tp.ctx, 60*time.Second)
	defer cancel()
	if prodErr != nil {
		tp.t.Logf("zone %s: transaction %d: %d of %d produces failed (first: %v); aborting it", tp.zone, seq, failed, len(rs), prodErr)
	}
	err := tp.cl.EndTransaction(ctx, end)
	switch {
	case err == nil && end == kgo.TryCommit:
		tx.outcome = txnCommitted
		tp.commits.Add(1)
	case err == nil:
		tx.outcome = txnAborted
		if commit {
			tp.retried++
		}
	case end == kgo.TryAbort:
		// No commit was asked for: the abort, or the fencing of a new epoch, ends it.
		tx.outcome = txnAborted
		tp.abortErrs++
		if commit {
			tp.retried++
		}
		tp.t.Logf("zone %s: abort of transaction %d: %v", tp.zone, seq, err)
	case errors.Is(err, kerr.OperationNotAttempted):
		// franz-go did not send the commit (its producer id had failed).
		tx.outcome = txnAborted
		tp.retried++
		tp.t.Logf("zone %s: commit of transaction %d not attempted: %v", tp.zone, seq, err)
	default:
		tx.outcome = txnUnknown
		tp.unknown++
		tp.t.Logf("zone %s: commit of transaction %d: %v; outcome unknown", tp.zone, seq, err)
	}
	if err != nil {
		// franz-go's recovery: TryAbort (it reloads the producer id, which fences anything
		// still open); failing that, a new client.
		if err := tp.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			tp.t.Logf("zone %s: recovering after transaction %d: %v; a new client", tp.zone, seq, err)
			return tx, tp.renew()
		}
	}
	return tx, nil
}

// run runs transactions until stop is closed, then ends with a committed transaction of one
// record in every partition: after it, every transaction of the zone is decided, and a
// read_committed reader that read it in a partition read everything of the zone before it.
func (tp *txnProducer) run(stop <-chan struct{}) error {
	defer func() { tp.cl.Close() }()
	seq := 0
	for ; ; seq++ {
		select {
		case <-stop:
		default:
			rs := make([]*kgo.Record, 0, 50)
			for i := 0; i < 50; i++ {
				rs = append(rs, &kgo.Record{Topic: tp.topic, Partition: int32(i) % tp.partitions,
					Value: []byte(fmt.Sprintf("%s#%05d#%02d", tp.zone, seq, i))})
			}
			if _, err := tp.txn(seq, rs, seq%3 != 2); err != nil {
				return err
			}
			continue
		}
		break
	}
	for attempt := 0; attempt < 5; attempt, seq = attempt+1, seq+1 {
		var rs []*kgo.Record
		for p := int32(0); p < tp.partitions; p++ {
			rs = append(rs, &kgo.Record{Topic: tp.topic, Partition: p,
				Value: []byte(fmt.Sprintf("%s#%05d#end%d", tp.zone, seq, p))})
		}
		tx, err := tp.txn(seq, rs, true)
		if err != nil {
			return err
		}
		if tx.outcome == txnCommitted {
			return nil
		}
	}
	return fmt.Errorf("zone %s: no closing transaction committed in 5 attempts", tp.zone)
}

// txnLedger is what the producers of every zone did, by acknowledged offset.
type txnLedger struct {
	committed map[int32]map[int64]string   // partition -> offset -> value
	unknown   map[int32]map[int64]*zoneTxn // records of transactions of unknown outcome
	aborted   map[string]*zoneTxn          // values of aborted transactions
	where     map[string][2]int64          // value -> acknowledged (partition, offset)
	unknowns  []*zoneTxn
	count     int // committed records
}

// newTxnLedger checks what the producers saw (no offset acknowledged twice; in every
// partition, each zone's committed records at rising offsets in the order they were sent)
// and indexes it.
func newTxnLedger(t *testing.T, producers []*txnProducer) *txnLedger {
	t.Helper()
	l := &txnLedger{committed: map[int32]map[int64]string{}, unknown: map[int32]map[int64]*zoneTxn{},
		aborted: map[string]*zoneTxn{}, where: map[string][2]int64{}}
	taken := map[[2]int64]string{}
	for _, tp := range producers {
		for _, tx := range tp.txns {
			if tx.outcome == txnUnknown {
				l.unknowns = append(l.unknowns, tx)
			}
			for i, r := range tx.recs {
				v := string(r.Value)
				if tx.outcome == txnAborted {
					l.aborted[v] = tx
				}
				if !tx.acked[i] {
					continue
				}
				at := [2]int64{int64(r.Partition), r.Offset}
				if prev, ok := taken[at]; ok {
					t.Fatalf("partition %d offset %d acknowledged for %q and %q", r.Partition, r.Offset, prev, v)
				}
				taken[at] = v
				l.where[v] = at
				switch tx.outcome {
				case txnCommitted:
					if l.committed[r.Partition] == nil {
						l.committed[r.Partition] = map[int64]string{}
					}
					l.committed[r.Partition][r.Offset] = v
					l.count++
				case txnUnknown:
					if l.unknown[r.Partition] == nil {
						l.unknown[r.Partition] = map[int64]*zoneTxn{}
					}
					l.unknown[r.Partition][r.Offset] = tx
				}
			}
		}
	}
	for p, m := range l.committed {
		offs := make([]int64, 0, len(m))
		for off := range m {
			offs = append(offs, off)
		}
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		last := map[string]string{}
		for _, off := range offs {
			v := m[off]
			zone := strings.SplitN(v, "#", 2)[0]
			if prev, ok := last[zone]; ok && v <= prev {
				t.Fatalf("partition %d: %s committed at offset %d, after %s (sent later)", p, v, off, prev)
			}
			last[zone] = v
		}
	}
	return l
}

// readCommitted is how many of the committed records the consumer has read.
func (zc *zoneConsumer) readCommitted(l *txnLedger) int {
	zc.mu.Lock()
	defer zc.mu.Unlock()
	n := 0
	for p, rs := range zc.got {
		seen := map[int64]bool{}
		for _, r := range rs {
			if !seen[r.Offset] && l.committed[p][r.Offset] == string(r.Value) {
				seen[r.Offset] = true
				n++
			}
		}
	}
	return n
}

// checkTransactional: the consumer read every committed record at its acknowledged offset,
// in offset order, and nothing else but whole transactions of unknown outcome: no record of
// an aborted one. A group member may read again after a rebalance: a repeat of an offset is
// allowed only as the same record, and is counted. Returns the repeats and the transactions
// of unknown outcome it read.
func (zc *zoneConsumer) checkTransactional(t *testing.T, l *txnLedger) (int, int) {
	t.Helper()
	zc.mu.Lock()
	defer zc.mu.Unlock()
	repeats := 0
	fromUnknown := map[*zoneTxn]int{}
	seen := map[int32]map[int64]string{}
	for p, rs := range zc.got {
		seen[p] = map[int64]string{}
		last := int64(-1)
		for _, r := range rs {
			v := string(r.Value)
			if prev, ok := seen[p][r.Offset]; ok {
				if prev != v {
					t.Fatalf("zone %s: partition %d offset %d read as %q and %q", zc.zone, p, r.Offset, prev, v)
				}
				repeats++
				continue
			}
			if r.Offset < last {
				t.Fatalf("zone %s: partition %d: %q at offset %d read after offset %d", zc.zone, p, v, r.Offset, last)
			}
			last = r.Offset
			seen[p][r.Offset] = v
			switch {
			case l.committed[p][r.Offset] == v:
			case l.unknown[p][r.Offset] != nil && l.where[v] == [2]int64{int64(p), r.Offset}:
				fromUnknown[l.unknown[p][r.Offset]]++
			case l.aborted[v] != nil:
				t.Fatalf("zone %s: %q read at partition %d offset %d: a record of %s", zc.zone, v, p, r.Offset, l.aborted[v])
			default:
				at, ok := l.where[v]
				t.Fatalf("zone %s: %q read at partition %d offset %d, acknowledged at %v (%v)", zc.zone, v, p, r.Offset, at, ok)
			}
		}
	}
	for p, m := range l.committed {
		for off, v := range m {
			if got, ok := seen[p][off]; !ok || got != v {
				t.Fatalf("zone %s: committed %q at partition %d offset %d not read (read: %q, %v)", zc.zone, v, p, off, got, ok)
			}
		}
	}
	for _, tx := range l.unknowns {
		n, acked := fromUnknown[tx], 0
		for _, a := range tx.acked {
			if a {
				acked++
			}
		}
		if n != 0 && n != acked {
			t.Fatalf("zone %s: %d of the %d records of %s read", zc.zone, n, acked, tx)
		}
	}
	return repeats, len(fromUnknown)
}

// TestZonesTransactional (WEIR_COMPAT_TARGET=cluster): the Go counterpart of the Python
// suite's test_transactions_stay_in_their_zone, through a partition moved to another zone and
// a broker killed. Six brokers in three zones; in each zone a franz-go transactional producer
// (zone from its client.id tag) runs transactions of 50 records over a six-partition topic,
// every third aborted, and a read_committed consumer group (az3 by client.rack) reads it.
// Meanwhile partition 0's leader moves to another zone, then an in-zone broker is killed with
// SIGKILL and started again. Each zone's group reads every committed record once, at its
// acknowledged offset and in order, no aborted one, and a transaction whose commit answered
// an error all or nothing; the data bytes that cross zones stay within 1%.
func TestZonesTransactional(t *testing.T) {
	const partitions = 6
	c := startZonedCluster(t, "zones-txn", 6)
	topic := unique("zones-txn")
	adm := newAdmin(t, c)
	createTopic(t, adm, topic, partitions)
	start := sumZoneBytes(t, c.Brokers)

	var consumers []*zoneConsumer
	for _, z := range zoneNames {
		consumers = append(consumers, startZoneConsumer(t, c, z, topic, z == "az3", kgo.FetchIsolationLevel(kgo.ReadCommitted())))
	}
	defer func() {
		for _, zc := range consumers {
			zc.stop()
			<-zc.done
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	stop := make(chan struct{})
	var producers []*txnProducer
	errs := make(chan error, len(zoneNames))
	for _, z := range zoneNames {
		tp := &txnProducer{t: t, c: c, ctx: ctx, zone: z, topic: topic, id: unique("zones-txn-" + z), partitions: partitions}
		if err := tp.renew(); err != nil {
			t.Fatal(err)
		}
		producers = append(producers, tp)
	}
	for _, tp := range producers {
		go func() {
			err := tp.run(stop)
			tp.exited.Store(true)
			errs <- err
		}()
	}
	var stopOnce sync.Once
	running := len(producers)
	finish := func() {
		stopOnce.Do(func() { close(stop) })
		for ; running > 0; running-- {
			if err := <-errs; err != nil {
				cancel()
				t.Errorf("producer: %v", err)
			}
		}
		cancel()
	}
	defer func() {
		cancel() // the test failed: the producers give up at once
		finish()
	}()
	// progress waits until every producer committed n more transactions.
	progress := func(what string, n int64) {
		t.Helper()
		want := make([]int64, len(producers))
		for i, tp := range producers {
			want[i] = tp.commits.Load() + n
		}
		deadline := time.Now().Add(60 * time.Second)
		for i, tp := range producers {
			for tp.commits.Load() < want[i] {
				if tp.exited.Load() {
					t.Fatalf("%s: zone %s producer gave up", what, tp.zone)
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: zone %s producer committed %d transactions, waiting for %d", what, tp.zone, tp.commits.Load(), want[i])
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	progress("start", 5)
	leader0, target := otherZoneTarget(t, c, adm, topic, 0)
	moveAt := time.Now().UTC()
	if err := movePartition(t, adm, topic, 0, target); err != nil {
		t.Fatalf("moving partition 0 to broker %d: %v", target, err)
	}
	t.Logf("partition 0 moved from broker %d (%s) to broker %d (%s), %s to %s", leader0, c.Brokers[leader0-1].Zone, target,
		c.Brokers[target-1].Zone, moveAt.Format(clock), time.Now().UTC().Format(clock))
	progress("after the move", 5)

	// An in-zone broker killed (node 5, zone az2) and started again; its meters die with it:
	// the bytes it counted until just before are added to the end's.
	victim := c.Brokers[4]
	victimBefore := scrapeZoneBytes(t, victim)
	commits := func() []string {
		var out []string
		for _, tp := range producers {
			out = append(out, fmt.Sprintf("%s %d", tp.zone, tp.commits.Load()))
		}
		return out
	}
	atKill := commits()
	killAt := time.Now().UTC()
	if err := c.Kill(4); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // down past its session: its zone's clients move to the zone's other broker
	atStart := commits()
	if err := c.Start(4); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker %d (%s) killed at %s, down 5s and started again; transactions committed by then: %v at the kill, %v at the restart",
		victim.NodeID, victim.Zone, killAt.Format(clock), atKill, atStart)
	progress("after the restart", 5)
	finish()
	if t.Failed() {
		t.FailNow()
	}

	l := newTxnLedger(t, producers)
	for _, tp := range producers {
		var committed, aborted, records int
		for _, tx := range tp.txns {
			switch tx.outcome {
			case txnCommitted:
				committed++
				records += len(tx.recs)
			case txnAborted:
				aborted++
			}
		}
		t.Logf("zone %s: %d transactions: %d committed (%d records), %d aborted; %d meant to commit aborted after an error, %d of unknown outcome, %d aborts answered an error, %d new clients; the longest took %v",
			tp.zone, len(tp.txns), committed, records, aborted, tp.retried, tp.unknown, tp.abortErrs, tp.renewed, tp.longest.Round(time.Millisecond))
		if committed < 15 || aborted < 5 {
			t.Fatalf("zone %s: %d transactions committed and %d aborted, too few to tell", tp.zone, committed, aborted)
		}
	}

	deadline := time.Now().Add(90 * time.Second)
	for _, zc := range consumers {
		for zc.readCommitted(l) < l.count {
			if time.Now().After(deadline) {
				t.Fatalf("zone %s group read %d of the %d committed records (%d records in all)", zc.zone, zc.readCommitted(l), l.count, zc.count())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, zc := range consumers {
		repeats, unknown := zc.checkTransactional(t, l)
		t.Logf("zone %s group: read the %d committed records, none aborted, %d of %d transactions of unknown outcome whole; %d repeats after a rebalance",
			zc.zone, l.count, unknown, len(l.unknowns), repeats)
	}

	run := sumZoneBytes(t, c.Brokers)
	run.add(victimBefore, 1)
	run.add(start, -1)
	ratio, cross, all := run.dataRatio()
	forwarded := run[[3]string{"handoff_entries", "", ""}]
	remote := run[[3]string{"zone_remote_fetches", "", ""}]
	t.Logf("transactions in three zones, through a move and a kill -9: %d committed records; cross-zone data bytes %.0f of %.0f (%.3f%%): %s; %.0f produces forwarded through object storage, %.0f partition fetches served for another zone's leader",
		l.count, cross, all, 100*ratio, run.crossing(), forwarded, remote)
	if forwarded == 0 || remote == 0 {
		t.Fatalf("zone routing was not used: %.0f forwarded, %.0f remote fetches", forwarded, remote)
	}
	if all == 0 || ratio > 0.01 {
		t.Fatalf("cross-zone data bytes %.3f%% of data bytes (over 1%%): %s", 100*ratio, run)
	}
}

// fetchAt sends one Fetch for topic-p at `offset` straight to broker `node`, with the client id
// that places the caller in `zone`, and returns the partition's error code and high watermark.
func fetchAt(t *testing.T, c *Cluster, zone string, node int32, topic string, id [16]byte, p int32, offset int64) (int16, int64) {
	t.Helper()
	cl := newClient(t, c, kgo.ClientID("zones-raw,weir_az="+zone))
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	ft.TopicID = id
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition = p
	fp.FetchOffset = offset
	fp.PartitionMaxBytes = 1 << 20
	fp.CurrentLeaderEpoch = -1
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	resp, err := req.RequestWith(ctxFor(t, 10*time.Second), cl.Broker(int(node)))
	if err != nil {
		t.Fatalf("fetch from broker %d: %v", node, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch from broker %d: %+v", node, resp)
	}
	r := resp.Topics[0].Partitions[0]
	return r.ErrorCode, r.HighWatermark
}

// TestZonesFetchBeyondAStaleWatermark (WEIR_COMPAT_TARGET=cluster): a broker serving a
// partition to its zone learns the leader's high watermark through the offsets feed, which
// may be a little late (a watermark that moved alone is held up to 100 ms). A fetch at the
// leader's new high watermark, sent there right after a produce to the leader, must wait for
// data, not get OFFSET_OUT_OF_RANGE (which resets a consumer's position).
func TestZonesFetchBeyondAStaleWatermark(t *testing.T) {
	c := startZonedCluster(t, "zones-watermark", 3)
	topic := unique("zones-watermark")
	adm := newAdmin(t, c)
	createTopic(t, adm, topic, 1)
	meta, err := adm.Metadata(ctxFor(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	td := meta.Topics[topic]
	leader := td.Partitions[0].Leader
	leaderZone := c.Brokers[leader-1].Zone
	var other *Broker
	for _, b := range c.Brokers {
		if b.Zone != leaderZone {
			other = b
			break
		}
	}
	producer := newProducer(t, c, kgo.ClientID("zones-raw-producer,weir_az="+leaderZone))
	// The other zone's broker learns of the new partition's leader a moment after the topic is
	// created (it answers NOT_LEADER_OR_FOLLOWER until then, which a client retries after a
	// metadata refresh): the rounds start once it knows.
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _ := fetchAt(t, c, other.Zone, other.NodeID, topic, td.ID, 0, 0)
		if code != 6 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for round := 0; round < 5; round++ {
		// The zone's broker subscribes to the partition's offsets and learns them.
		if code, _ := fetchAt(t, c, other.Zone, other.NodeID, topic, td.ID, 0, 0); code != 0 {
			t.Fatalf("round %d: first fetch through broker %d: error %d", round, other.NodeID, code)
		}
		rs := keyedRecords(topic, round*50, 50, 5)
		for _, r := range rs {
			r.Partition = 0
		}
		produceAll(t, producer, rs)
		end := rs[len(rs)-1].Offset + 1
		code, hw := fetchAt(t, c, other.Zone, other.NodeID, topic, td.ID, 0, end)
		if code != 0 {
			t.Fatalf("round %d: fetch at the leader's high watermark %d through broker %d: error %d (high watermark there %d)", round, end, other.NodeID, code, hw)
		}
		if hw < end {
			t.Fatalf("round %d: high watermark %d through broker %d, below the leader's %d", round, hw, other.NodeID, end)
		}
	}
}
