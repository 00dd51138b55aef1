package compat

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// baseTime is ten minutes ago in whole seconds (Kafka 4 refuses timestamps more than an hour
// ahead by default).
func baseTime() int64 { return (time.Now().UnixMilli() - 600_000) / 1000 * 1000 }

// TestListOffsetsByTime: ListOffsets with a timestamp returns the first offset whose timestamp
// is at or after it, within a batch as well as at batch boundaries, with that record's
// timestamp; past the last record kadm falls back to the end offset.
func TestListOffsetsByTime(t *testing.T) {
	b := sharedBroker(t)
	adm := newAdmin(t, b)
	topic := unique("ts-topic")
	createTopic(t, adm, topic, 2)
	prod := newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(50*time.Millisecond))
	base := baseTime()

	// p0: 12 records with timestamps base+0s..base+11s, in three produce calls (batches) of four.
	for batch := 0; batch < 3; batch++ {
		var rs []*kgo.Record
		for j := 0; j < 4; j++ {
			i := batch*4 + j
			rs = append(rs, &kgo.Record{Topic: topic, Partition: 0, Timestamp: time.UnixMilli(base + int64(i)*1000),
				Value: []byte(fmt.Sprintf("p0-%d", i))})
		}
		produceAll(t, prod, rs)
		for j, r := range rs {
			if r.Offset != int64(batch*4+j) {
				t.Fatalf("p0 record %d got offset %d", batch*4+j, r.Offset)
			}
		}
	}
	// p1: 5 records, base+0.5s, base+1.5s, ..., base+4.5s, in one batch.
	var rs []*kgo.Record
	for i := 0; i < 5; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: 1, Timestamp: time.UnixMilli(base + 500 + int64(i)*1000),
			Value: []byte(fmt.Sprintf("p1-%d", i))})
	}
	produceAll(t, prod, rs)

	type want struct{ p0, p0ts, p1, p1ts int64 }
	cases := []struct {
		at   int64
		want want
	}{
		{base - 60_000, want{0, base, 0, base + 500}},
		{base, want{0, base, 0, base + 500}},
		{base + 1, want{1, base + 1000, 0, base + 500}},
		{base + 2500, want{3, base + 3000, 2, base + 2500}}, // inside batch 1 of p0
		{base + 4000, want{4, base + 4000, 4, base + 4500}}, // first record of batch 2 of p0
		{base + 5500, want{6, base + 6000, 5, -1}},          // inside batch 2; p1 has none: end offset
		{base + 11_000, want{11, base + 11_000, 5, -1}},     // exact last of p0
		{base + 11_001, want{12, -1, 5, -1}},                // after everything: end offsets
	}
	for _, c := range cases {
		l, err := adm.ListOffsetsAfterMilli(ctxFor(t, 30*time.Second), c.at, topic)
		if err != nil {
			t.Fatalf("list offsets after %d: %v", c.at, err)
		}
		for _, pc := range []struct {
			p       int32
			off, ts int64
		}{{0, c.want.p0, c.want.p0ts}, {1, c.want.p1, c.want.p1ts}} {
			o, ok := l.Lookup(topic, pc.p)
			if !ok || o.Err != nil {
				t.Fatalf("after base%+d: partition %d: %v %v", c.at-base, pc.p, ok, o.Err)
			}
			if o.Offset != pc.off {
				t.Fatalf("after base%+d: partition %d offset %d, want %d", c.at-base, pc.p, o.Offset, pc.off)
			}
			if pc.ts >= 0 && o.Timestamp != pc.ts {
				t.Fatalf("after base%+d: partition %d timestamp base%+d, want base%+d", c.at-base, pc.p, o.Timestamp-base, pc.ts-base)
			}
		}
	}

	// The record at a found offset carries the timestamp that was produced.
	got := readRange(t, b, topic, 0, kgo.NewOffset().At(3), 4)
	if got[0].Offset != 3 || got[0].Timestamp.UnixMilli() != base+3000 || string(got[0].Value) != "p0-3" {
		t.Fatalf("record at offset 3: offset %d ts base%+d value %q", got[0].Offset, got[0].Timestamp.UnixMilli()-base, got[0].Value)
	}

	l, err := adm.ListStartOffsets(ctxFor(t, 30*time.Second), topic)
	if s := listOffsets(t, l, err, topic); !equalOffsets(s, map[int32]int64{0: 0, 1: 0}) {
		t.Fatalf("start offsets %v", s)
	}
	l, err = adm.ListEndOffsets(ctxFor(t, 30*time.Second), topic)
	if e := listOffsets(t, l, err, topic); !equalOffsets(e, map[int32]int64{0: 12, 1: 5}) {
		t.Fatalf("end offsets %v", e)
	}
}

// TestDeleteRecords: DeleteRecords moves the log start offset (also into the middle of a
// batch); consumers from the beginning start there; an offset below it resets to it; beyond
// the high watermark is OFFSET_OUT_OF_RANGE.
func TestDeleteRecords(t *testing.T) {
	b := sharedBroker(t)
	adm := newAdmin(t, b)
	topic := unique("delete-topic")
	createTopic(t, adm, topic, 2)
	prod := newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(50*time.Millisecond))
	for batch := 0; batch < 4; batch++ { // p0: four batches of 25, so 40 is inside the second
		var rs []*kgo.Record
		for j := 0; j < 25; j++ {
			i := batch*25 + j
			rs = append(rs, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprintf("v%d", i))})
		}
		produceAll(t, prod, rs)
	}
	var rs []*kgo.Record
	for i := 0; i < 10; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: 1, Value: []byte(fmt.Sprintf("w%d", i))})
	}
	produceAll(t, prod, rs)

	del := func(at int64) (int64, error) {
		o := make(kadm.Offsets)
		o.Add(kadm.Offset{Topic: topic, Partition: 0, At: at})
		resp, err := adm.DeleteRecords(ctxFor(t, 30*time.Second), o)
		if err != nil {
			return -1, err
		}
		r, ok := resp.Lookup(topic, 0)
		if !ok {
			return -1, errors.New("no response for partition 0")
		}
		return r.LowWatermark, r.Err
	}
	offsets := func() (map[int32]int64, map[int32]int64) {
		l, err := adm.ListStartOffsets(ctxFor(t, 30*time.Second), topic)
		s := listOffsets(t, l, err, topic)
		l, err = adm.ListEndOffsets(ctxFor(t, 30*time.Second), topic)
		return s, listOffsets(t, l, err, topic)
	}

	lw, err := del(40)
	if err != nil || lw != 40 {
		t.Fatalf("delete before 40: low watermark %d, %v", lw, err)
	}
	if s, e := offsets(); !equalOffsets(s, map[int32]int64{0: 40, 1: 0}) || !equalOffsets(e, map[int32]int64{0: 100, 1: 10}) {
		t.Fatalf("after delete: start %v end %v", s, e)
	}
	got := readRange(t, b, topic, 0, kgo.NewOffset().AtStart(), 100)
	if len(got) != 60 || got[0].Offset != 40 || string(got[0].Value) != "v40" || got[59].Offset != 99 {
		t.Fatalf("from the start: %d records, first %d %q", len(got), got[0].Offset, got[0].Value)
	}
	// Below the start offset: OFFSET_OUT_OF_RANGE, reset to the start (ConsumeResetOffset AtStart).
	got = readRange(t, b, topic, 0, kgo.NewOffset().At(10), 41)
	if got[0].Offset != 40 {
		t.Fatalf("consuming from 10 after deletion started at %d, want 40", got[0].Offset)
	}

	if lw, err := del(30); err != nil || lw != 40 {
		t.Fatalf("delete below the start offset: low watermark %d, %v; want 40", lw, err)
	}
	if _, err := del(101); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete beyond the high watermark: %v, want OFFSET_OUT_OF_RANGE", err)
	}
	if lw, err := del(100); err != nil || lw != 100 {
		t.Fatalf("delete up to the high watermark: %d, %v", lw, err)
	}
	if s, e := offsets(); s[0] != 100 || e[0] != 100 {
		t.Fatalf("emptied partition: start %d end %d", s[0], e[0])
	}
	rs = nil
	for i := 100; i < 105; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprintf("v%d", i))})
	}
	produceAll(t, prod, rs)
	if rs[0].Offset != 100 {
		t.Fatalf("first record after emptying got offset %d, want 100", rs[0].Offset)
	}
	got = readRange(t, b, topic, 0, kgo.NewOffset().AtStart(), 105)
	if len(got) != 5 || got[0].Offset != 100 || string(got[4].Value) != "v104" {
		t.Fatalf("after emptying and producing: %d records, first offset %d", len(got), got[0].Offset)
	}
}
