package compat

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFetchSessionsManyPartitions: franz-go opens an incremental fetch session (KIP-227)
// whenever the broker gives one, so that its fetches name, and their answers carry, only the
// partitions that changed. A consumer of 64 partitions gets every record exactly once and in
// order while a few partitions at a time get new ones, and nothing while none do; on Weir,
// its fetches went through sessions (the broker's counters).
func TestFetchSessionsManyPartitions(t *testing.T) {
	b := sharedBroker(t)
	adm := newAdmin(t, b)
	topic := unique("sessions")
	const partitions = 64
	createTopic(t, adm, topic, partitions)
	before := sessionCounters(t, b)

	prod := newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	cons := newClient(t, b, kgo.ClientID("compat-sessions"),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))

	next := map[int32]int{} // partition -> next value expected
	sent := map[int32]int{}
	rng := rand.New(rand.NewPCG(7, 11))
	for round := 0; round < 20; round++ {
		if round%4 == 3 {
			// Nothing new anywhere: nothing comes.
			if got := pollSome(t, cons, 600*time.Millisecond, 1000); len(got) != 0 {
				t.Fatalf("round %d: %d records with nothing produced", round, len(got))
			}
			continue
		}
		var rs []*kgo.Record
		for i := 0; i < 3; i++ {
			p := int32(rng.IntN(partitions))
			for j := 0; j < 1+rng.IntN(3); j++ {
				rs = append(rs, &kgo.Record{Topic: topic, Partition: p,
					Value: []byte(fmt.Sprintf("%d-%d", p, sent[p]))})
				sent[p]++
			}
		}
		produceAll(t, prod, rs)
		deadline := time.Now().Add(20 * time.Second)
		for !caughtUp(next, sent) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: got %v of %v", round, next, sent)
			}
			for _, r := range pollSome(t, cons, 500*time.Millisecond, 1000) {
				want := fmt.Sprintf("%d-%d", r.Partition, next[r.Partition])
				if string(r.Value) != want {
					t.Fatalf("round %d: partition %d offset %d: %q, want %q",
						round, r.Partition, r.Offset, r.Value, want)
				}
				next[r.Partition]++
			}
		}
	}
	if got := pollSome(t, cons, 600*time.Millisecond, 1000); len(got) != 0 {
		t.Fatalf("%d records more than produced", len(got))
	}

	if after := sessionCounters(t, b); after != nil {
		incremental := after["weir_fetch_incremental_total"] - before["weir_fetch_incremental_total"]
		created := after["weir_fetch_sessions_created_total"] - before["weir_fetch_sessions_created_total"]
		if created < 1 || incremental < 10 {
			t.Fatalf("fetches in sessions: %v created, %v incremental", created, incremental)
		}
		t.Logf("sessions created %v, incremental fetches %v", created, incremental)
	}
}

func caughtUp(next, sent map[int32]int) bool {
	for p, n := range sent {
		if next[p] != n {
			return false
		}
	}
	return true
}

// sessionCounters sums Weir's fetch-session counters over the target's brokers; nil for
// Kafka.
func sessionCounters(t *testing.T, b Target) map[string]float64 {
	t.Helper()
	return weirMetrics(t, b, "weir_fetch_")
}

// weirMetrics sums the unlabelled metrics named with prefix over the target's brokers; nil
// for Kafka.
func weirMetrics(t *testing.T, b Target, prefix string) map[string]float64 {
	t.Helper()
	var brokers []*Broker
	switch x := b.(type) {
	case *Broker:
		brokers = []*Broker{x}
	case *Cluster:
		brokers = x.Brokers
	}
	out := map[string]float64{}
	for _, br := range brokers {
		if br.Kind != "weir" {
			return nil
		}
		r, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://127.0.0.1:" + strconv.Itoa(br.Port2) + "/metrics")
		if err != nil {
			t.Fatalf("metrics of broker %d: %v", br.NodeID, err)
		}
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && strings.HasPrefix(f[0], prefix) {
				v, _ := strconv.ParseFloat(f[1], 64)
				out[f[0]] += v
			}
		}
		r.Body.Close()
	}
	if len(brokers) == 0 {
		return nil
	}
	return out
}
