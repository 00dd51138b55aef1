package compat

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProduceAndConsumerGroup: idempotent produce of 2000 keyed records to 4 partitions; a
// group of two franz-go members (cooperative-sticky) splits the partitions, consumes the first
// half of each and commits; one member leaves, the survivor takes everything over, a restarted
// member joins, and both resume exactly at the committed offsets.
func TestProduceAndConsumerGroup(t *testing.T) {
	const (
		partitions = 4
		records    = 2000
		keys       = 40
	)
	b := sharedBroker(t)
	adm := newAdmin(t, b)
	topic, group := unique("group-topic"), unique("group")
	createTopic(t, adm, topic, partitions)

	// ---- idempotent produce, acks=all ----
	prod := newProducer(t, b, kgo.DefaultProduceTopic(topic))
	sent := keyedRecords(topic, 0, records, keys)
	start := time.Now()
	produceAll(t, prod, sent)
	t.Logf("produced %d records in %v", records, time.Since(start))
	parts, end := byPartition(t, sent, map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0})
	keyPart := map[string]int32{}
	for _, r := range sent {
		if p, ok := keyPart[string(r.Key)]; ok && p != r.Partition {
			t.Fatalf("key %s went to partitions %d and %d", r.Key, p, r.Partition)
		}
		keyPart[string(r.Key)] = r.Partition
	}
	for p := int32(0); p < partitions; p++ {
		if len(parts[p]) < 2 {
			t.Fatalf("partition %d got %d records; want at least 2", p, len(parts[p]))
		}
	}
	l, err := adm.ListEndOffsets(ctxFor(t, 30*time.Second), topic)
	if got := listOffsets(t, l, err, topic); !equalOffsets(got, end) {
		t.Fatalf("end offsets %v, want %v", got, end)
	}

	half := map[int32]int64{}
	next := map[int32]int64{}
	for p, n := range end {
		half[p] = n / 2
		next[p] = 0
	}
	sink := map[int32][]*kgo.Record{}

	// ---- two members split the partitions ----
	m1 := newMember(t, b, "member-1", group, topic)
	m2 := newMember(t, b, "member-2", group, topic)
	both := []*member{m1, m2}
	waitUntil(t, "two members split all partitions", both, func() bool { return splitsAll(both, partitions) })
	checkGroup(t, adm, group, "Stable", both)

	// ---- phase A: the first half of every partition, committed ----
	consume(t, "phase A", both, topic, next, half, sink)
	if got := committedOffsets(t, adm, group, topic); !equalOffsets(got, half) {
		t.Fatalf("committed offsets after phase A: %v, want %v", got, half)
	}

	// ---- one member leaves; the survivor takes over everything ----
	m2.cl.PauseFetchTopics(topic)
	m1.close()
	survivor := []*member{m2}
	waitUntil(t, "the survivor owns all partitions", survivor, func() bool { return len(m2.assignment()) == partitions })
	checkGroup(t, adm, group, "Stable", survivor)

	// ---- a restarted member joins; both resume at the committed offsets ----
	m1b := newMember(t, b, "member-1", group, topic)
	again := []*member{m1b, m2}
	waitUntil(t, "restarted member and survivor split all partitions", again, func() bool { return splitsAll(again, partitions) })
	checkGroup(t, adm, group, "Stable", again)
	consume(t, "phase B (after restart)", again, topic, next, end, sink)
	if got := committedOffsets(t, adm, group, topic); !equalOffsets(got, end) {
		t.Fatalf("committed offsets after phase B: %v, want %v", got, end)
	}
	m1b.close()
	m2.close()

	// ---- every record once; a key's records in one partition, in produce order ----
	nextSeq := map[string]int{}
	for p := int32(0); p < partitions; p++ {
		rs := sink[p]
		if int64(len(rs)) != end[p] {
			t.Fatalf("partition %d: consumed %d records, want %d", p, len(rs), end[p])
		}
		for i, r := range rs {
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: record #%d has offset %d", p, i, r.Offset)
			}
			if want := string(parts[p][i].Value); string(r.Value) != want {
				t.Fatalf("partition %d offset %d: value %q, want %q", p, i, r.Value, want)
			}
			if keyPart[string(r.Key)] != p {
				t.Fatalf("key %s read from partition %d, produced to %d", r.Key, p, keyPart[string(r.Key)])
			}
			if r.ProducerID < 0 {
				t.Fatalf("partition %d offset %d: batch has no producer id (idempotent producer)", p, i)
			}
			v := string(r.Value)
			seq, err := strconv.Atoi(v[strings.IndexByte(v, '#')+1:])
			if err != nil {
				t.Fatalf("bad value %q", v)
			}
			if want := nextSeq[string(r.Key)]; seq != want {
				t.Fatalf("key %s: record %d after %d (not in produce order)", r.Key, seq, want-1)
			}
			nextSeq[string(r.Key)]++
		}
	}
	if len(nextSeq) != keys {
		t.Fatalf("consumed %d keys, want %d", len(nextSeq), keys)
	}
	for k, n := range nextSeq {
		if n != records/keys {
			t.Fatalf("key %s: %d records, want %d", k, n, records/keys)
		}
	}

	// ---- the group after everyone left ----
	checkGroup(t, adm, group, "Empty", nil)
	if got := committedOffsets(t, adm, group, topic); !equalOffsets(got, end) {
		t.Fatalf("committed offsets after all left: %v, want %v", got, end)
	}
	lg, err := adm.ListGroups(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatalf("list groups: %v", err)
	}
	g, ok := lg[group]
	if !ok {
		t.Fatalf("list groups does not list %s: %v", group, lg.Groups())
	}
	if g.ProtocolType != "consumer" {
		t.Fatalf("listed protocol type %q, want consumer", g.ProtocolType)
	}
	if g.State != "" && g.State != "Empty" {
		t.Fatalf("listed state %q, want Empty", g.State)
	}
}
