package compat

// Cluster harness: Weir brokers on one machine sharing one private PostgreSQL and one s3s-fs,
// each started with the flags a user gives (--node-id, --listen, --advertised, --admin-listen,
// --data-dir, --metadata-url, --object-store-url). PostgreSQL and s3s-fs run as children of
// the test process with a parent-death signal, like the brokers, so a run that dies (a test
// timeout panics) leaves nothing behind; Close stops everything and removes the temp dir.
//
// PostgreSQL needs the version 15 binaries ($WEIR_PG_BIN, default /usr/lib/postgresql/15/bin);
// initdb refuses to run as root, so as root PostgreSQL runs as the `postgres` user. s3s-fs is
// $S3S_FS, ~/.cargo/bin/s3s-fs or on PATH.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	clusterSize  = 3
	s3Bucket     = "weir-test"
	s3AccessKey  = "weir-access"
	s3SecretKey  = "weir-secret"
	serverWaitTo = 30 * time.Second
)

// A child process with its exit observed once.
type child struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startChild(cmd *exec.Cmd, logPath string, deathSig syscall.Signal, cred *syscall.Credential) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: deathSig, Credential: cred}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) done() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// stop sends sig and waits for the exit (SIGKILL after stopTimeout).
func (c *child) stop(sig syscall.Signal) {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.exited:
	case <-time.After(stopTimeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// pgServer is a private PostgreSQL, the postmaster a child of the test process.
type pgServer struct {
	root string
	port int
	cred *syscall.Credential // the postgres user's, when we are root
	proc *child
}

func pgBin(name string) string {
	dir := os.Getenv("WEIR_PG_BIN")
	if dir == "" {
		dir = "/usr/lib/postgresql/15/bin"
	}
	return filepath.Join(dir, name)
}

func (p *pgServer) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(pgBin(name), args...)
	cmd.Dir = p.root // the postgres user may not read our working directory
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

func startPG(root string) (*pgServer, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	p := &pgServer{root: root}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(root, uid, gid); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(root, "data")
	if out, err := p.command("initdb", "-D", data, "-A", "trust", "-U", "weir", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// Another process may take the port between our probe and the server's bind: try again.
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(pgBin("postgres"), "-D", data, "-p", strconv.Itoa(ports[0]), "-k", root,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
		cmd.Dir = root
		// SIGQUIT: immediate shutdown, the backends go with the postmaster.
		proc, err := startChild(cmd, filepath.Join(root, "log"), syscall.SIGQUIT, p.cred)
		if err != nil {
			return nil, err
		}
		p.proc, p.port = proc, ports[0]
		if last = p.waitReady(); last == nil {
			return p, nil
		}
		p.stop()
	}
	return nil, fmt.Errorf("PostgreSQL did not start: %v\n%s", last, tail(filepath.Join(root, "log"), 30))
}

// waitReady waits until the server accepts connections (pg_isready), or has exited.
func (p *pgServer) waitReady() error {
	deadline := time.Now().Add(serverWaitTo)
	for time.Now().Before(deadline) {
		if p.proc.done() {
			return errors.New("postgres exited")
		}
		if p.command("pg_isready", "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(p.port)).Run() == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready within %v", serverWaitTo)
}

// createDatabase creates database name and returns its URL.
func (p *pgServer) createDatabase(name string) (string, error) {
	if out, err := p.command("createdb", "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "weir", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("createdb %s: %v\n%s", name, err, out)
	}
	return fmt.Sprintf("postgres://weir@127.0.0.1:%d/%s", p.port, name), nil
}

func (p *pgServer) stop() {
	if p == nil || p.proc == nil {
		return
	}
	p.proc.stop(syscall.SIGQUIT)
	p.proc = nil
}

// s3sFs is a private S3 server serving root, with one bucket.
type s3sFs struct {
	root string
	port int
	proc *child
}

func s3sFsBinary() string {
	if p := os.Getenv("S3S_FS"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cargo", "bin", "s3s-fs")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "s3s-fs"
}

func startS3(root string) (*s3sFs, error) {
	if err := os.MkdirAll(filepath.Join(root, s3Bucket), 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	s := &s3sFs{root: root, port: ports[0]}
	cmd := exec.Command(s3sFsBinary(), "--host", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--access-key", s3AccessKey, "--secret-key", s3SecretKey, root)
	if s.proc, err = startChild(cmd, filepath.Join(root, "s3s-fs.log"), syscall.SIGKILL, nil); err != nil {
		return nil, fmt.Errorf("%w (install it: cargo install s3s-fs@0.14.1 --features binary --locked, or set S3S_FS)", err)
	}
	deadline := time.Now().Add(serverWaitTo)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		if s.proc.done() || time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("s3s-fs did not start\n%s", tail(filepath.Join(root, "s3s-fs.log"), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// env is what the brokers' object_store crate reads (AmazonS3Builder::from_env).
func (s *s3sFs) env() []string {
	return []string{
		"AWS_ENDPOINT=http://127.0.0.1:" + strconv.Itoa(s.port),
		"AWS_ALLOW_HTTP=true",
		"AWS_ACCESS_KEY_ID=" + s3AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s3SecretKey,
		"AWS_REGION=us-east-1",
		"AWS_VIRTUAL_HOSTED_STYLE_REQUEST=false",
	}
}

func (s *s3sFs) stop() {
	if s == nil || s.proc == nil {
		return
	}
	s.proc.stop(syscall.SIGKILL)
	s.proc = nil
}

// Cluster is a set of Weir brokers on one PostgreSQL and one s3s-fs.
type Cluster struct {
	Name    string
	Brokers []*Broker
	// MetadataURL and ObjectStoreURL are what every broker is given.
	MetadataURL    string
	ObjectStoreURL string

	// Zones, if set: broker with node id n is in Zones[(n-1) % len(Zones)] (--zone).
	Zones []string

	root string
	pg   *pgServer
	s3   *s3sFs
	env  []string
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
	root, err := os.MkdirTemp("", "weir-compat-go-"+name+"-")
	if err != nil {
		return nil, err
	}
	// PostgreSQL may run as another user, under this directory.
	if err := os.Chmod(root, 0o711); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	c := &Cluster{Name: name, root: root, ObjectStoreURL: "s3://" + s3Bucket + "/weir",
		env: []string{"WEIR_WAL_FORMAT=false"}, Zones: zones}
	liveMu.Lock()
	live[c] = true
	liveMu.Unlock()
	if err := c.launch(n); err != nil {
		err = fmt.Errorf("start cluster %s: %w", name, err)
		if cerr := c.Close(); cerr != nil {
			err = fmt.Errorf("%w; close: %v", err, cerr)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) launch(n int) error {
	var err error
	if c.pg, err = startPG(filepath.Join(c.root, "pg")); err != nil {
		return err
	}
	if c.MetadataURL, err = c.pg.createDatabase("weir"); err != nil {
		return err
	}
	if c.s3, err = startS3(filepath.Join(c.root, "s3")); err != nil {
		return err
	}
	c.env = append(c.env, c.s3.env()...)
	for i := 0; i < n; i++ {
		if _, err := c.AddBroker(); err != nil {
			return err
		}
	}
	return nil
}

// AddBroker starts a broker with the next node id and returns it.
func (c *Cluster) AddBroker() (*Broker, error) {
	id := int32(1)
	for _, b := range c.Brokers {
		if b.NodeID >= id {
			id = b.NodeID + 1
		}
	}
	root := filepath.Join(c.root, fmt.Sprintf("node-%d", id))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	b, err := newBroker("weir", fmt.Sprintf("%s-%d", c.Name, id), root)
	if err != nil {
		return nil, err
	}
	b.NodeID = id
	b.args = []string{"--node-id", strconv.Itoa(int(id)), "--advertised", b.Addr(),
		"--metadata-url", c.MetadataURL, "--object-store-url", c.ObjectStoreURL}
	if len(c.Zones) > 0 {
		b.Zone = c.Zones[int(id-1)%len(c.Zones)]
		b.args = append(b.args, "--zone", b.Zone)
	}
	b.env = c.env
	// A broker whose test process died is killed: a clean stop would wait on a gone s3s-fs.
	b.deathSig = syscall.SIGKILL
	c.Brokers = append(c.Brokers, b)
	return b, b.Start()
}

// Start starts broker i again (on its data dir and ports) and waits until it is ready.
func (c *Cluster) Start(i int) error { return c.Brokers[i].Start() }

// Stop sends broker i SIGTERM; it must exit 0 within 30 s.
func (c *Cluster) Stop(i int) error { return c.Brokers[i].Stop() }

// Kill sends broker i SIGKILL and waits until it is gone.
func (c *Cluster) Kill(i int) error { return c.Brokers[i].Kill() }

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
func (c *Cluster) S3Root() string { return c.s3.root }

func (c *Cluster) LogTail(n int) string {
	var out []string
	for _, b := range c.Brokers {
		out = append(out, fmt.Sprintf("broker %d: %s", b.NodeID, b.LogTail(n)))
	}
	return strings.Join(out, "\n")
}

// Close stops every broker (SIGTERM, each must exit 0), then s3s-fs and PostgreSQL, and
// removes the cluster's directory (kept if WEIR_TEST_KEEP_DATA is set).
func (c *Cluster) Close() error {
	var errs []error
	for _, b := range c.Brokers {
		if err := b.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("broker %d: %w", b.NodeID, err))
		}
	}
	c.s3.stop()
	c.pg.stop()
	liveMu.Lock()
	delete(live, c)
	liveMu.Unlock()
	if os.Getenv("WEIR_TEST_KEEP_DATA") == "" {
		os.RemoveAll(c.root)
	} else {
		fmt.Fprintf(os.Stderr, "keeping cluster data in %s\n", c.root)
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
