package compat

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBrokerRestart: a broker stopped with SIGTERM and started again on the same data dir
// keeps topics, configs, every record and the committed offsets; clients that stay open across
// the restart (admin, idempotent producer) carry on, and a group member resumes at the
// committed offsets.
func TestBrokerRestart(t *testing.T) {
	skipInClusterMode(t, "stops and restarts a broker process of its own")
	const partitions = 3
	b := startBroker(t, "restart")
	adm := newAdmin(t, b)
	topic, group := unique("restart-topic"), unique("restart-group")
	createTopic(t, adm, topic, partitions)
	alter(t, adm, topic, nil, kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("86400000")})
	waitConfig(t, adm, topic, "retention.ms", "86400000", func(c kadm.Config) bool { return c.MaybeValue() == "86400000" })

	prod := newProducer(t, b, kgo.DefaultProduceTopic(topic))
	sent := keyedRecords(topic, 0, 300, 12)
	produceAll(t, prod, sent)
	zero := map[int32]int64{0: 0, 1: 0, 2: 0}
	parts, end := byPartition(t, sent, zero)

	// A group member consumes and commits half of every partition, then leaves.
	half, next := map[int32]int64{}, map[int32]int64{}
	for p, n := range end {
		half[p], next[p] = n/2, 0
	}
	sink := map[int32][]*kgo.Record{}
	m := newMember(t, b, "restart-member", group, topic)
	waitUntil(t, "the member owns all partitions", []*member{m}, func() bool { return len(m.assignment()) == partitions })
	consume(t, "before restart", []*member{m}, topic, next, half, sink)
	m.close()
	if got := committedOffsets(t, adm, group, topic); !equalOffsets(got, half) {
		t.Fatalf("committed before restart: %v, want %v", got, half)
	}

	start := time.Now()
	if err := b.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("restarted in %v", time.Since(start))

	// Topic, config, offsets and records are all still there (same admin client, reconnected).
	tds, err := adm.ListTopics(ctxFor(t, 30*time.Second), topic)
	if err != nil || tds[topic].Err != nil || len(tds[topic].Partitions) != partitions {
		t.Fatalf("topic after restart: %v %v %d partitions", err, tds[topic].Err, len(tds[topic].Partitions))
	}
	for p, pd := range tds[topic].Partitions {
		if pd.Leader != 1 {
			t.Fatalf("partition %d leader %d after restart", p, pd.Leader)
		}
	}
	if c := topicConfig(t, adm, topic, "retention.ms"); c.MaybeValue() != "86400000" {
		t.Fatalf("retention.ms after restart: %q", c.MaybeValue())
	}
	l, err := adm.ListStartOffsets(ctxFor(t, 30*time.Second), topic)
	if s := listOffsets(t, l, err, topic); !equalOffsets(s, zero) {
		t.Fatalf("start offsets after restart: %v", s)
	}
	l, err = adm.ListEndOffsets(ctxFor(t, 30*time.Second), topic)
	if e := listOffsets(t, l, err, topic); !equalOffsets(e, end) {
		t.Fatalf("end offsets after restart: %v, want %v", e, end)
	}
	if got := committedOffsets(t, adm, group, topic); !equalOffsets(got, half) {
		t.Fatalf("committed after restart: %v, want %v", got, half)
	}
	for p := int32(0); p < partitions; p++ {
		got := readRange(t, b, topic, p, kgo.NewOffset().AtStart(), end[p])
		if int64(len(got)) != end[p] {
			t.Fatalf("partition %d after restart: %d records, want %d", p, len(got), end[p])
		}
		for i, r := range got {
			if r.Offset != int64(i) || string(r.Value) != string(parts[p][i].Value) || string(r.Key) != string(parts[p][i].Key) {
				t.Fatalf("partition %d record %d after restart: offset %d key %q value %q; want %q %q",
					p, i, r.Offset, r.Key, r.Value, parts[p][i].Key, parts[p][i].Value)
			}
		}
	}

	// The idempotent producer that stayed open keeps producing; offsets continue.
	more := keyedRecords(topic, 300, 60, 12)
	produceAll(t, prod, more)
	moreParts, end2 := byPartition(t, more, end)
	for p := range moreParts {
		parts[p] = append(parts[p], moreParts[p]...)
	}

	// A member of the same group resumes at the committed offsets and reads to the new end.
	m2 := newMember(t, b, "restart-member", group, topic)
	waitUntil(t, "the new member owns all partitions", []*member{m2}, func() bool { return len(m2.assignment()) == partitions })
	consume(t, "after restart", []*member{m2}, topic, next, end2, sink)
	m2.close()
	if got := committedOffsets(t, adm, group, topic); !equalOffsets(got, end2) {
		t.Fatalf("committed at the end: %v, want %v", got, end2)
	}
	for p := int32(0); p < partitions; p++ {
		if int64(len(sink[p])) != end2[p] {
			t.Fatalf("partition %d: group consumed %d records, want %d", p, len(sink[p]), end2[p])
		}
		for i, r := range sink[p] {
			if string(r.Value) != string(parts[p][i].Value) {
				t.Fatalf("partition %d offset %d: %q, want %q", p, i, r.Value, parts[p][i].Value)
			}
		}
	}
}
