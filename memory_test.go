package leaderelection

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
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

// inBubble runs f in a synctest bubble with a fresh in-memory Blob service.
// Call t.Parallel before, if at all: not inside.
func inBubble(t *testing.T, f func(t *testing.T, svc *memblob.Service)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) { f(t, memblob.New()) })
}

// memorySettings are testSettings on svc: a container and blob of the
// test's own.
func memorySettings(t testing.TB, svc *memblob.Service) BlobSettings {
	t.Helper()
	name := strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-"))
	return BlobSettings{
		ConnectionString: memblob.ConnectionString,
		Container:        fmt.Sprintf("mem-%d", nameCounter.Add(1)),
		Blob:             strings.Trim(name, "-"),
		RetryInterval:    500 * time.Millisecond,
		ClientOptions:    &azblob.ClientOptions{ClientOptions: svc.ClientOptions()},
	}
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
