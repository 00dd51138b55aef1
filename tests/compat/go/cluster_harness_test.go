package compat

import (
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerServes checks that broker b answers ApiVersions on its Kafka port and /healthz on its
// admin port.
func brokerServes(t *testing.T, b *Broker) {
	t.Helper()
	cl := newClient(t, b, kgo.ClientID("cluster-harness"))
	req := kmsg.NewPtrApiVersionsRequest()
	resp, err := req.RequestWith(ctxFor(t, 20*time.Second), cl)
	if err != nil || resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		t.Fatalf("ApiVersions of broker %d: %v %+v", b.NodeID, err, resp)
	}
	r, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://127.0.0.1:" + strconv.Itoa(b.Port2) + "/healthz")
	if err != nil {
		t.Fatalf("/healthz of broker %d: %v", b.NodeID, err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("/healthz of broker %d: %s", b.NodeID, r.Status)
	}
}

// TestClusterHarness (WEIR_COMPAT_TARGET=cluster only): three brokers on one PostgreSQL and
// one s3s-fs answer on their own ports; records go through one broker and its uploads land in
// s3s-fs; a broker stopped (SIGTERM) or killed and started again keeps its address; a fourth
// joins as node 4.
func TestClusterHarness(t *testing.T) {
	if cluster, _ := clusterMode(); !cluster {
		t.Skip("the cluster harness runs with WEIR_COMPAT_TARGET=cluster")
	}
	c := startCluster(t, "harness")
	if len(c.Brokers) != 3 || c.Bootstrap() != strings.Join(c.Seeds(), ",") || len(c.Nodes()) != 3 {
		t.Fatalf("cluster of %d brokers, seeds %v, nodes %v", len(c.Brokers), c.Seeds(), c.Nodes())
	}
	for i, b := range c.Brokers {
		if b.NodeID != int32(i+1) {
			t.Fatalf("broker %d has node id %d", i, b.NodeID)
		}
		brokerServes(t, b)
	}

	// Through one broker (the brokers do not share partitions before the cluster code).
	topic := unique("cluster-harness")
	b0 := c.Brokers[0]
	createTopic(t, newAdmin(t, b0), topic, 1)
	sent := keyedRecords(topic, 0, 100, 4)
	produceAll(t, newProducer(t, b0), sent)
	got := readRange(t, b0, topic, 0, kgo.NewOffset().AtStart(), int64(len(sent)))
	for i, r := range got {
		if string(r.Value) != string(sent[i].Value) {
			t.Fatalf("record %d: %q, want %q", i, r.Value, sent[i].Value)
		}
	}
	if err := c.Stop(0); err != nil {
		t.Fatal(err)
	}
	objects := 0
	_ = filepath.WalkDir(filepath.Join(c.S3Root(), s3Bucket), func(_ string, d fs.DirEntry, _ error) error {
		if d != nil && !d.IsDir() {
			objects++
		}
		return nil
	})
	if objects == 0 {
		t.Fatalf("the stopped broker uploaded nothing to s3s-fs")
	}
	if _, err := os.Stat(filepath.Join(b0.dataDir, "meta.sqlite")); err == nil {
		t.Fatalf("metadata in SQLite, not in PostgreSQL")
	}
	if err := c.Start(0); err != nil {
		t.Fatal(err)
	}
	brokerServes(t, b0)

	port := c.Brokers[1].Port
	if err := c.Kill(1); err != nil {
		t.Fatal(err)
	}
	if c.Brokers[1].Running() {
		t.Fatalf("killed broker still runs")
	}
	if conn, err := net.DialTimeout("tcp", c.Brokers[1].Addr(), 2*time.Second); err == nil {
		conn.Close()
		t.Fatalf("a killed broker still listens")
	}
	if err := c.Start(1); err != nil {
		t.Fatal(err)
	}
	if c.Brokers[1].Port != port {
		t.Fatalf("port %d after a restart, was %d", c.Brokers[1].Port, port)
	}
	brokerServes(t, c.Brokers[1])

	b, err := c.AddBroker()
	if err != nil {
		t.Fatal(err)
	}
	if b.NodeID != 4 || len(c.Seeds()) != 4 {
		t.Fatalf("new broker node id %d, seeds %v", b.NodeID, c.Seeds())
	}
	brokerServes(t, b)
}
