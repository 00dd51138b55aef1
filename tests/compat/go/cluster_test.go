package compat

// Cluster harness: Weir brokers on one machine sharing one private PostgreSQL and one s3s-fs,
// started by the one test-cluster program every language's harness uses
// (`python3 tests/harness/weir_harness cluster`, which owns the port rule and how PostgreSQL,
// s3s-fs and the brokers are started). It prints the cluster as one line of JSON, takes
// commands on its standard input (stop N, kill N, start N, add, describe), each answered with
// the cluster as JSON, and stops everything when its standard input closes, so a test run that
// dies leaves nothing behind.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	clusterSize = 3
	s3Bucket    = "weir-test"
	// How long the program may take to start a cluster (PostgreSQL, s3s-fs, the brokers) or to
	// carry out one command.
	clusterStartTimeout = 3 * time.Minute
	clusterActTimeout   = 2 * time.Minute
)

// Cluster is a running test cluster; Brokers[i] is the program's broker i.
type Cluster struct {
	Name    string
	Brokers []*Broker

	MetadataURL    string
	ObjectStoreURL string

	// Zones, if set: broker with node id n is in Zones[(n-1) % len(Zones)] (--zone).
	Zones []string

	root  string // the program's --dir
	tmp   string // holds root and the program's log
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // the program's stdout, line by line
	mu    sync.Mutex  // one command at a time
}

// described is the program's JSON answer.
type described struct {
	Error          string `json:"error"`
	Bootstrap      string `json:"bootstrap"`
	MetadataURL    string `json:"metadata_url"`
	ObjectStoreURL string `json:"object_store_url"`
	Dir            string `json:"dir"`
	Brokers        []struct {
		NodeID    int32  `json:"node_id"`
		Port      int    `json:"port"`
		AdminPort int    `json:"admin_port"`
		Pid       *int   `json:"pid"`
		DataDir   string `json:"data_dir"`
		Log       string `json:"log"`
		Zone      string `json:"zone"`
	} `json:"brokers"`
}

// StartCluster starts PostgreSQL, s3s-fs and n brokers (node ids 1..n, each ready); the
// caller must Close it.
func StartCluster(name string, n int) (*Cluster, error) {
	return StartZonedCluster(name, n, nil)
}

// StartZonedCluster is StartCluster with brokers spread over zones, round robin by node id.
func StartZonedCluster(name string, n int, zones []string) (*Cluster, error) {
	if kind, err := brokerKind(); err != nil || kind != "weir" {
		return nil, fmt.Errorf("a cluster is of Weir brokers: WEIR_COMPAT_TARGET=cluster needs WEIR_TEST_BROKER=weir (%v)", err)
	}
	if os.Getenv("WEIR_BIN") == "" {
		return nil, errors.New("WEIR_BIN is not set (path to the weir binary)")
	}
	tmp, err := os.MkdirTemp("", "weir-compat-go-"+name+"-")
	if err != nil {
		return nil, err
	}
	// PostgreSQL may run as another user, under this directory.
	if err := os.Chmod(tmp, 0o711); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	c := &Cluster{Name: name, Zones: zones, tmp: tmp, root: filepath.Join(tmp, "cluster")}
	args := []string{filepath.Join(repoRoot(), "tests", "harness", "weir_harness"), "cluster",
		"--brokers", strconv.Itoa(n), "--dir", c.root, "--keep"}
	if len(zones) > 0 {
		args = append(args, "--zones", strings.Join(zones, ","))
	}
	if err := c.launch(args); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("start cluster %s: %w", name, err)
	}
	liveMu.Lock()
	live[c] = true
	liveMu.Unlock()
	return c, nil
}

// launch starts the program and reads the cluster it started.
func (c *Cluster) launch(args []string) error {
	logf, err := os.Create(filepath.Join(c.tmp, "harness.log"))
	if err != nil {
		return err
	}
	defer logf.Close() // the program has its own copy
	c.cmd = exec.Command("python3", args...)
	c.cmd.Stderr = logf
	// The program stops the cluster when its stdin closes or it gets SIGTERM: when this test
	// process dies, both happen.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return err
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("start the cluster program: %w", err)
	}
	c.lines = make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	d, err := c.answer(clusterStartTimeout)
	if err == nil {
		err = c.update(d)
	}
	if err != nil {
		_ = c.stdin.Close()
		_ = c.cmd.Wait()
		return fmt.Errorf("%w\n%s", err, tail(filepath.Join(c.tmp, "harness.log"), 40))
	}
	return nil
}

// answer reads the program's next line.
func (c *Cluster) answer(timeout time.Duration) (*described, error) {
	select {
	case line, ok := <-c.lines:
		if !ok {
			return nil, errors.New("the cluster program exited")
		}
		var d described
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			return nil, fmt.Errorf("the cluster program said %q: %w", line, err)
		}
		if d.Error != "" {
			return &d, errors.New(d.Error)
		}
		return &d, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("no answer from the cluster program within %v", timeout)
	}
}

// act sends one command and takes in the cluster it answers with.
func (c *Cluster) act(command string) (*described, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.stdin, command+"\n"); err != nil {
		return nil, fmt.Errorf("%s: %w", command, err)
	}
	d, err := c.answer(clusterActTimeout)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", command, err)
	}
	return d, c.update(d)
}

// update takes in the cluster as the program described it; brokers keep their *Broker.
func (c *Cluster) update(d *described) error {
	c.MetadataURL, c.ObjectStoreURL = d.MetadataURL, d.ObjectStoreURL
	for i, db := range d.Brokers {
		if i == len(c.Brokers) {
			root := filepath.Dir(db.DataDir)
			c.Brokers = append(c.Brokers, &Broker{Kind: "weir", Name: fmt.Sprintf("%s-%d", c.Name, db.NodeID),
				root: root, cluster: c, index: i})
		}
		b := c.Brokers[i]
		b.mu.Lock()
		b.Port, b.Port2, b.NodeID, b.Zone = db.Port, db.AdminPort, db.NodeID, db.Zone
		b.dataDir, b.logPath, b.running = db.DataDir, db.Log, db.Pid != nil
		b.mu.Unlock()
	}
	if len(d.Brokers) != len(c.Brokers) {
		return fmt.Errorf("the cluster program describes %d brokers, not %d", len(d.Brokers), len(c.Brokers))
	}
	return nil
}

// AddBroker starts a broker with the next node id and returns it.
func (c *Cluster) AddBroker() (*Broker, error) {
	if _, err := c.act("add"); err != nil {
		return nil, err
	}
	return c.Brokers[len(c.Brokers)-1], nil
}

// Start starts broker i again (on its data dir and ports) and waits until it is ready.
func (c *Cluster) Start(i int) error { return c.Brokers[i].Start() }

// Stop sends broker i SIGTERM; it must exit 0.
func (c *Cluster) Stop(i int) error { return c.Brokers[i].Stop() }

// Kill sends broker i SIGKILL and waits until it is gone.
func (c *Cluster) Kill(i int) error { return c.Brokers[i].Kill() }

// brokerAct carries out start, stop or kill on broker i through the program.
func (c *Cluster) brokerAct(verb string, i int) error {
	_, err := c.act(fmt.Sprintf("%s %d", verb, i))
	if err != nil {
		return fmt.Errorf("%w\n%s", err, tail(c.Brokers[i].logPath, 60))
	}
	return nil
}

// running asks the program whether broker i's process runs.
func (c *Cluster) running(i int) bool {
	d, err := c.act("describe")
	return err == nil && d.Brokers[i].Pid != nil
}

// Seeds are every broker's address, stopped ones included (clients skip those they cannot reach).
func (c *Cluster) Seeds() []string {
	seeds := make([]string, 0, len(c.Brokers))
	for _, b := range c.Brokers {
		seeds = append(seeds, b.Addr())
	}
	return seeds
}

// Bootstrap is Seeds as one comma-separated list.
func (c *Cluster) Bootstrap() string { return strings.Join(c.Seeds(), ",") }

func (c *Cluster) Nodes() map[int32]string {
	nodes := make(map[int32]string, len(c.Brokers))
	for _, b := range c.Brokers {
		nodes[b.NodeID] = b.Addr()
	}
	return nodes
}

// S3Root is the directory s3s-fs serves (the bucket is a directory in it).
func (c *Cluster) S3Root() string { return filepath.Join(c.root, "s3") }

func (c *Cluster) LogTail(n int) string {
	var out []string
	for _, b := range c.Brokers {
		out = append(out, fmt.Sprintf("broker %d: %s", b.NodeID, b.LogTail(n)))
	}
	return strings.Join(out, "\n")
}

// Close stops every broker (SIGTERM, each must exit 0), then the program stops s3s-fs and
// PostgreSQL; the cluster's directory is removed (kept if WEIR_TEST_KEEP_DATA is set).
func (c *Cluster) Close() error {
	var errs []error
	for i, b := range c.Brokers {
		if err := b.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("broker %d (node %d): %w", i, b.NodeID, err))
		}
	}
	_ = c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(clusterActTimeout):
		_ = c.cmd.Process.Kill()
		<-done
		errs = append(errs, errors.New("the cluster program did not stop (killed)"))
	}
	liveMu.Lock()
	delete(live, c)
	liveMu.Unlock()
	if os.Getenv("WEIR_TEST_KEEP_DATA") == "" {
		os.RemoveAll(c.tmp)
	} else {
		fmt.Fprintf(os.Stderr, "keeping cluster data in %s\n", c.tmp)
	}
	return errors.Join(errs...)
}

// startCluster starts a cluster for one test and closes it when the test ends.
func startCluster(t *testing.T, name string) *Cluster {
	t.Helper()
	c, err := StartCluster(name, clusterSize)
	if err != nil {
		t.Fatalf("start %s cluster: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker log tails:\n%s", c.LogTail(40))
		}
		if err := c.Close(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
