package leaderelection

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Timings of the shard tests: a short ETag lease, so that a dead instance's
// shards move in seconds, with a margin a loaded machine's late timers
// cannot eat.
const (
	shardTestLease  = 4 * time.Second
	shardTestMargin = 1500 * time.Millisecond
	shardTestRetry  = 300 * time.Millisecond
)

func shardSettings(t testing.TB) BlobSettings {
	s := testSettings(t)
	s.LeaseDuration, s.StopMargin, s.RetryInterval = shardTestLease, shardTestMargin, shardTestRetry
	return s
}

func shardNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("shard-%03d", i)
	}
	return out
}

// shardTerm is one run of one shard's func on one owner.
type shardTerm struct {
	who       string
	shard     string
	number    int64
	start     time.Time
	end       time.Time // zero while running
	cancelled time.Time // when the func saw its context done
	cause     error
	leaseEnd  time.Time // when its lease context ended, zero if before it returned it did not
}

// shardLog records every run of every shard on every owner of a test.
type shardLog struct {
	mu    sync.Mutex
	terms []*shardTerm
}

// fn returns a shard func for owner who that records its runs and runs body
// (untilCancelled if nil).
func (l *shardLog) fn(who string, body func(ctx context.Context, shard string) error) func(ctx context.Context, shard string) error {
	return func(ctx context.Context, shard string) error {
		tm := &shardTerm{who: who, shard: shard, start: time.Now()}
		if t, ok := TermFromContext(ctx); ok {
			tm.number = t.Number
		}
		l.mu.Lock()
		l.terms = append(l.terms, tm)
		l.mu.Unlock()
		returned := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			lease := LeaseContext(ctx)
			select {
			case <-ctx.Done():
			case <-returned:
				if ctx.Err() == nil {
					return
				}
			}
			l.mu.Lock()
			tm.cancelled, tm.cause = time.Now(), context.Cause(ctx)
			l.mu.Unlock()
			select {
			case <-lease.Done():
				l.mu.Lock()
				tm.leaseEnd = time.Now()
				l.mu.Unlock()
			case <-returned:
			}
		}()
		defer func() {
			end := time.Now()
			close(returned)
			<-watched
			l.mu.Lock()
			tm.end = end
			l.mu.Unlock()
		}()
		if body == nil {
			<-ctx.Done()
			return nil
		}
		return body(ctx, shard)
	}
}

func (l *shardLog) snapshot() []shardTerm {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]shardTerm, len(l.terms))
	for i, tm := range l.terms {
		out[i] = *tm
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// requireNeverTwice checks, shard by shard, that no run started before the
// previous one ended, and that term numbers strictly increase.
func (l *shardLog) requireNeverTwice(t testing.TB) {
	t.Helper()
	by := map[string][]shardTerm{}
	for _, tm := range l.snapshot() {
		by[tm.shard] = append(by[tm.shard], tm)
	}
	for shard, terms := range by {
		for i := 1; i < len(terms); i++ {
			prev, cur := terms[i-1], terms[i]
			require.Falsef(t, prev.end.IsZero(), "shard %s: term %d on %s still running when term %d started on %s", shard, prev.number, prev.who, cur.number, cur.who)
			require.Falsef(t, cur.start.Before(prev.end), "shard %s: term %d on %s started %v before term %d on %s ended",
				shard, cur.number, cur.who, prev.end.Sub(cur.start), prev.number, prev.who)
			require.Greaterf(t, cur.number, prev.number, "shard %s: term numbers must grow (%s then %s)", shard, prev.who, cur.who)
		}
	}
}

// running returns, for each shard running now, who runs it (more than one
// would be a bug: requireNeverTwice catches it).
func (l *shardLog) running() map[string][]string {
	out := map[string][]string{}
	for _, tm := range l.snapshot() {
		if tm.end.IsZero() {
			out[tm.shard] = append(out[tm.shard], tm.who)
		}
	}
	return out
}

// perOwner counts the shards running on each owner now.
func (l *shardLog) perOwner() map[string]int {
	out := map[string]int{}
	for _, whos := range l.running() {
		for _, w := range whos {
			out[w]++
		}
	}
	return out
}

// starts counts the runs started so far.
func (l *shardLog) starts() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.terms)
}

// ownerRun runs one ShardOwner in the background until stopped.
type ownerRun struct {
	name   string
	owner  *ShardOwner
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startOwner(t testing.TB, name string, s BlobSettings, shards []string, fn func(context.Context, string) error, opts ...Option) *ownerRun {
	t.Helper()
	o, err := NewShardOwner(s, shards, fn, append([]Option{WithLogger(testLogger(t, name)), WithIdentity(name), clockFor(s)}, opts...)...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &ownerRun{name: name, owner: o, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- o.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the owner and waits for Run to return.
func (r *ownerRun) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	r.once.Do(func() {
		select {
		case r.err = <-r.done:
		case <-time.After(30 * time.Second):
			r.err = fmt.Errorf("%s: Run did not return within 30s of cancellation", r.name)
			t.Error(r.err)
		}
	})
	return r.err
}

// waitFor polls cond every 50 ms until it holds or within passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// recordsCount waits until the live sessions' records, as o's listing
// reads them, are sessions of their own and count n shards between them: a
// session rewrites its record only at its renewals, so for up to a
// RenewInterval after its claims it still says it holds what it held before,
// and another session that reads it then counts it below its share.
func recordsCount(t testing.TB, within time.Duration, o *ShardOwner, sessions, n int) time.Duration {
	t.Helper()
	return waitFor(t, within, fmt.Sprintf("%d sessions' records counting %d shards", sessions, n), func() bool {
		info, err := o.Inspect(context.Background())
		if err != nil {
			return false
		}
		live, owned := 0, 0
		for _, si := range info.Sessions {
			if si.Live {
				live++
				owned += si.Owned
			}
		}
		return live == sessions && owned == n
	})
}

// balanced reports whether every shard runs exactly once, on the owners
// named, and their counts differ by at most one.
func balanced(l *shardLog, n int, owners ...string) bool {
	run := l.running()
	if len(run) != n {
		return false
	}
	for _, whos := range run {
		if len(whos) != 1 {
			return false
		}
	}
	per := l.perOwner()
	lo, hi := n, 0
	for _, o := range owners {
		lo, hi = min(lo, per[o]), max(hi, per[o])
	}
	total := 0
	for _, c := range per {
		total += c
	}
	return total == n && hi-lo <= 1 && len(per) <= len(owners)
}
