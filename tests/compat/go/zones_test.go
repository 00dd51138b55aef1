package compat

// TestZones (WEIR_COMPAT_TARGET=cluster): six brokers in three zones on one PostgreSQL and one
// s3s-fs. In each zone an idempotent franz-go producer (zone from its client.id tag) and a
// consumer group (az1, az2: client.id tag; az3: client.rack only, KIP-392) produce and read a
// six-partition topic. Every acknowledged record is read back exactly once, in order, by
// every zone's group, and the data bytes that cross zones (the brokers' own meters,
// weir_net_bytes_total) stay within 1% of the data bytes produced and consumed: first in a
// steady run and through a partition moved to another zone, then through a broker killed
// with SIGKILL and started again.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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

func startZoneConsumer(t *testing.T, c *Cluster, zone, topic string, byRack bool) *zoneConsumer {
	id := "zones-consumer,weir_az=" + zone
	opts := []kgo.Opt{
		kgo.ConsumerGroup(unique("zones-" + zone)),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}
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
	sumBytes := func(brokers []*Broker) zoneBytes {
		z := zoneBytes{}
		for _, b := range brokers {
			z.add(scrapeZoneBytes(t, b), 1)
		}
		return z
	}

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
	meta, err := adm.Metadata(ctxFor(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	p0 := meta.Topics[topic].Partitions[0]
	var target int32
	for _, b := range c.Brokers {
		if b.Zone != c.Brokers[p0.Leader-1].Zone {
			target = b.NodeID
			break
		}
	}
	moved := make(chan error, 1)
	moveDone := make(chan struct{})
	go func() {
		defer close(moveDone)
		time.Sleep(500 * time.Millisecond)
		req := kadm.AlterPartitionAssignmentsReq{}
		req.Assign(topic, 0, []int32{target})
		resp, err := adm.AlterPartitionAssignments(ctxFor(t, 20*time.Second), req)
		if err == nil {
			err = resp.Error()
		}
		moved <- err
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
	t.Logf("after moving partition 0 from broker %d to %d: %d records; cross-zone data bytes %.0f of %.0f (%.3f%%): %s", p0.Leader, target, total(), cross, all, 100*ratio, afterMove.crossing())
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
