package leaderelection

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests on the in-memory Blob service (internal/memblob), whose answers
// the contract tests there pin to Azurite's, under virtual time
// (testing/synctest): the library's real code, through the real SDK, with
// no network and no real waiting. A test of a 15 s lease's failover takes
// milliseconds.

// bubbles holds, for the *testing.T of each bubble of inBubble, its
// in-memory Blob service: testSettings, and every helper built on it, give
// settings on it there.
var bubbles sync.Map

// inBubble runs f in a synctest bubble with a fresh in-memory Blob service,
// which testSettings(t) then points at. Call t.Parallel before, if at all:
// not inside.
func inBubble(t *testing.T, f func(t *testing.T, svc *memblob.Service)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		svc := memblob.New()
		bubbles.Store(t, svc)
		t.Cleanup(func() { bubbles.Delete(t) })
		f(t, svc)
	})
}

// bubbleService is the in-memory Blob service of t's bubble, or nil.
func bubbleService(t testing.TB) *memblob.Service {
	if svc, ok := bubbles.Load(t); ok {
		return svc.(*memblob.Service)
	}
	return nil
}

// memorySettings are testSettings on svc.
func memorySettings(t testing.TB, svc *memblob.Service) BlobSettings {
	t.Helper()
	s := testSettings(t)
	s.ConnectionString = memblob.ConnectionString
	s.ClientOptions = &azblob.ClientOptions{ClientOptions: svc.ClientOptions()}
	return s
}

// instanceOn gives one instance of s a transport of its own in front of
// svc, to fail or cut off on its own (faults.Transport).
func instanceOn(s BlobSettings, svc *memblob.Service) (BlobSettings, *faults.Transport) {
	tr := faults.Over(svc)
	s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}}
	return s, tr
}

// bubbleClock gives a mutex or owner the bubble's boot clock (see seams).
func bubbleClock() Option { return func(o *options) { o.seams.boot = clock.Monotonic() } }

// clockFor is bubbleClock for settings on an in-memory service (run in a
// bubble), and nothing for the others.
func clockFor(s BlobSettings) Option {
	if memoryOf(s) != nil {
		return bubbleClock()
	}
	return nil
}

// memoryOf is the in-memory service s reaches, directly or through a
// fault transport of instanceOn, or nil.
func memoryOf(s BlobSettings) *memblob.Service {
	if s.ClientOptions == nil {
		return nil
	}
	switch tr := s.ClientOptions.Transport.(type) {
	case *memblob.Service:
		return tr
	case interface{ Inner() policy.Transporter }: // a *faults.Transport, or a test's wrapper
		s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr.Inner()}}
		return memoryOf(s)
	}
	return nil
}

// A leader cut off from storage stops its func by its safety deadline,
// StopMargin before its native 15 s lease can expire on the server, and a
// follower takes over once it has: on the in-memory service, in virtual
// time, the whole failover takes milliseconds of wall time.
func TestACutOffLeaderStopsBeforeAFollowerTakesOverInVirtualTime(t *testing.T) {
	t.Parallel()
	wall := time.Now()
	inBubble(t, func(t *testing.T, svc *memblob.Service) {
		s := memorySettings(t, svc)
		s.LeaseDuration = 15 * time.Second
		log := newTermLog()
		sa, cut := instanceOn(s, svc)
		a, err := NewBlobDistributedMutex(sa, log.leaderFunc("a", untilCancelled), WithIdentity("a"), bubbleClock(), WithLogger(testLogger(t, "a")))
		require.NoError(t, err)
		b, err := NewBlobDistributedMutex(s, log.leaderFunc("b", untilCancelled), WithIdentity("b"), bubbleClock(), WithLogger(testLogger(t, "b")))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 2)
		go func() { done <- a.RunTaskWhenMutexAcquired(ctx) }()
		first := <-log.ch
		require.Equal(t, "a", first.who)
		go func() { done <- b.RunTaskWhenMutexAcquired(ctx) }()
		time.Sleep(2 * time.Second)
		cut.Blackhole()
		cutAt := time.Now()
		second := <-log.ch
		require.Equal(t, "b", second.who)
		log.requireNoOverlap(t)
		terms := log.snapshot()
		ended := terms[0].end
		assert.LessOrEqual(t, ended.Sub(cutAt), s.LeaseDuration, "a stops within the lease of its last renewal")
		assert.GreaterOrEqual(t, second.start.Sub(ended), s.withDefaults().StopMargin,
			"b starts at least StopMargin after a's func stopped: once the lease expired on the server")
		cancel()
		for range 2 {
			require.ErrorIs(t, <-done, context.Canceled)
		}
		cut.Close()
	})
	t.Logf("wall time %v", time.Since(wall).Round(time.Millisecond))
}
