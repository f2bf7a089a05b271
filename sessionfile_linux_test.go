package leaderelection

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// resumeSettings are shardSettings with a lease long enough that a
// restarted owner resumes its session before the other instances could
// break it, on a loaded machine.
func resumeSettings(t *testing.T) BlobSettings {
	s := shardSettings(t)
	s.LeaseDuration, s.StopMargin = 12*time.Second, 2*time.Second
	return s
}

// heldBy returns the shards Inspect shows held by session, sorted.
func heldBy(t *testing.T, o *ShardOwner, session string) []string {
	t.Helper()
	info, err := o.Inspect(context.Background())
	require.NoError(t, err)
	var out []string
	for _, sh := range info.Shards {
		if sh.Held && sh.Session == session {
			out = append(out, sh.Name)
		}
	}
	return out
}

// ranOn returns the shards each owner of the log ever ran.
func ranOn(l *shardLog, who string) map[string]bool {
	out := map[string]bool{}
	for _, tm := range l.snapshot() {
		if tm.who == who {
			out[tm.shard] = true
		}
	}
	return out
}

// A ShardOwner with a lease ID file that is stopped and started again in
// place keeps its session and every shard it held: nothing is handed on or
// released as it stops, no shard runs anywhere else meanwhile, and each runs
// again on the new owner under a higher term. A second owner given the same
// file while one runs is refused at once.
func TestRestartedShardOwnerKeepsItsSessionAndShards(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := resumeSettings(t)
		file := filepath.Join(t.TempDir(), "session")
		names := shardNames(30)
		log := &shardLog{}
		a := startOwner(t, "a", s, names, log.fn("a", nil), WithLeaseIDFile(file))
		b := startOwner(t, "b", s, names, log.fn("b", nil))
		waitFor(t, 60*time.Second, "the shards spread over a and b", func() bool { return balanced(log, len(names), "a", "b") })

		second, err := NewShardOwner(s, names, log.fn("second", nil), WithLeaseIDFile(file), WithLogger(testLogger(t, "second")))
		require.NoError(t, err)
		began := time.Now()
		err = second.Run(context.Background())
		require.ErrorIs(t, err, ErrLeaseIDFileLocked)
		assert.Contains(t, err.Error(), file)
		assert.Less(t, time.Since(began), time.Second, "refused at once")

		session := a.owner.Session()
		require.NotEmpty(t, session)
		assert.Equal(t, session, readIDFile(t, file), "the file names the running session")
		held := a.owner.Owned()
		bHeld := b.owner.Owned()
		before := map[string]int64{}
		for _, tm := range log.snapshot() {
			if tm.who == "a" {
				before[tm.shard] = max(before[tm.shard], tm.number)
			}
		}
		require.ErrorIs(t, a.stop(t), context.Canceled)
		assert.Equal(t, session, readIDFile(t, file), "the file still names the session")
		assert.Equal(t, held, heldBy(t, b.owner, session), "the stopped owner released no shard and handed none on")

		restarted := time.Now()
		a2 := startOwner(t, "a", s, names, log.fn("a2", nil), WithLeaseIDFile(file))
		took := waitFor(t, 30*time.Second, "every shard of a running again on a2", func() bool {
			run := log.running()
			for _, name := range held {
				if !slices.Equal(run[name], []string{"a2"}) {
					return false
				}
			}
			return true
		})
		t.Logf("%d shards running again %v after the restart", len(held), took.Round(time.Millisecond))
		assert.Equal(t, session, a2.owner.Session(), "the session resumed")
		assert.Equal(t, held, a2.owner.Owned())
		assert.Equal(t, bHeld, b.owner.Owned(), "b's shards stayed put")
		for name := range ranOn(log, "b") {
			assert.Contains(t, bHeld, name, "b never ran a shard of a's")
		}
		for _, tm := range log.snapshot() {
			if tm.who == "a2" {
				assert.Greater(t, tm.number, before[tm.shard], "shard %s: a higher term after the restart", tm.shard)
				assert.False(t, tm.start.Before(restarted), "a2 ran it before the restart")
			}
		}

		// A resumed session adopts shards handed to it only by the conditional
		// acquire (never at once from a note): b's graceful stop hands it all of
		// b's, each running on a2 well within the lease duration after which a2
		// would break a shard recorded for it that it could not adopt.
		stopped := time.Now()
		require.ErrorIs(t, b.stop(t), context.Canceled)
		took = waitFor(t, 30*time.Second, "every shard on a2", func() bool { return balanced(log, len(names), "a2") })
		t.Logf("b's %d shards running on a2 %v after b's stop", len(bHeld), took.Round(time.Millisecond))
		gaps := handoffGaps(t, log, stopped, "a2")
		require.Len(t, gaps, len(bHeld))
		assert.Less(t, gaps[len(gaps)-1], s.LeaseDuration/2, "a shard handed to the resumed session idled for %v", gaps[len(gaps)-1])
		log.requireNeverTwice(t)
	})
}

// A session kept for a restart that never comes is broken by the others
// once it has stood silent for its lease duration, and they take its
// shards; an owner started later with the file starts a new session and
// takes its share back, and no shard ever runs twice.
func TestKeptSessionIsTakenOverWhenNoRestartComes(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		file := filepath.Join(t.TempDir(), "session")
		names := shardNames(20)
		log := &shardLog{}
		a := startOwner(t, "a", s, names, log.fn("a", nil), WithLeaseIDFile(file))
		startOwner(t, "b", s, names, log.fn("b", nil))
		waitFor(t, 60*time.Second, "the shards spread over a and b", func() bool { return balanced(log, len(names), "a", "b") })
		session := a.owner.Session()
		require.ErrorIs(t, a.stop(t), context.Canceled)
		waitFor(t, 60*time.Second, "b running every shard", func() bool { return balanced(log, len(names), "b") })

		a2 := startOwner(t, "a", s, names, log.fn("a2", nil), WithLeaseIDFile(file))
		waitFor(t, 60*time.Second, "the shards spread over a2 and b", func() bool { return balanced(log, len(names), "a2", "b") })
		assert.NotEqual(t, session, a2.owner.Session(), "a dead session is never resumed")
		assert.Equal(t, a2.owner.Session(), readIDFile(t, file), "the file names the new session")
		log.requireNeverTwice(t)
	})
}

// A lease ID file that holds something other than a session ID stops Run
// at once, with an error that names the file, and is left as it is.
func TestShardOwnerRefusesAGarbledLeaseIDFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "session")
	require.NoError(t, os.WriteFile(file, []byte("not a session\n"), 0o600))
	o, err := NewShardOwner(offlineSettings(), []string{"a"}, func(ctx context.Context, _ string) error { return nil }, WithLeaseIDFile(file))
	require.NoError(t, err)
	err = o.Run(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), file)
	assert.Contains(t, err.Error(), "WithLeaseIDFile")
	data, rerr := os.ReadFile(file)
	require.NoError(t, rerr)
	assert.Equal(t, "not a session\n", string(data))
}

// Environment of TestShardOwnerFileProcess.
const (
	envShardHelper    = "LEADERELECTION_TEST_SHARD_FILE_HELPER"
	envShardConn      = "LEADERELECTION_TEST_SHARD_FILE_CONNECTION_STRING"
	envShardContainer = "LEADERELECTION_TEST_SHARD_FILE_CONTAINER"
	envShardPrefix    = "LEADERELECTION_TEST_SHARD_FILE_PREFIX"
	envShardFile      = "LEADERELECTION_TEST_SHARD_FILE"
	envShardCount     = "LEADERELECTION_TEST_SHARD_FILE_SHARDS"
)

// TestShardOwnerFileProcess is the owner process of
// TestKilledShardOwnerResumesItsShards, run by re-executing this test
// binary. It runs a ShardOwner with a lease ID file until it is killed,
// printing "RUN <shard> <term> <session>" as each shard func starts, and
// "RETURNED <refused> <error>" if Run returns. In a normal test run
// (envShardHelper unset) it does nothing.
func TestShardOwnerFileProcess(t *testing.T) {
	if os.Getenv(envShardHelper) != "1" {
		return
	}
	s := BlobSettings{
		ConnectionString: os.Getenv(envShardConn),
		Container:        os.Getenv(envShardContainer),
		Blob:             os.Getenv(envShardPrefix),
		LeaseDuration:    12 * time.Second,
		StopMargin:       2 * time.Second,
		RetryInterval:    shardTestRetry,
	}
	n, err := strconv.Atoi(os.Getenv(envShardCount))
	require.NoError(t, err)
	var out sync.Mutex
	var o *ShardOwner
	o, err = NewShardOwner(s, shardNames(n), func(ctx context.Context, shard string) error {
		term, _ := TermFromContext(ctx)
		out.Lock()
		fmt.Printf("RUN %s %d %s\n", shard, term.Number, o.Session())
		out.Unlock()
		<-ctx.Done()
		return nil
	}, WithLeaseIDFile(os.Getenv(envShardFile)), WithIdentity("killed"),
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	err = o.Run(context.Background())
	fmt.Printf("RETURNED %t %v\n", errors.Is(err, ErrLeaseIDFileLocked), err)
}

// ownerProcess is a TestShardOwnerFileProcess running as a child.
type ownerProcess struct {
	cmd    *exec.Cmd
	lines  chan []string
	eof    chan struct{}
	stderr *syncBuffer
	once   sync.Once
}

func startOwnerProcess(t *testing.T, s BlobSettings, file string, shards int) *ownerProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestShardOwnerFileProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envShardHelper+"=1", envShardConn+"="+s.ConnectionString, envShardContainer+"="+s.Container,
		envShardPrefix+"="+s.Blob, envShardFile+"="+file, envShardCount+"="+strconv.Itoa(shards))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &ownerProcess{cmd: cmd, lines: make(chan []string, 1000), eof: make(chan struct{}), stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 0 {
				p.lines <- f
			}
		}
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("owner process %d's log:\n%s", cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

func (p *ownerProcess) kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.eof
		_ = p.cmd.Wait()
	})
}

// next returns the next line starting with word, failing after within.
func (p *ownerProcess) next(t *testing.T, word string, within time.Duration) []string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case f := <-p.lines:
			if f[0] == word {
				return f[1:]
			}
		case <-p.eof:
			t.Fatalf("owner process ended without printing %s; its log:\n%s", word, p.stderr.String())
		case <-timeout:
			t.Fatalf("owner process printed no %s within %v; its log:\n%s", word, within, p.stderr.String())
		}
	}
}

// A ShardOwner process SIGKILLed and started again with the same lease ID
// file (a crash loop, an OOM kill) resumes its session and takes back every
// shard it held, each under a higher term: none moves to the other
// instance, which runs on undisturbed. A third process given the file while
// the second runs is refused at once.
func TestKilledShardOwnerResumesItsShards(t *testing.T) {
	t.Parallel()
	s := resumeSettings(t)
	file := filepath.Join(t.TempDir(), "session")
	const n = 40
	log := &shardLog{}
	p1 := startOwnerProcess(t, s, file, n)
	first := p1.next(t, "RUN", 30*time.Second)
	session := first[2]
	b := startOwner(t, "b", s, shardNames(n), log.fn("b", nil))
	var held []string
	waitFor(t, 60*time.Second, "the shards spread over the process and b", func() bool {
		held = heldBy(t, b.owner, session)
		return len(held) == n/2 && len(b.owner.Owned()) == n/2
	})
	terms := map[string]int64{}
	info, err := b.owner.Inspect(context.Background())
	require.NoError(t, err)
	for _, sh := range info.Shards {
		terms[sh.Name] = sh.Term.Number
	}
	bHeld := b.owner.Owned()

	p1.kill()
	restarted := time.Now()
	p2 := startOwnerProcess(t, s, file, n)
	running := map[string]bool{}
	for len(running) < len(held) {
		f := p2.next(t, "RUN", 30*time.Second)
		require.Len(t, f, 3)
		assert.Equal(t, session, f[2], "the session resumed")
		assert.Contains(t, held, f[0], "the restarted process runs only shards it held")
		number, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		assert.Greater(t, number, terms[f[0]], "shard %s: a higher term after the restart", f[0])
		running[f[0]] = true
	}
	t.Logf("%d shards running again %v after the killed process was started again", len(held), time.Since(restarted).Round(time.Millisecond))
	assert.Equal(t, bHeld, b.owner.Owned(), "b's shards stayed put")
	for name := range ranOn(log, "b") {
		assert.Contains(t, bHeld, name, "b never ran a shard of the killed process's")
	}

	p3 := startOwnerProcess(t, s, file, n)
	f := p3.next(t, "RETURNED", 30*time.Second)
	assert.Equal(t, "true", f[0], "refused as ErrLeaseIDFileLocked: %s", strings.Join(f[1:], " "))
	assert.Equal(t, held, heldBy(t, b.owner, session), "the refused process disturbed nothing")
}

// The interleaving a review found (issue 28): a process dies with its
// session kept for a restart; the others judge it silent, break its lease,
// mark it ended and take its shards; then the acquire the session's starter
// sent long ago reaches the server late and leases the dead session's blob
// again under its ID; then a process starts again with the lease ID file.
// It must not resume the session (the others run its shards as dead), but
// start a new one and get its share as a newcomer; with shard funcs that
// return by themselves, so that shards go free and are claimed again and
// again, no shard ever runs twice. The dead blob, leased again, is broken
// and collected by the others.
func TestASessionJudgedDeadIsNeverResumedEvenLeasedAgainUnderItsID(t *testing.T) {
	t.Parallel()
	s := shardSettings(t)
	raw := newRawBlob(t, s)
	file := filepath.Join(t.TempDir(), "session")
	names := shardNames(12)
	log := &shardLog{}
	brief := func(ctx context.Context, _ string) error {
		// Long enough to be claimed by either owner in turn.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(300+rand.IntN(900)) * time.Millisecond):
		}
		return nil
	}
	a := startOwner(t, "a", s, names, log.fn("a", brief), WithLeaseIDFile(file))
	b := startOwner(t, "b", s, names, log.fn("b", brief))
	waitFor(t, 30*time.Second, "a runs shards", func() bool { return ranOn(log, "a")["shard-000"] || len(ranOn(log, "a")) >= 3 })
	session := a.owner.Session()
	require.NotEmpty(t, session)
	require.ErrorIs(t, a.stop(t), context.Canceled) // kept for the next process: its lease stays
	blob := s.Blob + "/" + wire.SessionsDir + session

	bc := raw.cc.NewBlobClient(blob)
	waitFor(t, 3*s.LeaseDuration, "b marks a's session ended", func() bool {
		props, err := bc.GetProperties(context.Background(), nil)
		require.NoError(t, err)
		return *props.LeaseState != lease.StateTypeLeased && readRecord(s.Container, blob, props.Metadata).EndMark
	})
	// The acquire a's session sent as it started, delayed in the network.
	lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: &session})
	require.NoError(t, err)
	_, err = lc.AcquireLease(context.Background(), -1, nil)
	require.NoError(t, err, "the late acquire leases the dead session's blob again under its ID")

	a2 := startOwner(t, "a", s, names, log.fn("a2", brief), WithLeaseIDFile(file))
	waitFor(t, 30*time.Second, "a2 runs shards", func() bool { return len(ranOn(log, "a2")) >= 3 })
	assert.NotEqual(t, session, a2.owner.Session(), "a session judged dead is never resumed")
	assert.Equal(t, a2.owner.Session(), readIDFile(t, file), "the file names the new session")
	// Shards go free and are claimed again, by either owner, for a while.
	time.Sleep(3 * s.LeaseDuration)
	log.requireNeverTwice(t)
	waitFor(t, 3*s.LeaseDuration, "the dead session's blob, leased again, broken or collected", func() bool {
		props, err := bc.GetProperties(context.Background(), nil)
		return bloberror.HasCode(err, bloberror.BlobNotFound) || err == nil && *props.LeaseState != lease.StateTypeLeased
	})
	require.ErrorIs(t, a2.stop(t), context.Canceled)
	require.ErrorIs(t, b.stop(t), context.Canceled)
	log.requireNeverTwice(t)
}
