// Package etcdpeer runs etcd's own leader election (client/v3/concurrency's
// Election, over a Session whose lease has a TTL) against a local
// single-node etcd server, so that the benchmarks can measure the best-known
// peer side by side with this library, under the same faults. The server
// is Debian's etcd-server package (etcd 3.4), started by this package on
// loopback ports; the client is go.etcd.io/etcd/client/v3, a dependency of
// the tools' module only, never of the library's.
package etcdpeer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/procnet"
)

// Debian's package that holds the etcd server, and the command it installs.
const (
	debianPackage = "etcd-server"
	binary        = "etcd"
)

// Binary returns the path of the etcd server binary, or an error that says
// how to install it.
func Binary() (string, error) {
	p, err := exec.LookPath(binary)
	if err != nil {
		return "", fmt.Errorf("etcdpeer: no %q on PATH: install Debian's %s package (apt-get install -y %s)", binary, debianPackage, debianPackage)
	}
	return p, nil
}

// Install makes sure the etcd server is installed: if it is not on PATH, it
// runs apt-get install for Debian's package (as root only; apt-get update
// first if the package is unknown), and fails with a message naming the
// package otherwise.
func Install(ctx context.Context, log io.Writer) (string, error) {
	if p, err := Binary(); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("etcdpeer: etcd is not installed, and installing it needs root: run apt-get install -y %s", debianPackage)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", fmt.Errorf("etcdpeer: etcd is not installed and there is no apt-get: install etcd 3.4 (Debian: %s) and put %q on PATH", debianPackage, binary)
	}
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-q", debianPackage)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = log, log
		return cmd.Run()
	}
	if err := install(); err != nil {
		// A fresh machine's package lists may not know the package yet.
		update := exec.CommandContext(ctx, "apt-get", "update", "-q")
		update.Stdout, update.Stderr = log, log
		if uerr := update.Run(); uerr != nil {
			return "", fmt.Errorf("etcdpeer: apt-get update: %w", uerr)
		}
		if err := install(); err != nil {
			return "", fmt.Errorf("etcdpeer: apt-get install -y %s: %w", debianPackage, err)
		}
	}
	return Binary()
}

// Version is the server's version as etcd --version prints it ("etcd 3.4.23").
func Version() string {
	p, err := Binary()
	if err != nil {
		return "etcd not installed"
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil {
		return "etcd ?"
	}
	line, _, _ := strings.Cut(string(out), "\n") // "etcd Version: 3.4.23"
	return "etcd " + strings.TrimSpace(strings.TrimPrefix(line, "etcd Version:"))
}

// Options configures a server.
type Options struct {
	Dir string    // its data directory (kept across Restart)
	Log io.Writer // its output; nil discards it
}

// Server is one etcd process, a single-node cluster on loopback ports.
type Server struct {
	opts             Options
	bin              string
	clientPort, peer int

	mu   sync.Mutex
	proc *process
}

type process struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	stopped bool // we stopped it: its exit status is ours, not a crash
}

// Start starts a single-node etcd on free loopback ports and waits until it
// answers its health check.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	// Free ports can be taken by someone else between the probe and etcd's
	// bind, when many servers start at once: try again with new ones.
	var lastErr error
	for range 5 {
		s := &Server{opts: opts, bin: bin}
		if s.clientPort, err = freePort(); err != nil {
			return nil, err
		}
		if s.peer, err = freePort(); err != nil {
			return nil, err
		}
		if s.proc, lastErr = s.launch(ctx); lastErr == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Endpoint is the server's client address, host:port.
func (s *Server) Endpoint() string { return "127.0.0.1:" + strconv.Itoa(s.clientPort) }

func (s *Server) launch(ctx context.Context) (*process, error) {
	client := "http://" + s.Endpoint()
	peer := "http://127.0.0.1:" + strconv.Itoa(s.peer)
	cmd := exec.Command(s.bin,
		"--name", "peer",
		"--data-dir", s.opts.Dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "peer="+peer,
		"--logger", "zap", "--log-outputs", "stderr",
	)
	cmd.Stdout, cmd.Stderr = s.opts.Log, s.opts.Log
	cmd.Dir = s.opts.Dir
	// Its own process group (a Ctrl-C reaches only the harness, which stops
	// it), and SIGKILL if the thread that started it exits: see supervise.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go p.supervise(started)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("etcdpeer: starting %s: %w", s.bin, err)
	}
	if err := s.waitReady(ctx, p); err != nil {
		p.stop()
		return nil, err
	}
	// The health check may have been answered by another run's etcd that
	// took the port first (ours then exits, unable to bind): make sure the
	// listener is ours.
	if ok, err := procnet.ListensOn(p.cmd.Process.Pid, s.clientPort); err == nil && !ok {
		p.stop()
		return nil, fmt.Errorf("etcdpeer: port %d answered, but not by the etcd we started", s.clientPort)
	}
	return p, nil
}

// supervise starts the process and reaps it, from a goroutine locked to its
// OS thread: Pdeathsig fires when the thread that forked the child exits,
// and Go ends a thread only when a goroutine that locked it exits, so this
// keeps the thread for as long as etcd runs.
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

// waitReady polls etcd's /health until it reports healthy (it has elected
// itself leader), the process exits, or 20 s pass.
func (s *Server) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	url := "http://" + s.Endpoint() + "/health"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := hc.Do(req); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`)) {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("etcdpeer: etcd exited before it was ready: %v", p.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("etcdpeer: etcd on %s not healthy: %w", s.Endpoint(), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM, SIGKILL after 5 s, and waits until etcd is reaped.
func (p *process) stop() {
	p.stopped = true
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Restart stops etcd and starts it again on the same ports with the same
// data: its leases survive (etcd persists them, and extends them by their
// TTL when it comes back).
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc.stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := s.launch(ctx)
		if err == nil {
			s.proc = p
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops etcd and waits until it is reaped. It reports an error if etcd
// had exited before it was asked to.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc.stopped {
		return nil
	}
	select {
	case <-s.proc.done:
		if s.proc.waitErr != nil {
			return errors.New("etcdpeer: etcd had exited before Stop: " + s.proc.waitErr.Error())
		}
		return nil
	default:
	}
	s.proc.stop()
	return nil
}
