package compat

// Security (Weir only): SCRAM users managed with kadm, SASL_SSL with SCRAM-SHA-256/512 and
// PLAIN, refused credentials, mutual TLS, and garbage on a TLS port. Each test starts a broker
// of its own with the listeners it needs: PLAINTEXT first, on the port the harness waits on,
// then SASL_SSL and/or SSL on more ports, with TLS material from tests/compat/tls/make-certs.sh.

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const weirOnlySecurity = "the security tests configure a Weir broker of their own (WEIR_SECURITY_*)"

// listener is a broker seen through one of its listeners: clients bootstrap on its address,
// and Metadata must tell them that listener's endpoint for every broker.
type listener struct {
	*Broker
	addr string
}

func (l listener) Seeds() []string { return []string{l.addr} }

func (l listener) Nodes() map[int32]string { return map[int32]string{l.NodeID: l.addr} }

// secureBroker is a Weir broker with a PLAINTEXT listener (Port) and the TLS listeners of
// startSecureBroker.
type secureBroker struct {
	*Broker
	certs string            // make-certs.sh output
	addrs map[string]string // listener name (= protocol) → host:port
}

func (s *secureBroker) on(name string) listener {
	addr, ok := s.addrs[name]
	if !ok {
		panic("no listener " + name)
	}
	return listener{s.Broker, addr}
}

// makeCerts writes the test CA, server and client certificates into a temp dir.
func makeCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(repoRoot(), "tests", "compat", "tls", "make-certs.sh")
	if out, err := exec.Command("bash", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("make-certs.sh: %v\n%s", err, out)
	}
	return dir
}

// startSecureBroker starts a broker with PLAINTEXT on its Port and one more listener per name
// of protocols (SASL_SSL, SSL), the keystore server.pem and the truststore ca.pem, plus env.
func startSecureBroker(t *testing.T, name string, protocols []string, env ...string) *secureBroker {
	t.Helper()
	s := &secureBroker{certs: makeCerts(t), addrs: map[string]string{}}
	s.Broker = startBroker(t, name, func(b *Broker) error {
		ports, err := b.MorePorts(len(protocols))
		if err != nil {
			return err
		}
		ls := []string{"PLAINTEXT://" + b.Addr()}
		s.addrs["PLAINTEXT"] = b.Addr()
		for i, p := range protocols {
			addr := "127.0.0.1:" + strconv.Itoa(ports[i])
			ls = append(ls, p+"://"+addr)
			s.addrs[p] = addr
		}
		b.env = append(b.env,
			"WEIR_SECURITY_LISTENERS="+strings.Join(ls, ","),
			"WEIR_SECURITY_SSL_KEYSTORE_LOCATION="+filepath.Join(s.certs, "server.pem"),
			"WEIR_SECURITY_SSL_TRUSTSTORE_LOCATION="+filepath.Join(s.certs, "ca.pem"))
		b.env = append(b.env, env...)
		return nil
	})
	return s
}

// tlsConfig trusts the test CA and, unless cert is "", presents DIR/cert.pem with DIR/cert.key.
func tlsConfig(t *testing.T, dir, cert string) *tls.Config {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("no certificate in %s/ca.pem", dir)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(filepath.Join(dir, cert+".pem"), filepath.Join(dir, cert+".key"))
		if err != nil {
			t.Fatalf("load %s: %v", cert, err)
		}
		// Always present it: from Certificates, Go sends only a certificate issued by a CA the
		// server names as acceptable, so other-client.pem would never reach the broker.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }
	}
	return cfg
}

// upsertUsers creates or replaces SCRAM credentials and fails the test on any error.
func upsertUsers(t *testing.T, adm *kadm.Client, us ...kadm.UpsertSCRAM) {
	t.Helper()
	res, err := adm.AlterUserSCRAMs(ctxFor(t, 30*time.Second), nil, us)
	if err != nil {
		t.Fatalf("alter user SCRAMs: %v", err)
	}
	for _, u := range us {
		r, ok := res[u.User]
		if !ok || r.Err != nil {
			t.Fatalf("upsert %s %v: result %v %v %s", u.User, u.Mechanism, ok, r.Err, r.ErrMessage)
		}
	}
}

// describeUsers returns every user's credentials as "MECHANISM=iterations=N" strings.
func describeUsers(t *testing.T, adm *kadm.Client) map[string][]string {
	t.Helper()
	ds, err := adm.DescribeUserSCRAMs(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatalf("describe user SCRAMs: %v", err)
	}
	out := map[string][]string{}
	for u, d := range ds {
		if d.Err != nil {
			t.Fatalf("describe all users: %s: %v %s", u, d.Err, d.ErrMessage)
		}
		var cs []string
		for _, c := range d.CredInfos {
			cs = append(cs, c.String())
		}
		slices.Sort(cs)
		out[u] = cs
	}
	return out
}

func sameUsers(a, b map[string][]string) bool {
	return maps.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

// alterErr is the error of user's part of an AlterUserSCRAMs request (nil if it succeeded).
func alterErr(t *testing.T, adm *kadm.Client, user string, del []kadm.DeleteSCRAM, up []kadm.UpsertSCRAM) error {
	t.Helper()
	res, err := adm.AlterUserSCRAMs(ctxFor(t, 30*time.Second), del, up)
	if err != nil {
		t.Fatalf("alter user SCRAMs: %v", err)
	}
	r, ok := res[user]
	if !ok {
		t.Fatalf("alter user SCRAMs: no result for %s: %+v", user, res)
	}
	if r.Err != nil {
		return fmt.Errorf("%w (%s)", r.Err, r.ErrMessage)
	}
	return nil
}

// TestSecurityScramUsers: AlterUserSCRAMs creates alice (SCRAM-SHA-256, 8192 iterations) and
// bob (SCRAM-SHA-512, 4096), DescribeUserSCRAMs shows exactly those, for all users and for a
// named one; an upsert replaces a credential; deleting a credential that does not exist is
// RESOURCE_NOT_FOUND and changes nothing; 1000 iterations is UNACCEPTABLE_CREDENTIAL and
// stores nothing; deleting alice's credential removes alice.
func TestSecurityScramUsers(t *testing.T) {
	skipUnlessWeir(t, weirOnlySecurity)
	b := startBroker(t, "scram-users")
	adm := newAdmin(t, b)

	if got := describeUsers(t, adm); len(got) != 0 {
		t.Fatalf("a new broker has SCRAM users: %v", got)
	}
	upsertUsers(t, adm,
		kadm.UpsertSCRAM{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 8192, Password: "alice-secret"},
		kadm.UpsertSCRAM{User: "bob", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "bob-secret"})
	want := map[string][]string{
		"alice": {"SCRAM-SHA-256=iterations=8192"},
		"bob":   {"SCRAM-SHA-512=iterations=4096"},
	}
	if got := describeUsers(t, adm); !sameUsers(got, want) {
		t.Fatalf("users %v, want %v", got, want)
	}
	named, err := adm.DescribeUserSCRAMs(ctxFor(t, 30*time.Second), "bob")
	if err != nil || len(named) != 1 || named["bob"].Err != nil || len(named["bob"].CredInfos) != 1 ||
		named["bob"].CredInfos[0] != (kadm.CredInfo{Mechanism: kadm.ScramSha512, Iterations: 4096}) {
		t.Fatalf("describe bob: %v %+v", err, named)
	}

	// An upsert of an existing credential replaces it.
	upsertUsers(t, adm, kadm.UpsertSCRAM{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 16384, Password: "alice-secret-2"})
	want["alice"] = []string{"SCRAM-SHA-256=iterations=16384"}
	if got := describeUsers(t, adm); !sameUsers(got, want) {
		t.Fatalf("users after replacing alice's credential: %v, want %v", got, want)
	}

	// Deleting what does not exist: a user without credentials, a mechanism bob has none for.
	if err := alterErr(t, adm, "carol", []kadm.DeleteSCRAM{{User: "carol", Mechanism: kadm.ScramSha256}}, nil); !errors.Is(err, kerr.ResourceNotFound) {
		t.Fatalf("delete carol's SCRAM-SHA-256 credential: %v, want RESOURCE_NOT_FOUND", err)
	}
	if err := alterErr(t, adm, "bob", []kadm.DeleteSCRAM{{User: "bob", Mechanism: kadm.ScramSha256}}, nil); !errors.Is(err, kerr.ResourceNotFound) {
		t.Fatalf("delete bob's SCRAM-SHA-256 credential: %v, want RESOURCE_NOT_FOUND", err)
	}
	if got := describeUsers(t, adm); !sameUsers(got, want) {
		t.Fatalf("users after refused deletions: %v, want %v", got, want)
	}

	// 1000 iterations (kadm refuses to salt so few, so the test salts the password itself).
	salt := make([]byte, 24)
	_, _ = rand.Read(salt)
	salted, err := pbkdf2.Key(sha256.New, "dave-secret", salt, 1000, sha256.Size)
	if err != nil {
		t.Fatal(err)
	}
	err = alterErr(t, adm, "dave", nil, []kadm.UpsertSCRAM{{User: "dave", Mechanism: kadm.ScramSha256, Iterations: 1000, Salt: salt, SaltedPassword: salted}})
	if !errors.Is(err, kerr.UnacceptableCredential) {
		t.Fatalf("upsert with 1000 iterations: %v, want UNACCEPTABLE_CREDENTIAL", err)
	}
	if got := describeUsers(t, adm); !sameUsers(got, want) {
		t.Fatalf("users after a refused upsert: %v, want %v", got, want)
	}

	// Deleting alice's only credential removes alice.
	if err := alterErr(t, adm, "alice", []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha256}}, nil); err != nil {
		t.Fatalf("delete alice's credential: %v", err)
	}
	delete(want, "alice")
	if got := describeUsers(t, adm); !sameUsers(got, want) {
		t.Fatalf("users after deleting alice: %v, want %v", got, want)
	}
	named, err = adm.DescribeUserSCRAMs(ctxFor(t, 30*time.Second), "alice")
	if err != nil || !errors.Is(named["alice"].Err, kerr.ResourceNotFound) {
		t.Fatalf("describe deleted alice: %v %+v, want RESOURCE_NOT_FOUND", err, named)
	}
}

// roundTrip produces n records (acks=all) to a new 3-partition topic through tg with opts,
// reads them all back with a group consumer through tg with opts, commits, and checks the
// committed offsets; it also checks that Metadata on tg names tg's endpoint for every broker.
func roundTrip(t *testing.T, tg Target, n int, opts ...kgo.Opt) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, tg, append([]kgo.Opt{kgo.ClientID("compat-admin")}, opts...)...))
	md, err := adm.BrokerMetadata(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatalf("broker metadata: %v", err)
	}
	brokers := map[int32]string{}
	for _, br := range md.Brokers {
		brokers[br.NodeID] = net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port)))
	}
	if !maps.Equal(brokers, tg.Nodes()) {
		t.Fatalf("metadata on %v names brokers %v, want %v", tg.Seeds(), brokers, tg.Nodes())
	}

	topic, group := unique("security"), unique("security-group")
	createTopic(t, adm, topic, 3)
	sent := keyedRecords(topic, 0, n, 10)
	produceAll(t, newProducer(t, tg, opts...), sent)
	_, end := byPartition(t, sent, map[int32]int64{0: 0, 1: 0, 2: 0})

	cons := newClient(t, tg, append([]kgo.Opt{kgo.ClientID("compat-consumer"),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	want := map[string]int{}
	for _, r := range sent {
		want[string(r.Value)]++
	}
	got := map[string]int{}
	count := 0
	deadline := time.Now().Add(30 * time.Second)
	for count < n {
		if time.Now().After(deadline) {
			t.Fatalf("group consumer read %d of %d records", count, n)
		}
		for _, r := range pollSome(t, cons, 500*time.Millisecond, 1000) {
			got[string(r.Value)]++
			count++
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("group consumer read %d records that are not the %d sent", count, n)
	}
	if err := cons.CommitUncommittedOffsets(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if c := committedOffsets(t, adm, group, topic); !equalOffsets(c, end) {
		t.Fatalf("committed offsets %v, want the end offsets %v", c, end)
	}
}

// TestSecuritySASL: on a SASL_SSL listener (PLAIN enabled besides SCRAM), a client of each of
// SCRAM-SHA-256 (alice), SCRAM-SHA-512 (bob) and PLAIN (alice) sees the broker at the SASL_SSL
// endpoint in Metadata, creates a topic, produces 300 records with acks=all, and a group
// consumer reads all of them back and commits.
func TestSecuritySASL(t *testing.T) {
	skipUnlessWeir(t, weirOnlySecurity)
	s := startSecureBroker(t, "sasl", []string{"SASL_SSL"},
		"WEIR_SECURITY_SASL_ENABLED_MECHANISMS=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512")
	upsertUsers(t, newAdmin(t, s.Broker),
		kadm.UpsertSCRAM{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 8192, Password: "alice-secret"},
		kadm.UpsertSCRAM{User: "bob", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "bob-secret"})
	tlsCfg := tlsConfig(t, s.certs, "")
	for _, c := range []struct {
		name string
		mech sasl.Mechanism
	}{
		{"SCRAM-SHA-256", scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism()},
		{"SCRAM-SHA-512", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism()},
		{"PLAIN", plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism()},
	} {
		t.Run(c.name, func(t *testing.T) {
			roundTrip(t, s.on("SASL_SSL"), 300, kgo.DialTLSConfig(tlsCfg), kgo.SASL(c.mech))
		})
	}
}

// refused checks that a client of tg with opts is refused: its first request (Metadata) and a
// produce of one record both fail, each within 20 s. franz-go retries a topic's metadata until
// RecordRetries, so a refused producer gives up after two tries (MetadataMinAge apart) rather
// than waiting for its context. Returns both errors.
func refused(t *testing.T, tg Target, topic string, opts ...kgo.Opt) (reqErr, produceErr error) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tg.Seeds()...), kgo.ClientID("compat-refused"),
		kgo.RequestRetries(3), kgo.RetryTimeout(10 * time.Second),
		kgo.RecordRetries(2), kgo.MetadataMinAge(500 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	defer cl.Close()
	bounded := func(what string, f func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		took := time.Since(start)
		if err == nil {
			t.Fatalf("%s through %v succeeded", what, tg.Seeds())
		}
		if errors.Is(err, context.DeadlineExceeded) || took >= 20*time.Second {
			t.Fatalf("%s through %v did not fail by itself within 20 s (%v): %v", what, tg.Seeds(), took, err)
		}
		t.Logf("%s refused after %v: %v", what, took.Round(time.Millisecond), err)
		return err
	}
	reqErr = bounded("metadata request", func(ctx context.Context) error {
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		return err
	})
	produceErr = bounded("produce", func(ctx context.Context) error {
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("must not be stored")}).FirstErr()
	})
	return reqErr, produceErr
}

// emptyTopic checks over PLAINTEXT that nothing reached the topic.
func emptyTopic(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	l, err := adm.ListEndOffsets(ctxFor(t, 30*time.Second), topic)
	for p, o := range listOffsets(t, l, err, topic) {
		if o != 0 {
			t.Fatalf("%s/%d has end offset %d: a refused client's record was stored", topic, p, o)
		}
	}
}

// TestSecuritySASLRefused: on a SASL_SSL listener with the default mechanisms, a client with
// a wrong password (bob), with a mechanism its user has no credential for (carol), or of a user
// that does not exist (mallory) is refused with SASL_AUTHENTICATION_FAILED, and one asking for
// PLAIN (not enabled) with UNSUPPORTED_SASL_MECHANISM: its first request and its produce fail,
// each within 20 s, and nothing is stored. Right after, alice and bob produce with their
// passwords (failures never lock a user out: TestSecurityPasswordRotation).
func TestSecuritySASLRefused(t *testing.T) {
	skipUnlessWeir(t, weirOnlySecurity)
	s := startSecureBroker(t, "sasl-refused", []string{"SASL_SSL"})
	adm := newAdmin(t, s.Broker)
	upsertUsers(t, adm,
		kadm.UpsertSCRAM{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "alice-secret"},
		kadm.UpsertSCRAM{User: "bob", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "bob-secret"},
		kadm.UpsertSCRAM{User: "carol", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "carol-secret"})
	topic := unique("sasl-refused")
	createTopic(t, adm, topic, 1)
	saslL := s.on("SASL_SSL")
	tlsOpt := kgo.DialTLSConfig(tlsConfig(t, s.certs, ""))

	for _, c := range []struct {
		name string
		mech sasl.Mechanism
		want error
	}{
		{"wrong password", scram.Auth{User: "bob", Pass: "not-bob-secret"}.AsSha256Mechanism(), kerr.SaslAuthenticationFailed},
		{"wrong mechanism", scram.Auth{User: "carol", Pass: "carol-secret"}.AsSha512Mechanism(), kerr.SaslAuthenticationFailed},
		{"unknown user", scram.Auth{User: "mallory", Pass: "alice-secret"}.AsSha256Mechanism(), kerr.SaslAuthenticationFailed},
		{"PLAIN not enabled", plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism(), kerr.UnsupportedSaslMechanism},
	} {
		t.Run(c.name, func(t *testing.T) {
			reqErr, produceErr := refused(t, saslL, topic, tlsOpt, kgo.SASL(c.mech))
			if !errors.Is(reqErr, c.want) || !errors.Is(produceErr, c.want) {
				t.Fatalf("metadata request: %v; produce: %v; want %v for both", reqErr, produceErr, c.want)
			}
		})
	}
	emptyTopic(t, adm, topic)
	for _, a := range []scram.Auth{{User: "alice", Pass: "alice-secret"}, {User: "bob", Pass: "bob-secret"}} {
		ctx := ctxFor(t, 20*time.Second)
		prod := newProducer(t, saslL, tlsOpt, kgo.SASL(a.AsSha256Mechanism()))
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(a.User)}).FirstErr(); err != nil {
			t.Fatalf("produce as %s with the right password: %v", a.User, err)
		}
	}
	l, err := adm.ListEndOffsets(ctxFor(t, 30*time.Second), topic)
	if got := listOffsets(t, l, err, topic); got[0] != 2 {
		t.Fatalf("end offset %d after alice's and bob's records, want 2", got[0])
	}
}

// TestSecurityMutualTLS: on an SSL listener that requires client certificates, a client with
// client.pem (signed by the truststore's CA) sees the SSL endpoint in Metadata, produces and
// consumes; a client with no certificate, and one with a certificate of another CA, cannot
// produce (refused within 20 s, nothing stored).
func TestSecurityMutualTLS(t *testing.T) {
	skipUnlessWeir(t, weirOnlySecurity)
	s := startSecureBroker(t, "mtls", []string{"SSL"}, "WEIR_SECURITY_SSL_CLIENT_AUTH=required")
	ssl := s.on("SSL")
	roundTrip(t, ssl, 200, kgo.DialTLSConfig(tlsConfig(t, s.certs, "client")))

	adm := newAdmin(t, s.Broker)
	topic := unique("mtls-refused")
	createTopic(t, adm, topic, 1)
	for _, c := range []struct{ name, cert string }{{"no certificate", ""}, {"another CA", "other-client"}} {
		t.Run(c.name, func(t *testing.T) {
			reqErr, produceErr := refused(t, ssl, topic, kgo.DialTLSConfig(tlsConfig(t, s.certs, c.cert)))
			for _, err := range []error{reqErr, produceErr} {
				if !strings.Contains(err.Error(), "tls: ") {
					t.Fatalf("refused with %v, want a TLS alert", err)
				}
			}
		})
	}
	emptyTopic(t, adm, topic)
}

// TestSecurityTLSGarbage: 1 KiB of random bytes on a raw TCP connection to an SSL listener
// makes the broker close the connection within 5 s (at most a TLS alert comes back first),
// and a TLS client produces and consumes right after.
func TestSecurityTLSGarbage(t *testing.T) {
	skipUnlessWeir(t, weirOnlySecurity)
	s := startSecureBroker(t, "tls-garbage", []string{"SSL"})
	ssl := s.on("SSL")

	for i := 0; i < 3; i++ {
		conn, err := net.DialTimeout("tcp", ssl.addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", ssl.addr, err)
		}
		junk := make([]byte, 1024)
		_, _ = rand.Read(junk)
		// No TLS record type (0x14-0x18) first: a random handshake header could announce a
		// record longer than 1 KiB that a server rightly waits for.
		if junk[0] >= 0x14 && junk[0] <= 0x18 {
			junk[0] |= 0x80
		}
		if _, err := conn.Write(junk); err != nil && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("write garbage: %v", err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		back, err := io.ReadAll(io.LimitReader(conn, 64<<10))
		conn.Close()
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection after garbage (first byte %#x): %v after %v, %d bytes back; want EOF or a reset within 5 s",
				junk[0], err, time.Since(start), len(back))
		}
		if len(back) > 64 {
			t.Fatalf("%d bytes back for garbage, want at most an alert", len(back))
		}
		t.Logf("garbage starting %#x: closed after %v, %d bytes back (%x), %v", junk[0], time.Since(start).Round(time.Millisecond), len(back), back, err)
	}
	roundTrip(t, ssl, 100, kgo.DialTLSConfig(tlsConfig(t, s.certs, "")))
}

// TestSecurityPasswordRotation: alice's SCRAM-SHA-512 password is rotated while a client with
// the old one keeps failing from the same address, far more than ten times a minute; clients
// with the new password (SCRAM and PLAIN) still get in, at once. A guesser trying many PLAIN
// passwords for alice from the same address meanwhile costs the broker at most its budget of
// password checks (weir_sasl_password_checks_total), and alice's new password still gets in.
func TestSecurityPasswordRotation(t *testing.T) {
	skipUnlessWeir(t, weirOnlySecurity)
	s := startSecureBroker(t, "sasl-rotation", []string{"SASL_SSL"},
		"WEIR_SECURITY_SASL_ENABLED_MECHANISMS=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512")
	adm := newAdmin(t, s.Broker)
	upsertUsers(t, adm, kadm.UpsertSCRAM{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "old-secret"})
	topic := unique("sasl-rotation")
	createTopic(t, adm, topic, 1)
	saslL := s.on("SASL_SSL")
	tlsOpt := kgo.DialTLSConfig(tlsConfig(t, s.certs, ""))
	// One connection and one authentication per call.
	login := func(mech sasl.Mechanism) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(saslL.Seeds()...), tlsOpt, kgo.SASL(mech), kgo.RequestRetries(0),
			kgo.ClientID("compat-rotation"))
		if err != nil {
			return err
		}
		defer cl.Close()
		return cl.Ping(ctxFor(t, 20*time.Second))
	}
	if err := login(scram.Auth{User: "alice", Pass: "old-secret"}.AsSha512Mechanism()); err != nil {
		t.Fatalf("alice with her password before the rotation: %v", err)
	}
	upsertUsers(t, adm, kadm.UpsertSCRAM{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "new-secret"})

	// The stale client: old password, again and again.
	stale := func(n int) {
		for i := 0; i < n; i++ {
			if err := login(scram.Auth{User: "alice", Pass: "old-secret"}.AsSha512Mechanism()); !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Errorf("the old password after the rotation: %v, want SASL_AUTHENTICATION_FAILED", err)
			}
		}
	}
	stale(15)
	for _, c := range []struct {
		name string
		mech sasl.Mechanism
	}{
		{"SCRAM-SHA-512", scram.Auth{User: "alice", Pass: "new-secret"}.AsSha512Mechanism()},
		{"PLAIN", plain.Auth{User: "alice", Pass: "new-secret"}.AsMechanism()},
	} {
		if err := login(c.mech); err != nil {
			t.Fatalf("alice's new password (%s) after 15 failures of her old one from this address: %v", c.name, err)
		}
	}

	// A guesser, and the stale client still going: the new password still gets in.
	checks := func() float64 { return metricValue(t, s.Broker, "weir_sasl_password_checks_total") }
	before, start := checks(), time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 40; i++ {
			_ = login(plain.Auth{User: "alice", Pass: fmt.Sprintf("guess-%d", i)}.AsMechanism())
		}
	}()
	stale(5)
	prod := newProducer(t, saslL, tlsOpt, kgo.SASL(scram.Auth{User: "alice", Pass: "new-secret"}.AsSha512Mechanism()))
	if err := prod.ProduceSync(ctxFor(t, 20*time.Second), &kgo.Record{Topic: topic, Value: []byte("rotated")}).FirstErr(); err != nil {
		t.Fatalf("produce with the new password while a guesser and the stale client fail: %v", err)
	}
	if err := login(plain.Auth{User: "alice", Pass: "new-secret"}.AsMechanism()); err != nil {
		t.Fatalf("alice's new password over PLAIN while a guesser fails: %v", err)
	}
	<-done
	spent, took := checks()-before, time.Since(start)
	// The budget: 10 checks a second per address, 20 at once.
	budget := 20 + 10*took.Seconds()
	t.Logf("40 guesses and 2 right logins in %v: %.0f password checks (budget %.0f)", took.Round(time.Millisecond), spent, budget)
	if spent < 1 || spent > budget+2 {
		t.Fatalf("%v password checks in %v, want between 1 and the budget %.0f", spent, took, budget)
	}
}
