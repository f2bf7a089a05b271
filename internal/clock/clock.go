// Package clock holds the clocks and waits the library's timing rests on:
// the clock that counts the time a host spends suspended (CLOCK_BOOTTIME),
// which the safety fuse reads beside Go's monotonic clock, and the jittered
// waits of every loop. It imports nothing of the library.
//
// Nothing here reads a clock that a test cannot replace: the monotonic
// clock is time.Now's (inside a testing/synctest bubble, the bubble's), and
// the boot clock is a func value that a caller may swap (see Boot).
package clock

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Boot is a clock that keeps counting while the host is suspended, as a
// duration since some fixed moment: CLOCK_BOOTTIME on Linux, elsewhere the
// wall clock. Go's monotonic clock stops on Linux while the host sleeps,
// but the storage server's does not, so a lease's safety deadline is held
// on both (see the library's safety fuse).
type Boot func() time.Duration

// SinceBoot is the host's boot clock (see Boot).
func SinceBoot() time.Duration { return sinceBoot() }

// Monotonic is a Boot clock read off time.Now's monotonic clock, from the
// moment it was made: for tests under testing/synctest, whose bubble fakes
// time.Now but not the host's boot clock. It stops, like Go's monotonic
// clock, while the host sleeps.
func Monotonic() Boot {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

// Jitter returns a duration drawn uniformly from [3/4 d, d]: a fleet started
// together drifts apart, and no wait exceeds d.
func Jitter(d time.Duration) time.Duration {
	return d - time.Duration(draw(int64(d)/4+1))
}

// Behind returns a duration drawn uniformly from [d, 5/4 d]: long enough
// that a follower retrying every d at most gets there first.
func Behind(d time.Duration) time.Duration {
	return d + time.Duration(draw(int64(d)/4+1))
}

// seeded is the source Jitter and Behind draw from when a test has set one
// (Seed); nil: math/rand/v2's global source.
var seeded atomic.Pointer[lockedRand]

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func draw(n int64) int64 {
	if s := seeded.Load(); s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.r.Int64N(n)
	}
	return rand.Int64N(n)
}

// Seed makes Jitter and Behind draw from a source seeded with seed, for the
// whole process, until the returned func puts the global source back: a
// simulator's replay of one seed then draws the same waits in the same
// order (the order is still the scheduler's). Not for parallel use.
func Seed(seed uint64) (restore func()) {
	seeded.Store(&lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x6a177e4))})
	return func() { seeded.Store(nil) }
}

// Sleep waits for d or until ctx is done, and reports whether it slept the
// whole time.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
