package compat

// A stuck request is seen and acted on: a broker whose metadata store stops answering (its
// SQLite file write-locked by another process, as a stalled disk or a hung PostgreSQL would)
// shows the age of its oldest CreateTopics in weir_request_oldest_seconds, logs the request at
// WARN once it is past broker.request_stuck_ms, fails /readyz while it is stuck and is ready
// again once it is answered; and SIGTERM stops it within broker.shutdown_deadline_ms even while
// the store still does not answer.

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// lockStore write-locks a SQLite file from another process until the returned func is called.
func lockStore(t *testing.T, path string) func() {
	t.Helper()
	cmd := exec.Command("python3", "-c", `
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
c.execute("ROLLBACK")
`, path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3 to lock %s: %v", path, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("locking %s: %q %v", path, line, err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			stdin.Close()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(release)
	return release
}

func adminGet(t *testing.T, b *Broker, path string) (int, string) {
	t.Helper()
	r, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://127.0.0.1:" + strconv.Itoa(b.Port2) + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(body)
}

// metricValue reads one sample of /metrics (-1 if absent).
func metricValue(t *testing.T, b *Broker, sample string) float64 {
	t.Helper()
	_, body := adminGet(t, b, "/metrics")
	re := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(sample) + " ([0-9.e+-]+)$")
	m := re.FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func TestStuckRequestIsSeenAndTheStopIsBounded(t *testing.T) {
	skipUnlessWeir(t, "reads Weir's meters and locks its SQLite store")
	skipInClusterMode(t, "starts a broker of its own")
	const stuckMs, shutdownMs = 1500, 4000
	b := startBroker(t, "stuck", func(b *Broker) error {
		b.env = append(b.env, "WEIR_BROKER_REQUEST_STUCK_MS="+strconv.Itoa(stuckMs),
			"WEIR_BROKER_SHUTDOWN_DEADLINE_MS="+strconv.Itoa(shutdownMs))
		return nil
	})
	adm := newAdmin(t, b)
	topic := unique("stuck")
	createTopic(t, adm, topic, 2)
	// Records in the WAL, for the shutdown to upload.
	produceAll(t, newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner())), numbered(topic, "v", 100, 2))
	store := filepath.Join(b.dataDir, "meta.sqlite")

	// 1. A CreateTopics waits for the locked store: seen, logged, not ready; then answered.
	release := lockStore(t, store)
	created := make(chan error, 1)
	go func() {
		r, err := adm.CreateTopic(context.Background(), 1, 1, nil, unique("stuck-new"))
		if err == nil {
			err = r.Err
		}
		created <- err
	}()
	deadline := time.Now().Add(8 * time.Second)
	for {
		age := metricValue(t, b, `weir_request_oldest_seconds{api="CreateTopics"}`)
		code, _ := adminGet(t, b, "/readyz")
		if age*1000 > stuckMs && code == http.StatusServiceUnavailable && metricValue(t, b, "weir_requests_stuck") >= 1 {
			t.Logf("oldest CreateTopics %.1fs old; /readyz %d", age, code)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not seen as stuck: oldest CreateTopics %v s, /readyz %d, weir_requests_stuck %v",
				age, code, metricValue(t, b, "weir_requests_stuck"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := metricValue(t, b, "weir_stuck_requests_total"); n < 1 {
		t.Fatalf("weir_stuck_requests_total %v", n)
	}
	if log := b.LogTail(200); !strings.Contains(log, "a request is stuck") || !strings.Contains(log, "CreateTopics") {
		t.Fatalf("no WARN naming the stuck CreateTopics in the log:\n%s", log)
	}
	release()
	select {
	case err := <-created:
		t.Logf("the CreateTopics was answered once the store was: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("the CreateTopics was not answered 60 s after the store was released")
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		if code, _ := adminGet(t, b, "/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not OK again 10 s after the stuck request was answered")
		}
		time.Sleep(200 * time.Millisecond)
	}

	// 2. SIGTERM while the store does not answer, with records in the WAL to upload: the
	// broker exits within its bound (a crash, for the cluster), not never.
	produceAll(t, newProducer(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner())), numbered(topic, "w", 100, 2))
	lockStoreRelease := lockStore(t, store)
	start := time.Now()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(time.Duration(shutdownMs)*time.Millisecond + 10*time.Second):
		t.Fatalf("still running %v after SIGTERM with a shutdown bound of %d ms", time.Since(start), shutdownMs)
	}
	took := time.Since(start)
	b.mu.Lock()
	b.running = false
	b.mu.Unlock()
	t.Logf("exited %v after SIGTERM (%v)", took, b.waitErr)
	if b.waitErr != nil && !strings.Contains(b.LogTail(50), "shutdown not done within") {
		t.Fatalf("exited with %v without saying why:\n%s", b.waitErr, b.LogTail(50))
	}

	// 3. Nothing acknowledged is lost: started again on the store, every record is there.
	lockStoreRelease()
	if err := b.Start(); err != nil {
		t.Fatalf("start again: %v", err)
	}
	got := 0
	for p := int32(0); p < 2; p++ {
		got += len(readRange(t, b, topic, p, kgo.NewOffset().AtStart(), 100))
	}
	if got != 200 {
		t.Fatalf("%d of the 200 acknowledged records read back after the bounded stop", got)
	}
}
