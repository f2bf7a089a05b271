package leaderelection

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A quorum mutex against real storage: three Azurite processes of the
// test's own (the shared one of azuritetest is one account, and a quorum
// needs its accounts to fail apart), each an account.

// startAzurites starts n in-memory Azurite processes at once, each stopped
// when the test ends.
func startAzurites(t *testing.T, n int) []*azurite.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	servers := make([]*azurite.Server, n)
	errs := make(chan error, n)
	for i := range servers {
		go func() {
			s, err := azurite.Start(ctx, azurite.Options{})
			servers[i] = s
			errs <- err
		}()
	}
	var failed []error
	for range servers {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	for _, s := range servers {
		if s != nil {
			t.Cleanup(func() { _ = s.Stop() })
		}
	}
	require.Empty(t, failed, "the test needs %d Azurite processes of its own (Node.js and npm on PATH)", n)
	return servers
}

// The leader of a quorum over three Azurite processes leads on, with no
// handover and its func never cancelled, through one of them SIGKILLed past
// its lease there (a lease duration and 3 s): it reports itself degraded
// meanwhile. (The chaos command's account-down trial keeps one down for 2
// minutes.) That Azurite
// comes back on its port empty (in memory), as an account whose container
// was deleted: the leader takes its lease back and writes its term there,
// and holds all three again.
func TestQuorumMutexLeadsThroughAnAzuriteKilled(t *testing.T) {
	t.Parallel()
	servers := startAzurites(t, 3)
	base := testSettings(t)
	var accounts []BlobSettings
	for _, srv := range servers {
		s := base
		s.ConnectionString = srv.ConnectionString()
		s.RenewInterval = 2 * time.Second // the account taken back sooner: the test is shorter
		accounts = append(accounts, s)
	}
	lease := accounts[0].withDefaults().LeaseDuration

	log := newTermLog()
	var number atomic.Int64 // the last term started
	lead := func(ctx context.Context) error {
		term, _ := TermFromContext(ctx)
		number.Store(term.Number)
		return untilCancelled(ctx)
	}
	var mutexes []*BlobDistributedMutex
	for i := range 3 {
		name := fmt.Sprint("q", i)
		var mine []BlobSettings
		for _, s := range accounts {
			s, _ := withTransport(t, s)
			mine = append(mine, s)
		}
		m, err := NewQuorumMutex(mine, log.leaderFunc(name, lead), WithIdentity(name), WithLogger(testLogger(t, name)))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.RunTaskWhenMutexAcquired(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				assert.ErrorIs(t, err, context.Canceled, "%s", name)
			case <-time.After(30 * time.Second):
				t.Errorf("%s: RunTaskWhenMutexAcquired did not return within 30s of cancellation", name)
			}
		})
		mutexes = append(mutexes, m)
	}

	first := log.next(t, 2*lease)
	var leader *BlobDistributedMutex
	for i, m := range mutexes {
		if first.who == fmt.Sprint("q", i) {
			leader = m
		}
	}
	require.Eventually(t, func() bool { return leader.Degraded() == nil }, lease, 50*time.Millisecond, "the leader holds all three accounts")

	const down = 1
	killed := time.Now()
	require.NoError(t, syscall.Kill(servers[down].PID(), syscall.SIGKILL))
	<-servers[down].Done()
	time.Sleep(lease + 3*time.Second - time.Since(killed))
	require.True(t, leader.IsLeader(), "the leader leads on through an account down for %v", time.Since(killed).Round(time.Second))
	// Its last grant there has run out: the account is not held.
	assert.ErrorContains(t, leader.Degraded(), fmt.Sprintf("leading on 2 of 3 accounts; not held: accounts[%d]", down))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, servers[down].Restart(ctx))
	restarted := time.Now()
	require.Eventually(t, func() bool { return leader.Degraded() == nil }, lease, 50*time.Millisecond,
		"the leader takes back the account that came back empty: %v", leader.Degraded())
	t.Logf("account down %v; held again %v after its restart", restarted.Sub(killed).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	// Held counts from the acquire's send time; the leader writes its
	// running term there after that pass's retakes (writeHeld): until
	// then the blob carries the seed it was created again with (the term,
	// no identity). So the record is waited for, within the same bound.
	var info LeaseInfo
	require.Eventually(t, func() bool {
		var err error
		info, err = leader.quorum.accounts[down].Inspect(ctx)
		return err == nil && info.Held() && info.Leader.Identity != ""
	}, lease, 50*time.Millisecond, "the leader's record written on the account that came back")
	tm := log.snapshot()
	require.Len(t, tm, 1, "no handover")
	assert.True(t, tm[0].cancelled.IsZero(), "the leader's func was never cancelled (%v)", tm[0].cause)
	assert.Equal(t, number.Load(), info.Leader.Number, "the term written on the account that came back")
	assert.Equal(t, first.who, info.Leader.Identity, "the leader's own record there")
}
