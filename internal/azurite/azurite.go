// Package azurite installs and runs Azurite, Microsoft's Azure Storage
// emulator, for this module's tests and examples.
//
// Tests normally call Endpoint, which honours EnvURL (use an Azurite that is
// already running) and otherwise starts a private, in-memory Azurite blob
// service on a free loopback port:
//
//	conn, stop, err := azurite.Endpoint(ctx)
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(func() { _ = stop() })
//
// Start gives more control (on-disk persistence, fixed port, logs, Restart).
// Azurite is an npm package; Install puts the pinned Version into a per-user
// cache directory the first time (about 20 s and 365 MB) and is instant
// afterwards. It needs node and npm in PATH.
package azurite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds the wait for a launched Azurite to answer HTTP. It
// normally takes 1.3-1.6 s; the margin is for loaded CI machines.
const startTimeout = 30 * time.Second

// stopTimeout is how long Stop waits after SIGTERM before it uses SIGKILL.
// Azurite exits within milliseconds of SIGTERM unless a client holds a
// connection with a request half sent, in which case it lingers for about
// 5 s (its keep-alive timeout) even though it has already closed its
// listener and saved its data.
const stopTimeout = 5 * time.Second

// Options configure Start.
type Options struct {
	// Location is the directory where Azurite persists its data
	// (--location). The data survives Stop, Restart and a new Start with
	// the same Location. Empty means --inMemoryPersistence: nothing is
	// written to disk and everything is lost when the process ends.
	Location string

	// Port is the loopback TCP port to listen on. 0 picks a free one.
	Port int

	// Log receives Azurite's stdout and stderr (its access log and
	// lifecycle messages). Nil discards them. Either way the last 4 KB are
	// kept and quoted in errors from Start, Restart and Stop.
	Log io.Writer

	// TLSCert and TLSKey are PEM files of a certificate and its private
	// key (see SelfSignedCert). With them Azurite serves https (--cert,
	// --key) and URL says so; clients must trust the certificate.
	TLSCert, TLSKey string

	// OAuth makes Azurite accept bearer tokens besides the account key and
	// SAS (--oauth basic). It checks a token's JWT claims (audience,
	// issuer, lifetime: see Token) but not its signature. It needs TLSCert
	// and TLSKey: Azurite takes bearer tokens only over https.
	OAuth bool

	// KeepAlive is how long Azurite keeps an idle connection open
	// (whole seconds; see keepAliveScript for why it is not simply
	// --blobKeepAliveTimeout). Zero leaves Azurite's
	// default, 5 s: a client that sends a request every 5 s on a
	// connection of its own then opens a new connection for nearly every
	// one, and on a busy Azurite a new connection waits seconds for its
	// first answer. Azure's front ends keep idle connections for minutes
	// (its load balancers' idle timeout is 4 minutes by default).
	KeepAlive time.Duration
}

// keepAliveScript runs the blob service's script (process.argv[1], where node
// puts the script it runs, so that the service reads its flags as usual)
// with the flag its keep-alive timeout is read from declared first, on the
// same instance of the argument parser (resolved from the script).
const keepAliveScript = `const script = process.argv[1];
const args = require(require.resolve("args", { paths: [require("path").dirname(script)] }));
args.option(["", "keepAliveTimeout"], "The blob service's keep-alive timeout, in seconds (what azurite-blob reads)", 5);
require(script);`

// Server is a running Azurite blob service on 127.0.0.1, started by Start.
// Its methods are safe for concurrent use.
type Server struct {
	opts   Options
	node   string // absolute path of the node binary
	script string // Azurite's blob service entry point, from Install
	port   int

	mu   sync.Mutex
	proc *process // the current (or last) Azurite process
}

// process is one Azurite process. A Server has a new one after each Restart.
type process struct {
	cmd     *exec.Cmd
	out     *tail
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // cmd.Wait's result; read only after done is closed
	stopped bool          // Stop or Restart has dealt with it; guarded by Server.mu
}

// Start installs Azurite if needed (see Install) and starts its blob service
// on 127.0.0.1 with the development account, then waits until it answers
// HTTP requests (up to 30 s). The returned Server runs until Stop is called;
// ctx only bounds installing and starting.
//
// Azurite runs with --skipApiVersionCheck, because the Go SDK is often newer
// than the emulator, and --disableTelemetry, because with telemetry on a
// freshly started Azurite was seen to ignore SIGTERM for over 30 s.
//
// Errors say what went wrong: node or npm missing, npm failing (with its
// output), Azurite exiting early (with its output; errors.Is(err,
// syscall.EADDRINUSE) when the port was taken) or not answering in time.
func Start(ctx context.Context, opts Options) (*Server, error) {
	script, err := Install(ctx)
	if err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("azurite: node is not in PATH (%w): install Node.js, "+
			"or point %s at a running Azurite blob endpoint", err, EnvURL)
	}
	if (opts.TLSCert == "") != (opts.TLSKey == "") {
		return nil, errors.New("azurite: TLSCert and TLSKey go together")
	}
	if opts.OAuth && opts.TLSCert == "" {
		return nil, errors.New("azurite: OAuth needs TLSCert and TLSKey: Azurite takes bearer tokens only over https")
	}
	// Azurite runs in another directory (see launch).
	for _, f := range []*string{&opts.TLSCert, &opts.TLSKey} {
		if *f == "" {
			continue
		}
		if *f, err = filepath.Abs(*f); err != nil {
			return nil, fmt.Errorf("azurite: %w", err)
		}
	}
	if opts.Location != "" {
		if opts.Location, err = filepath.Abs(opts.Location); err != nil {
			return nil, fmt.Errorf("azurite: location: %w", err)
		}
		if err := os.MkdirAll(opts.Location, 0o755); err != nil {
			return nil, fmt.Errorf("azurite: creating location: %w", err)
		}
	}
	s := &Server{opts: opts, node: node, script: script}
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, fmt.Errorf("azurite: finding a free port: %w", err)
			}
		}
		p, err := s.launch(ctx, port)
		if err == nil {
			s.port, s.proc = port, p
			return s, nil
		}
		// A port found free can be taken by someone else before Azurite
		// binds it. That is only worth retrying when we chose the port.
		if opts.Port == 0 && errors.Is(err, syscall.EADDRINUSE) && attempt < 5 {
			continue
		}
		return nil, err
	}
}

// freePort asks the kernel for a currently unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts one Azurite process on port and waits until it is ready.
func (s *Server) launch(ctx context.Context, port int) (*process, error) {
	args := []string{s.script,
		"--blobHost", "127.0.0.1",
		"--blobPort", strconv.Itoa(port),
		"--skipApiVersionCheck",
		"--disableTelemetry",
	}
	if s.opts.TLSCert != "" {
		args = append(args, "--cert", s.opts.TLSCert, "--key", s.opts.TLSKey)
	}
	if s.opts.OAuth {
		args = append(args, "--oauth", "basic")
	}
	if s.opts.KeepAlive > 0 {
		secs := strconv.Itoa(int(max(time.Second, s.opts.KeepAlive) / time.Second))
		// azurite-blob declares --blobKeepAliveTimeout, but reads
		// keepAliveTimeout, which it does not declare (BlobEnvironment's
		// blobKeepAliveTimeout(), in 3.37.0): the flag is parsed and
		// ignored, and idle connections close after Node's default 5 s.
		// keepAliveScript declares the flag it reads, then runs it.
		args = append([]string{"-e", keepAliveScript}, args...)
		args = append(args, "--blobKeepAliveTimeout", secs, "--keepAliveTimeout", secs)
	}
	probeTLS, err := s.probeTLS()
	if err != nil {
		return nil, err
	}
	dir := os.TempDir()
	if s.opts.Location != "" {
		args = append(args, "--location", s.opts.Location)
		dir = s.opts.Location
	} else {
		args = append(args, "--inMemoryPersistence")
	}
	out := newTail(4096)
	out.out = s.opts.Log
	// node runs the script itself (not the .bin shim or npx), so the PID is
	// the process that listens; see scriptPath.
	cmd := exec.Command(s.node, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	// Never the caller's working directory (usually a package in the
	// source tree), in case Azurite writes anything to its cwd.
	cmd.Dir = dir
	cmd.SysProcAttr = serverProcAttr()
	// Wait also waits for the output pipe to close; bound that in case
	// something Azurite started keeps it open after Azurite is gone.
	cmd.WaitDelay = 2 * time.Second
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}

	started := make(chan error, 1)
	go p.supervise(started)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("azurite: running %s: %w", s.node, err)
	}
	if err := p.waitReady(ctx, s.scheme(), port, probeTLS); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// supervise starts the process, reports the result on started, then reaps
// the process and closes p.done.
//
// Why the goroutine is locked to its OS thread: on Linux the child gets
// Pdeathsig (SIGKILL) when the *thread* that forked it exits, not when the
// Go process exits. Go's runtime reuses threads freely, and it terminates a
// thread when a goroutine that locked it exits without unlocking, so an
// unrelated goroutine could otherwise kill Azurite in the middle of a test.
// Forking from a locked goroutine that stays blocked in Wait keeps that
// thread alive and unavailable to other goroutines for exactly as long as
// Azurite runs; once Azurite has been reaped the thread may go.
func (p *process) supervise(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	p.waitErr = p.cmd.Wait()
	close(p.done)
}

// waitReady polls Azurite over HTTP until it answers, it exits, or the start
// timeout or ctx ends. An HTTP request rather than a TCP connect: it also
// proves that the listener is Azurite and not some other process that owns
// the port.
func (p *process) waitReady(ctx context.Context, scheme string, port int, tlsConfig *tls.Config) error {
	begin := time.Now()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	// A probe can hang for its whole timeout when the port belongs to a
	// process that accepts but never answers; Azurite failing to bind that
	// port must still be reported at once.
	probeCtx, cancelProbe := context.WithCancel(ctx)
	defer cancelProbe()
	go func() {
		select {
		case <-p.done:
			cancelProbe()
		case <-probeCtx.Done():
		}
	}()
	// No keep-alive: the probes must not leave connections (and their
	// goroutines) behind, and an open connection would slow down Stop.
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: tlsConfig}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	url := fmt.Sprintf("%s://127.0.0.1:%d/%s?comp=list", scheme, port, AccountName)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		lastErr := probe(probeCtx, client, url)
		if lastErr == nil {
			return nil
		}
		// Look at an exit first: when several select cases are ready, Go
		// picks one at random, and the exit is the better explanation.
		select {
		case <-p.done:
			return p.exitedEarly(port, begin)
		default:
		}
		select {
		case <-p.done:
			return p.exitedEarly(port, begin)
		case <-ctx.Done():
			return fmt.Errorf("azurite: not answering on 127.0.0.1:%d after %s (%w); last attempt: %v; output:\n%s",
				port, time.Since(begin).Round(time.Millisecond), ctx.Err(), lastErr, p.out.String())
		case <-tick.C:
		}
	}
}

// exitedEarly explains an Azurite that exited before it was ready. Call it
// only after p.done is closed.
func (p *process) exitedEarly(port int, begin time.Time) error {
	if strings.Contains(p.out.String(), "EADDRINUSE") {
		return fmt.Errorf("azurite: port 127.0.0.1:%d is already in use (%w); Azurite exited (%v) with output:\n%s",
			port, syscall.EADDRINUSE, p.waitErr, p.out.String())
	}
	return fmt.Errorf("azurite: exited (%v) %s after launch, before it answered on 127.0.0.1:%d; output:\n%s",
		p.waitErr, time.Since(begin).Round(time.Millisecond), port, p.out.String())
}

// probe sends one request that Azurite answers with 403 (it is not signed)
// and a Server header naming Azurite.
func probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if server := resp.Header.Get("Server"); !strings.HasPrefix(server, "Azurite-Blob") {
		return fmt.Errorf("the port answered %q with Server header %q, which is not Azurite's blob service", resp.Status, server)
	}
	return nil
}

// kill stops p the hard way and reaps it; for processes that never became
// ready, whose data does not matter.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// URL returns the blob service endpoint, http://127.0.0.1:PORT/devstoreaccount1
// (https with Options.TLSCert). It stays the same across Restart.
func (s *Server) URL() string {
	return fmt.Sprintf("%s://127.0.0.1:%d/%s", s.scheme(), s.port, AccountName)
}

func (s *Server) scheme() string {
	if s.opts.TLSCert != "" {
		return "https"
	}
	return "http"
}

// probeTLS is how the readiness probe trusts Azurite's certificate: as the
// one certificate it trusts (Go accepts a leaf found among the roots).
func (s *Server) probeTLS() (*tls.Config, error) {
	if s.opts.TLSCert == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(s.opts.TLSCert)
	if err != nil {
		return nil, fmt.Errorf("azurite: reading TLSCert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("azurite: TLSCert %s holds no PEM certificate", s.opts.TLSCert)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// ConnectionString returns a connection string for the development account at
// URL, for azblob.NewClientFromConnectionString.
func (s *Server) ConnectionString() string {
	return ConnectionStringFor(s.URL())
}

// PID returns the process ID of the node process that serves the blob API.
// Signalling it acts on Azurite itself: SIGKILL simulates a storage crash.
// (With Options.Location, such a crash loses the writes of the last few
// seconds: Azurite saves its database every 5 s and on SIGTERM, not on each
// write.)
// After Stop it still returns the PID of the stopped process; after Restart,
// that of the new one.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.cmd.Process.Pid
}

// Done returns a channel that is closed when the current Azurite process has
// exited, whether through Stop or on its own. After Restart it refers to the
// new process, so call Done again.
func (s *Server) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.done
}

// Stop shuts Azurite down: SIGTERM (Azurite then closes its listener, saves
// its data and exits with status 0), SIGKILL if it is still running 5 s
// later, and it waits until the process has been reaped, so the port is free
// when Stop returns. It is idempotent.
//
// Stop returns an error only if Azurite had already exited before Stop, which
// means it crashed or someone killed it; the error carries its exit status
// and last output. Stop after such an error, or after Restart failed,
// returns nil.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() error {
	p := s.proc
	if p.stopped {
		return nil
	}
	p.stopped = true
	select {
	case <-p.done:
		return fmt.Errorf("azurite: pid %d had already exited before Stop (%v); last output:\n%s",
			p.cmd.Process.Pid, p.waitErr, p.out.String())
	default:
	}
	if err := terminate(p.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = p.cmd.Process.Kill()
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		// SIGKILL loses nothing at this point: Azurite persists its data
		// as soon as it handles SIGTERM, before it waits for clients.
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return nil
}

// Restart stops Azurite as Stop does and starts it again on the same port
// with the same Options, so that clients keep working with the same URL. With
// Options.Location the data survives; in memory it does not. If Azurite had
// already exited (say the test killed PID() to simulate a crash), Restart
// just starts it again. Other methods block while Restart runs.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.stopLocked() // the only error is "had already exited", which is fine here
	// The port is normally free at once (node binds with SO_REUSEADDR), but
	// retry briefly in case the kernel or a previous probe still holds it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := s.launch(ctx, s.port)
		if err == nil {
			s.proc = p
			return nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Endpoint is what tests and examples call to get a blob endpoint. If EnvURL
// is set it returns a connection string for that endpoint and a stop
// function that does nothing; otherwise it starts an in-memory Azurite with
// Start and stop is its Server.Stop. stop is never nil, even with an error,
// so it can be deferred before checking err.
func Endpoint(ctx context.Context) (connectionString string, stop func() error, err error) {
	noop := func() error { return nil }
	if u := os.Getenv(EnvURL); u != "" {
		return ConnectionStringFor(u), noop, nil
	}
	s, err := Start(ctx, Options{})
	if err != nil {
		return "", noop, err
	}
	return s.ConnectionString(), s.Stop, nil
}

// ConnectionStringFor returns a connection string for the development account
// (AccountName, AccountKey) at the blob endpoint blobURL, such as
// http://127.0.0.1:10000/devstoreaccount1. The protocol follows blobURL's
// scheme.
func ConnectionStringFor(blobURL string) string {
	blobURL = strings.TrimRight(blobURL, "/")
	proto := "http"
	if strings.HasPrefix(strings.ToLower(blobURL), "https://") {
		proto = "https"
	}
	return "DefaultEndpointsProtocol=" + proto +
		";AccountName=" + AccountName +
		";AccountKey=" + AccountKey +
		";BlobEndpoint=" + blobURL + ";"
}
