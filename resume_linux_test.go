package leaderelection

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openInThisProcess reports whether any file descriptor of this process
// refers to path.
func openInThisProcess(t *testing.T, path string) bool {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			return true
		}
	}
	return false
}

// The file is a resource RunTaskWhenMutexAcquired holds for its run: a
// second mutex on it is refused at once, and nothing of it is left open
// when the run ends, whether by cancellation or by a panic.
func TestMutexHoldsLeaseIDFileOnlyWhileRunning(t *testing.T) {
	t.Parallel()
	s, _ := withTransport(t, testSettings(t))
	path := filepath.Join(t.TempDir(), "lease-id")
	log := newTermLog()
	leaseIDs := make(chan string, 10)
	a := startContender(t, "a", s, log.leaderFunc("a", func(ctx context.Context) error {
		term, _ := TermFromContext(ctx)
		leaseIDs <- term.LeaseID
		<-ctx.Done()
		return nil
	}), WithLeaseIDFile(path))
	log.next(t, 10*time.Second)
	id := <-leaseIDs
	assert.Equal(t, id, proposedFor(t, s, readIDFile(t, path)), "the leader's lease ID is the file's")
	require.True(t, openInThisProcess(t, path))

	b, err := NewBlobDistributedMutex(s, untilCancelled, WithLeaseIDFile(path), WithLogger(testLogger(t, "b")))
	require.NoError(t, err)
	bounded, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err = b.RunTaskWhenMutexAcquired(bounded)
	require.ErrorIs(t, err, ErrLeaseIDFileLocked)
	assert.Less(t, time.Since(start), 2*time.Second, "refused at once, not after contending")
	assert.True(t, a.mutex.IsLeader(), "the refused mutex did not disturb the leader")

	require.ErrorIs(t, a.stop(t), context.Canceled)
	assert.False(t, openInThisProcess(t, path), "no descriptor of the file outlives the run")
	assert.NotEqual(t, id, proposedFor(t, s, readIDFile(t, path)), "the file moved on to a fresh ID before the lease was released")

	// A panic in the func ends the run, and the hold on the file, too.
	c, err := NewBlobDistributedMutex(s, func(context.Context) error { panic("leader failed") },
		WithLeaseIDFile(path), WithLogger(testLogger(t, "c")))
	require.NoError(t, err)
	func() {
		defer func() { assert.Equal(t, "leader failed", recover()) }()
		_ = c.RunTaskWhenMutexAcquired(context.Background())
	}()
	assert.False(t, openInThisProcess(t, path), "no descriptor of the file outlives a panic")
	unlock, err := newFileManager(t, s, path).LockLeaseIDFile()
	require.NoError(t, err)
	unlock()
}

// Variables that make this test binary act as a leader process; see
// TestLeaseIDFileLeaderProcess.
const (
	envResumeHelper    = "LEADERELECTION_TEST_RESUME_HELPER"
	envResumeConn      = "LEADERELECTION_TEST_RESUME_CONNECTION_STRING"
	envResumeContainer = "LEADERELECTION_TEST_RESUME_CONTAINER"
	envResumeBlob      = "LEADERELECTION_TEST_RESUME_BLOB"
	envResumeFile      = "LEADERELECTION_TEST_RESUME_FILE"
)

// quorumConns joins the connection strings of a quorum's accounts in
// envResumeConn.
const quorumConns = "|"

// TestLeaseIDFileLeaderProcess is the leader process of
// TestRestartedLeaderResumesItsLeaseAtOnce and
// TestRestartedQuorumLeaderResumesItsLeasesAtOnce, run by re-executing this
// test binary: a mutex, or a quorum mutex if envResumeConn joins several
// connection strings (quorumConns). It contends with a lease ID file until
// it is killed, printing "LEADING <term> <lease ID>" when its func starts,
// and "RETURNED <µs> <refused> <error>" if RunTaskWhenMutexAcquired returns.
// In a normal test run (envResumeHelper unset) it does nothing.
func TestLeaseIDFileLeaderProcess(t *testing.T) {
	if os.Getenv(envResumeHelper) != "1" {
		return
	}
	s := BlobSettings{
		ConnectionString: os.Getenv(envResumeConn),
		Container:        os.Getenv(envResumeContainer),
		Blob:             os.Getenv(envResumeBlob),
		RetryInterval:    500 * time.Millisecond,
	}
	fn := func(ctx context.Context) error {
		term, _ := TermFromContext(ctx)
		fmt.Printf("LEADING %d %s\n", term.Number, term.LeaseID)
		<-ctx.Done()
		return nil
	}
	opts := []Option{WithLeaseIDFile(os.Getenv(envResumeFile)),
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))}
	var m *BlobDistributedMutex
	var err error
	if conns := strings.Split(s.ConnectionString, quorumConns); len(conns) > 1 {
		accounts := make([]BlobSettings, len(conns))
		for i, c := range conns {
			accounts[i] = s
			accounts[i].ConnectionString = c
		}
		m, err = NewQuorumMutex(accounts, fn, opts...)
	} else {
		m, err = NewBlobDistributedMutex(s, fn, opts...)
	}
	require.NoError(t, err)
	start := time.Now()
	err = m.RunTaskWhenMutexAcquired(context.Background())
	fmt.Printf("RETURNED %d %t %v\n", time.Since(start).Microseconds(), errors.Is(err, ErrLeaseIDFileLocked), err)
}

// leaderProcess is a TestLeaseIDFileLeaderProcess running as a child.
type leaderProcess struct {
	cmd     *exec.Cmd
	lines   chan string
	eof     chan struct{} // closed when its stdout is closed
	stderr  *syncBuffer
	once    sync.Once
	skipped []string // lines expect passed over
}

func startLeaderProcess(t *testing.T, s BlobSettings, file string) *leaderProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseIDFileLeaderProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envResumeHelper+"=1", envResumeConn+"="+s.ConnectionString,
		envResumeContainer+"="+s.Container, envResumeBlob+"="+s.Blob, envResumeFile+"="+file)
	// The kernel kills the child if this test binary dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &leaderProcess{cmd: cmd, lines: make(chan string, 100), eof: make(chan struct{}), stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("leader process %d's log:\n%s", cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

// kill SIGKILLs the process (no deferred release can run) and reaps it.
func (p *leaderProcess) kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.eof
		_ = p.cmd.Wait()
	})
}

// expect waits for the process to print a line starting with word, and
// returns that line's other fields.
func (p *leaderProcess) expect(t *testing.T, word string, within time.Duration) []string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case line := <-p.lines:
			if f := strings.Fields(line); len(f) > 0 && f[0] == word {
				return f[1:]
			}
			p.skipped = append(p.skipped, line)
		case <-p.eof:
			t.Fatalf("leader process ended without printing %s; its log:\n%s", word, p.stderr.String())
		case <-timeout:
			t.Fatalf("leader process printed no %s within %v; its log:\n%s", word, within, p.stderr.String())
		}
	}
}

// leading waits for the process to lead and returns its term and lease ID.
func (p *leaderProcess) leading(t *testing.T, within time.Duration) (int64, string) {
	t.Helper()
	f := p.expect(t, "LEADING", within)
	require.Len(t, f, 2)
	n, err := strconv.ParseInt(f[0], 10, 64)
	require.NoError(t, err)
	return n, f[1]
}

// A leader that is SIGKILLed and started again with the same lease ID file
// takes its lease straight back, with the next term number, while its lease
// still stands and a follower waits; a second process on the same file is
// refused at once and disturbs nothing.
func TestRestartedLeaderResumesItsLeaseAtOnce(t *testing.T) {
	t.Parallel()
	s := testSettings(t)
	file := filepath.Join(t.TempDir(), "lease-id")
	leader := startLeaderProcess(t, s, file)
	term, id := leader.leading(t, 30*time.Second)

	follower := newTermLog()
	fs, _ := withTransport(t, s)
	startContender(t, "follower", fs, follower.leaderFunc("follower", untilCancelled))

	for restart := 1; restart <= 2; restart++ {
		leader.kill()
		started := time.Now()
		leader = startLeaderProcess(t, s, file)
		nextTerm, nextID := leader.leading(t, 30*time.Second)
		took := time.Since(started)
		t.Logf("restart %d: leading %v after the new process was started", restart, took.Round(time.Millisecond))
		assert.Equal(t, id, nextID, "restart %d resumed the same lease ID", restart)
		assert.Equal(t, term+1, nextTerm, "restart %d: the next term, so nobody led in between", restart)
		assert.Less(t, took, time.Second, "restart %d: leading again within 1 s", restart)
		term = nextTerm
	}

	second := startLeaderProcess(t, s, file)
	f := second.expect(t, "RETURNED", 30*time.Second)
	require.GreaterOrEqual(t, len(f), 3)
	micros, err := strconv.ParseInt(f[0], 10, 64)
	require.NoError(t, err)
	assert.Equal(t, "true", f[1], "refused as ErrLeaseIDFileLocked: %s", strings.Join(f[2:], " "))
	assert.Contains(t, strings.Join(f[2:], " "), file)
	assert.Less(t, time.Duration(micros)*time.Microsecond, time.Second, "refused at once")
	assert.Empty(t, second.skipped, "the refused process printed nothing before it returned")

	info, err := newManager(t, s).Inspect(context.Background())
	require.NoError(t, err)
	assert.True(t, info.Held())
	assert.Equal(t, term, info.Leader.Number, "the refused process recorded no term")
	assert.Empty(t, follower.snapshot(), "the follower never led")
}

// A quorum leader SIGKILLed and started again with its lease ID file takes
// back its leases on three Azurite accounts at once, under the next term,
// while a follower waits: no handover (quorum.go's Q4).
func TestRestartedQuorumLeaderResumesItsLeasesAtOnce(t *testing.T) {
	t.Parallel()
	servers := startAzurites(t, 3)
	s := testSettings(t)
	var conns []string
	var accounts []BlobSettings
	for _, srv := range servers {
		a := s
		a.ConnectionString = srv.ConnectionString()
		conns = append(conns, a.ConnectionString)
		accounts = append(accounts, a)
	}
	s.ConnectionString = strings.Join(conns, quorumConns)
	file := filepath.Join(t.TempDir(), "lease-id")
	leader := startLeaderProcess(t, s, file)
	term, id := leader.leading(t, 30*time.Second)

	follower := newTermLog()
	m, err := NewQuorumMutex(accounts, follower.leaderFunc("follower", untilCancelled), WithIdentity("follower"), WithLogger(testLogger(t, "follower")))
	require.NoError(t, err)
	stop := runMutex(t, m)
	t.Cleanup(func() {
		_, err := stop()
		assert.ErrorIs(t, err, context.Canceled)
	})
	time.Sleep(time.Second) // the follower reads every account, and waits

	leader.kill()
	started := time.Now()
	leader = startLeaderProcess(t, s, file)
	nextTerm, nextID := leader.leading(t, 30*time.Second)
	took := time.Since(started)
	t.Logf("leading %v after the new process was started", took.Round(time.Millisecond))
	assert.Equal(t, id, nextID, "resumed the same lease ID")
	assert.Equal(t, term+1, nextTerm, "the next term, so nobody led in between")
	assert.Less(t, took, 5*time.Second, "leading again long before its leases could lapse (15 s)")
	info, err := m.Leader(context.Background())
	require.NoError(t, err)
	assert.Equal(t, nextTerm, info.Leader.Number)
	assert.Empty(t, follower.snapshot(), "the follower never led")
}

// A leader restarted in place on another lease duration (a rollout that
// changes LeaseDuration, or an upgrade from a version that proposed the
// file's own ID) holds a lease that no acquire of its predecessor's can
// reach. An acquire the old process left in flight (sent as a follower, its
// caller gone), applied once the new one leads, would otherwise have set the
// lease's duration to the old one: from a native 15 s lease to a 63 s ETag
// lease, a fixed 15 s lease expiring under a holder that renews an ETag
// lease by writes only, taken by a follower while that holder still leads
// (the simulator's seed 473433247278); from 15 s to a native 60 s lease, a
// 15 s one that expires between its holder's renewals. Each duration asked
// proposes its own ID from the file (fileLeaseID).
func TestARestartInPlaceWithAnotherLeaseDurationIsNotCutShortByItsPredecessorsAcquire(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration // the new process's LeaseDuration
		older bool          // the old process proposed the file's own ID, as versions before fileLeaseID did
	}{
		{"native 15s to an ETag lease of 63s", 63 * time.Second, false},
		{"native 15s to native 60s", 60 * time.Second, false},
		{"an older version's native 15s to an ETag lease of 63s", 63 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inBubble(t, func(t *testing.T, svc *memblob.Service) {
				base := testSettings(t)
				path := filepath.Join(t.TempDir(), "lease-id")
				log := newTermLog()
				b := startContender(t, "b", base, log.leaderFunc("b", untilCancelled))
				log.next(t, 10*time.Second)

				s1, tr1 := withTransport(t, base)
				held := &holdOneAcquire{next: tr1, caught: make(chan struct{})}
				s1.ClientOptions.Transport = held
				a1 := startContender(t, "a", s1, log.leaderFunc("a", untilCancelled), WithLeaseIDFile(path))
				<-held.caught // a's acquire, held in the network; it times out,
				// and a's next finds the lease b's, so a keeps its ID
				waitFor(t, 10*time.Second, "a tries again", func() bool { return held.sent.Load() >= 2 })
				require.ErrorIs(t, a1.stop(t), context.Canceled)
				require.ErrorIs(t, b.stop(t), context.Canceled) // released
				if tc.older {
					for k := range held.req.Header {
						if strings.EqualFold(k, "x-ms-proposed-lease-id") {
							held.req.Header[k] = []string{readIDFile(t, path)}
						}
					}
				}

				next := base
				next.LeaseDuration = tc.after
				startContender(t, "a2", next, log.leaderFunc("a2", untilCancelled), WithLeaseIDFile(path))
				log.next(t, 10*time.Second)
				before, ok := svc.Blob(base.Container, base.Blob)
				require.True(t, ok)
				held.apply(t) // the dead process's acquire reaches the server now
				after, ok := svc.Blob(base.Container, base.Blob)
				require.True(t, ok)
				assert.Equal(t, before.LeaseDuration, after.LeaseDuration, "the lease's duration was set by the dead process's acquire")
				assert.False(t, after.LeaseExpiry.Before(before.LeaseExpiry), "the lease was shortened by the dead process's acquire")

				startContender(t, "c", base, log.leaderFunc("c", untilCancelled))
				time.Sleep(2 * next.LeaseDuration)
				log.requireNoOverlap(t)
				running := log.running()
				require.Len(t, running, 1)
				assert.Equal(t, "a2", running[0].who, "the restarted leader leads on")
			})
		})
	}
}

// holdOneAcquire holds the first lease acquire sent through it in the
// network: its caller gets no answer (it gives up at its deadline), and the
// server gets it when apply is called.
type holdOneAcquire struct {
	next   policy.Transporter
	caught chan struct{} // closed once an acquire is held

	sent atomic.Int32 // acquires sent through it

	mu  sync.Mutex
	req *http.Request
}

func (h *holdOneAcquire) Inner() policy.Transporter { return h.next }

func (h *holdOneAcquire) Do(req *http.Request) (*http.Response, error) {
	if header(req, "x-ms-lease-action") == "acquire" {
		h.sent.Add(1)
		h.mu.Lock()
		first := h.req == nil
		if first {
			h.req = req.Clone(context.Background())
			close(h.caught)
		}
		h.mu.Unlock()
		if first {
			<-req.Context().Done()
			return nil, req.Context().Err()
		}
	}
	return h.next.Do(req)
}

func (h *holdOneAcquire) apply(t *testing.T) {
	h.mu.Lock()
	req := h.req
	h.mu.Unlock()
	resp, err := h.next.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
}
