package compat

import (
	"errors"
	"maps"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAdminTopics: create a 4-partition topic, TOPIC_ALREADY_EXISTS on a second create,
// describe it (metadata, leaders, topic id), and alter/describe its configs.
func TestAdminTopics(t *testing.T) {
	b := sharedBroker(t)
	adm := newAdmin(t, b)
	topic := unique("admin-topic")

	resp, err := adm.CreateTopic(ctxFor(t, 30*time.Second), 4, 1, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v %v %s", err, resp.Err, resp.ErrMessage)
	}
	if resp.NumPartitions != 4 || resp.ReplicationFactor != 1 {
		t.Fatalf("create response: %d partitions, replication %d", resp.NumPartitions, resp.ReplicationFactor)
	}
	if resp.ID == (kadm.TopicID{}) {
		t.Fatalf("create response has no topic id")
	}
	waitTopic(t, adm, topic, 4)

	again, err := adm.CreateTopic(ctxFor(t, 30*time.Second), 4, 1, nil, topic)
	if err == nil {
		err = again.Err
	}
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("second create: %v, want TOPIC_ALREADY_EXISTS", err)
	}

	// Describe through metadata.
	tds, err := adm.ListTopics(ctxFor(t, 30*time.Second), topic)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		t.Fatalf("topic %s not described: %v %v", topic, ok, td.Err)
	}
	if td.ID != resp.ID {
		t.Fatalf("topic id %v, created as %v", td.ID, resp.ID)
	}
	if td.IsInternal {
		t.Fatalf("topic described as internal")
	}
	if len(td.Partitions) != 4 {
		t.Fatalf("%d partitions, want 4", len(td.Partitions))
	}
	for p := int32(0); p < 4; p++ {
		pd, ok := td.Partitions[p]
		if !ok || pd.Err != nil {
			t.Fatalf("partition %d: %v %v", p, ok, pd.Err)
		}
		if _, ok := b.Nodes()[pd.Leader]; !ok || len(pd.Replicas) != 1 || pd.Replicas[0] != pd.Leader || len(pd.ISR) != 1 || pd.ISR[0] != pd.Leader {
			t.Fatalf("partition %d: leader %d replicas %v isr %v; want a leader among %v, the only replica and ISR", p, pd.Leader, pd.Replicas, pd.ISR, b.Nodes())
		}
	}
	// Listing every topic may go to a broker of a cluster that has not heard of the new topic
	// yet (as a Kafka broker's metadata cache lags its controller): it must within seconds.
	deadline := time.Now().Add(10 * time.Second)
	for {
		all, err := adm.ListTopics(ctxFor(t, 30*time.Second))
		if err != nil {
			t.Fatalf("list all topics: %v", err)
		}
		if all.Has(topic) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listing all topics misses %s after 10 s: %v", topic, all.Names())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The broker list.
	md, err := adm.BrokerMetadata(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatalf("broker metadata: %v", err)
	}
	// Every broker of the target (one, or a cluster's three), each at the address it listens on.
	got := map[int32]string{}
	for _, n := range md.Brokers {
		got[n.NodeID] = net.JoinHostPort(n.Host, strconv.Itoa(int(n.Port)))
	}
	if !maps.Equal(got, b.Nodes()) {
		t.Fatalf("brokers %+v; want %v", md.Brokers, b.Nodes())
	}
	if md.Cluster == "" {
		t.Fatalf("no cluster id")
	}

	// Configs: SET, a refused value, DELETE.
	before := topicConfig(t, adm, topic, "retention.ms")
	if before.Source == kmsg.ConfigSourceDynamicTopicConfig {
		t.Fatalf("new topic already has a topic-level retention.ms")
	}
	alter(t, adm, topic, nil,
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("123456789")},
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("2000000")})
	waitConfig(t, adm, topic, "retention.ms", "123456789 from a topic-level SET", func(c kadm.Config) bool {
		return c.MaybeValue() == "123456789" && c.Source == kmsg.ConfigSourceDynamicTopicConfig
	})
	waitConfig(t, adm, topic, "max.message.bytes", "2000000", func(c kadm.Config) bool { return c.MaybeValue() == "2000000" })
	alter(t, adm, topic, kerr.InvalidConfig,
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("not-a-number")})
	if c := topicConfig(t, adm, topic, "retention.ms"); c.MaybeValue() != "123456789" {
		t.Fatalf("retention.ms changed by a refused SET: %q", c.MaybeValue())
	}
	alter(t, adm, topic, nil, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"})
	waitConfig(t, adm, topic, "retention.ms", "the default "+before.MaybeValue()+" after DELETE", func(c kadm.Config) bool {
		return c.MaybeValue() == before.MaybeValue() && c.Source != kmsg.ConfigSourceDynamicTopicConfig
	})
	if c := topicConfig(t, adm, topic, "max.message.bytes"); c.MaybeValue() != "2000000" {
		t.Fatalf("max.message.bytes lost by DELETE of another key: %q", c.MaybeValue())
	}
}

// waitConfig waits (up to 15 s: Kafka applies config changes asynchronously) until the
// described config satisfies ok.
func waitConfig(t *testing.T, adm *kadm.Client, topic, key, what string, ok func(kadm.Config) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := topicConfig(t, adm, topic, key)
		if ok(c) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s is %q (source %v); want %s", key, topic, c.MaybeValue(), c.Source, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func topicConfig(t *testing.T, adm *kadm.Client, topic, key string) kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctxFor(t, 30*time.Second), topic)
	if err != nil {
		t.Fatalf("describe configs: %v", err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe configs of %s: %v %v", topic, err, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c
		}
	}
	t.Fatalf("config %s not described for %s", key, topic)
	return kadm.Config{}
}

func alter(t *testing.T, adm *kadm.Client, topic string, wantErr error, cs ...kadm.AlterConfig) {
	t.Helper()
	resps, err := adm.AlterTopicConfigs(ctxFor(t, 30*time.Second), cs, topic)
	if err == nil {
		for _, r := range resps {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	switch {
	case wantErr == nil && err != nil:
		t.Fatalf("alter configs %v: %v", cs, err)
	case wantErr != nil && !errors.Is(err, wantErr):
		t.Fatalf("alter configs %v: got %v, want %v", cs, err, wantErr)
	}
}
