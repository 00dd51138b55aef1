package compat

// Broker harness: one single-node broker per caller, Weir ($WEIR_BIN serve ...) by default,
// Apache Kafka (tools/kafka/kafka.sh) when WEIR_TEST_BROKER=kafka. Ports on 127.0.0.1 are
// picked by the harness's one rule (freePorts), data lives in a temp dir, and every broker
// started is stopped at the end, also when a test fails or the run is interrupted.
//
// With WEIR_COMPAT_TARGET=cluster the shared target of the client tests is a three-broker Weir
// cluster instead (cluster_test.go: one private PostgreSQL, one s3s-fs, three `weir serve`;
// its seeds are all three brokers); tests that need a broker process of their own skip.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	startTimeout = 90 * time.Second
	stopTimeout  = 30 * time.Second
)

// Target is what the client tests run against: one broker, or a cluster of them.
type Target interface {
	// Seeds are the bootstrap addresses (host:port): every broker's.
	Seeds() []string
	// Nodes maps every broker's node id to the address it advertises.
	Nodes() map[int32]string
	LogTail(n int) string
	Close() error
}

// clusterMode says whether WEIR_COMPAT_TARGET=cluster asks for a cluster as the shared target.
func clusterMode() (bool, error) {
	switch k := strings.ToLower(strings.TrimSpace(os.Getenv("WEIR_COMPAT_TARGET"))); k {
	case "", "broker":
		return false, nil
	case "cluster":
		return true, nil
	default:
		return false, fmt.Errorf("WEIR_COMPAT_TARGET must be broker or cluster, not %q", k)
	}
}

// StartTarget starts what WEIR_COMPAT_TARGET asks for: a broker, or a three-broker cluster.
func StartTarget(name string) (Target, error) {
	cluster, err := clusterMode()
	if err != nil {
		return nil, err
	}
	if cluster {
		return StartCluster(name, clusterSize)
	}
	return StartBroker(name)
}

// skipInClusterMode skips a test that needs a broker process of its own (it stops, kills or
// restarts it, or starts it with settings of its own) when the target is a cluster.
func skipInClusterMode(t *testing.T, why string) {
	t.Helper()
	if cluster, _ := clusterMode(); cluster {
		t.Skipf("WEIR_COMPAT_TARGET=cluster: %s", why)
	}
}

// skipUnlessWeir skips a Weir-only test that starts a broker of its own: against Apache Kafka
// (WEIR_TEST_BROKER=kafka) and when the target is a cluster.
func skipUnlessWeir(t *testing.T, why string) {
	t.Helper()
	if kind, _ := brokerKind(); kind != "weir" {
		t.Skipf("WEIR_TEST_BROKER=%s: %s", kind, why)
	}
	skipInClusterMode(t, why)
}

type Broker struct {
	Kind   string // "weir" or "kafka"
	Name   string
	Port   int    // Kafka protocol listener
	Port2  int    // Weir: admin HTTP; Kafka: controller
	NodeID int32  // 1 unless the broker is one of a cluster's
	Zone   string // --zone, in a zoned cluster

	root    string
	dataDir string
	logPath string
	// Weir only: flags added to `weir serve`, environment added to ours, and the signal the
	// broker gets when the test process dies.
	args     []string
	env      []string
	deathSig syscall.Signal

	// A cluster's broker is started and stopped by the cluster program, as its broker index.
	cluster *Cluster
	index   int

	mu      sync.Mutex
	running bool
	cmd     *exec.Cmd     // Weir only
	exited  chan struct{} // Weir only: closed when cmd has exited
	waitErr error         // Weir only: valid once exited is closed
}

var (
	liveMu sync.Mutex
	live   = map[interface{ Close() error }]bool{}
)

func init() {
	// Stop brokers on an interrupted run; a panic-ing test timeout cannot be caught, but
	// Weir children also get SIGTERM from Pdeathsig.
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-ch
		liveMu.Lock()
		bs := make([]interface{ Close() error }, 0, len(live))
		for b := range live {
			bs = append(bs, b)
		}
		liveMu.Unlock()
		for _, b := range bs {
			_ = b.Close()
		}
		fmt.Fprintf(os.Stderr, "compat: stopped %d broker(s) and cluster(s) on %v\n", len(bs), s)
		os.Exit(2)
	}()
}

func brokerKind() (string, error) {
	switch k := strings.ToLower(strings.TrimSpace(os.Getenv("WEIR_TEST_BROKER"))); k {
	case "", "weir":
		return "weir", nil
	case "kafka":
		return "kafka", nil
	default:
		return "", fmt.Errorf("WEIR_TEST_BROKER must be weir or kafka, not %q", k)
	}
}

func repoRoot() string {
	p, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	return p
}

// portsFile makes this test process one run for the harness's port rule: the ports program
// and the cluster programs this process starts (which inherit the variable) never hand out a
// port twice.
var portsFile = sync.OnceValue(func() string {
	if f := os.Getenv("WEIR_HARNESS_PORTS_FILE"); f != "" {
		return f
	}
	f := filepath.Join(os.TempDir(), fmt.Sprintf("weir-compat-go-ports-%d", os.Getpid()))
	os.Setenv("WEIR_HARNESS_PORTS_FILE", f)
	return f
})

// freePorts picks n loopback ports by the harness's one port rule (`python3
// tests/harness/weir_harness ports N`): free when picked, none handed out twice in this run.
func freePorts(n int) ([]int, error) {
	portsFile()
	cmd := exec.Command("python3", filepath.Join(repoRoot(), "tests", "harness", "weir_harness"),
		"ports", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pick %d ports: %w", n, err)
	}
	var ports []int
	if err := json.Unmarshal(out, &ports); err != nil || len(ports) != n {
		return nil, fmt.Errorf("pick %d ports: unexpected answer %q (%v)", n, out, err)
	}
	return ports, nil
}

// BrokerOpt adjusts a broker once its ports are picked, before its first start: it may add
// `weir serve` flags (b.args) or environment (b.env), e.g. listeners on ports of b.MorePorts.
// Weir only: a Kafka broker ignores both.
type BrokerOpt func(b *Broker) error

// StartBroker starts a fresh broker, adjusted by opts; the caller must Close it.
func StartBroker(name string, opts ...BrokerOpt) (*Broker, error) {
	kind, err := brokerKind()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "weir-compat-go-"+name+"-")
	if err != nil {
		return nil, err
	}
	b, err := newBroker(kind, name, root)
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	for _, opt := range opts {
		if err := opt(b); err != nil {
			os.RemoveAll(root)
			return nil, err
		}
	}
	liveMu.Lock()
	live[b] = true
	liveMu.Unlock()
	if err := b.Start(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// newBroker prepares a broker (free ports, data and log under root) without starting it.
func newBroker(kind, name, root string) (*Broker, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	b := &Broker{Kind: kind, Name: name, Port: ports[0], Port2: ports[1], NodeID: 1, root: root,
		dataDir: filepath.Join(root, "data"), deathSig: syscall.SIGTERM}
	if kind == "weir" {
		b.logPath = filepath.Join(root, "weir.log")
	} else {
		b.logPath = filepath.Join(b.dataDir, "kafka.log")
	}
	return b, nil
}

// startBroker starts a broker for one test, adjusted by opts, and stops it when the test ends.
func startBroker(t *testing.T, name string, opts ...BrokerOpt) *Broker {
	t.Helper()
	b, err := StartBroker(name, opts...)
	if err != nil {
		t.Fatalf("start %s broker: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker log tail:\n%s", b.LogTail(60))
		}
		if err := b.Close(); err != nil {
			t.Errorf("stop broker: %v", err)
		}
	})
	return b
}

func (b *Broker) Addr() string { return "127.0.0.1:" + strconv.Itoa(b.Port) }

// MorePorts picks n more free loopback ports (none of them the broker's own: no port is
// picked twice) for listeners of its own beyond Port, set with a BrokerOpt.
func (b *Broker) MorePorts(n int) ([]int, error) { return freePorts(n) }

func (b *Broker) Seeds() []string { return []string{b.Addr()} }

func (b *Broker) Nodes() map[int32]string { return map[int32]string{b.NodeID: b.Addr()} }

// Start starts the broker process on the broker's data dir and ports and waits until ready.
func (b *Broker) Start() error {
	if b.cluster != nil {
		return b.cluster.brokerAct("start", b.index)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running {
		return errors.New("broker already running")
	}
	if err := os.MkdirAll(b.dataDir, 0o755); err != nil {
		return err
	}
	if b.Kind == "kafka" {
		b.running = true // kafka.sh may leave a broker behind even when it fails
		return b.kafkaSh(startTimeout+60*time.Second, "start", "--data-dir", b.dataDir,
			"--port", strconv.Itoa(b.Port), "--controller-port", strconv.Itoa(b.Port2))
	}
	bin := os.Getenv("WEIR_BIN")
	if bin == "" {
		return errors.New("WEIR_BIN is not set (path to the weir binary); set WEIR_TEST_BROKER=kafka to run against Apache Kafka")
	}
	logf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve",
		"--data-dir", b.dataDir,
		"--listen", b.Addr(),
		"--admin-listen", "127.0.0.1:"+strconv.Itoa(b.Port2))
	cmd.Args = append(cmd.Args, b.args...)
	// Test brokers get a small WAL, not the 2 GiB default, and a schema registry on a free port
	// (not Confluent's: brokers run side by side).
	cmd.Env = append(append(os.Environ(), "WEIR_WAL_CAPACITY="+strconv.Itoa(64<<20), "WEIR_BROKER_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS=1000",
		"WEIR_SCHEMA_REGISTRY_LISTEN=127.0.0.1:0"), b.env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: b.deathSig}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	logf.Close() // the child has its own copy
	b.cmd = cmd
	b.exited = make(chan struct{})
	b.running = true
	go func(exited chan struct{}) {
		b.waitErr = cmd.Wait()
		close(exited)
	}(b.exited)

	client := &http.Client{Timeout: 2 * time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", b.Port2)
	deadline := time.Now().Add(startTimeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-b.exited:
			b.running = false
			return fmt.Errorf("weir exited during startup (%v)\n%s", b.waitErr, b.LogTail(60))
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			last = resp.Status
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("weir not ready within %v (last /readyz: %s)\n%s", startTimeout, last, b.LogTail(60))
}

// Stop stops the broker. Weir gets SIGTERM and must exit with status 0 within 30 s.
func (b *Broker) Stop() error {
	if b.cluster != nil {
		return b.cluster.brokerAct("stop", b.index)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.running {
		return nil
	}
	b.running = false
	if b.Kind == "kafka" {
		return b.kafkaSh(stopTimeout+30*time.Second, "stop", "--data-dir", b.dataDir)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(stopTimeout):
		_ = b.cmd.Process.Kill()
		<-b.exited
		return fmt.Errorf("weir did not exit within %v of SIGTERM (killed)\n%s", stopTimeout, b.LogTail(60))
	}
	if b.waitErr != nil {
		return fmt.Errorf("weir did not exit cleanly after SIGTERM: %v (expected exit status 0)\n%s", b.waitErr, b.LogTail(60))
	}
	return nil
}

// Kill crashes a Weir broker: SIGKILL, and waits until the process is gone.
func (b *Broker) Kill() error {
	if b.cluster != nil {
		return b.cluster.brokerAct("kill", b.index)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.running {
		return nil
	}
	if b.Kind != "weir" {
		return errors.New("Kill is for Weir brokers")
	}
	b.running = false
	_ = b.cmd.Process.Kill()
	<-b.exited
	return nil
}

// Running says whether the broker process runs.
func (b *Broker) Running() bool {
	if b.cluster != nil {
		return b.cluster.running(b.index)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.running || b.exited == nil {
		return b.running
	}
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// Restart stops the broker and starts it again on the same data dir and ports.
func (b *Broker) Restart() error {
	if err := b.Stop(); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return b.Start()
}

// Close stops the broker and removes its temp dir (kept if WEIR_TEST_KEEP_DATA is set).
func (b *Broker) Close() error {
	err := b.Stop()
	liveMu.Lock()
	delete(live, b)
	liveMu.Unlock()
	if os.Getenv("WEIR_TEST_KEEP_DATA") == "" {
		os.RemoveAll(b.root)
	} else {
		fmt.Fprintf(os.Stderr, "keeping broker data in %s\n", b.root)
	}
	return err
}

func (b *Broker) kafkaSh(timeout time.Duration, args ...string) error {
	script := filepath.Join(repoRoot(), "tools", "kafka", "kafka.sh")
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("WEIR_TEST_BROKER=kafka but %s is missing: %w", script, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafka.sh %s: %v\n%s", args[0], err, out)
	}
	return nil
}

// LogTail returns the last n lines of the broker's log.
func (b *Broker) LogTail(n int) string {
	f, err := os.Open(b.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return "---- " + b.logPath + " ----\n" + strings.Join(lines, "\n")
}
