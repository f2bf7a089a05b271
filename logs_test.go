package leaderelection

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logLine is one record a test logger took: its level, message and
// attributes (those added by With included), each formatted with %v.
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l logLine) String() string { return fmt.Sprintf("%v %q %v", l.level, l.msg, l.attrs) }

// logTape records what a logger writes at Info and above, for tests that
// assert on the lines an operator sees; it also echoes everything to the
// test log.
type logTape struct {
	mu    sync.Mutex
	lines []logLine
}

type tapeHandler struct {
	tape  *logTape
	echo  slog.Handler
	attrs []slog.Attr
}

func (h tapeHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h tapeHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo {
		l := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
		for _, a := range h.attrs {
			l.attrs[a.Key] = a.Value.String()
		}
		r.Attrs(func(a slog.Attr) bool {
			l.attrs[a.Key] = a.Value.String()
			return true
		})
		h.tape.mu.Lock()
		h.tape.lines = append(h.tape.lines, l)
		h.tape.mu.Unlock()
	}
	return h.echo.Handle(ctx, r)
}

func (h tapeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	h.echo = h.echo.WithAttrs(as)
	return h
}

func (h tapeHandler) WithGroup(string) slog.Handler { panic("not used") }

// tapeLogger returns a logger that records into a new tape, and the tape.
func tapeLogger(t testing.TB, name string) (*slog.Logger, *logTape) {
	tape := &logTape{}
	echo := slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(tapeHandler{tape: tape, echo: echo}).With("contender", name), tape
}

// all returns the lines recorded so far.
func (p *logTape) all() []logLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]logLine(nil), p.lines...)
}

// find returns the lines whose message ends with msg.
func (p *logTape) find(msg string) []logLine {
	var out []logLine
	for _, l := range p.all() {
		if strings.HasSuffix(l.msg, msg) {
			out = append(out, l)
		}
	}
	return out
}

// one asserts there is exactly one line msg, and returns it.
func (p *logTape) one(t testing.TB, msg string) logLine {
	t.Helper()
	ls := p.find(msg)
	require.Lenf(t, ls, 1, "lines %q among %v", msg, p.all())
	return ls[0]
}

// story returns the lines but those that say the container or a blob was
// created (once for a fleet, by whoever comes first).
func (p *logTape) story() []logLine {
	var out []logLine
	for _, l := range p.all() {
		if !strings.HasPrefix(l.msg, "leaderelection: created ") {
			out = append(out, l)
		}
	}
	return out
}

// above returns the lines at level or above.
func (p *logTape) above(level slog.Level) []logLine {
	var out []logLine
	for _, l := range p.all() {
		if l.level >= level {
			out = append(out, l)
		}
	}
	return out
}

// requireAttrs checks the line's attributes named in want.
func requireAttrs(t testing.TB, l logLine, want map[string]string) {
	t.Helper()
	for k, v := range want {
		assert.Equalf(t, v, l.attrs[k], "attribute %q of %v", k, l)
	}
}

// TestLogsTellAHandover: a leader and a follower each say, once, at Info,
// what they contend for and as whom; the follower whom it follows and since
// when; the leader that it led and why it stopped; the follower that it took
// over. While both are healthy they log nothing more.
func TestLogsTellAHandover(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		la, tapeA := tapeLogger(t, "a")
		lb, tapeB := tapeLogger(t, "b")
		terms := newTermLog()
		a := startContender(t, "a", s, terms.leaderFunc("a", untilCancelled), WithIdentity("pod-a"), WithLogger(la))
		terms.next(t, 10*time.Second)
		startContender(t, "b", s, terms.leaderFunc("b", untilCancelled), WithIdentity("pod-b"), WithLogger(lb))
		waitFor(t, 10*time.Second, "b follows a", func() bool { return len(tapeB.find("following the leader")) > 0 })

		// Healthy: nothing periodic at Info or above, on either side.
		before := len(tapeA.all()) + len(tapeB.all())
		time.Sleep(5 * s.RetryInterval)
		require.Equal(t, before, len(tapeA.all())+len(tapeB.all()), "a healthy leader and follower log nothing periodic: %v %v", tapeA.all(), tapeB.all())

		require.NoError(t, ignoreCancel(a.stop(t)))
		waitFor(t, 10*time.Second, "b leads", func() bool { return len(tapeB.find("became leader")) > 0 })

		kind, why := string(NativeLease), ""
		if onETagLease(t) {
			kind, why = string(ETagLease), "LeaseDuration 5s is outside Azure's native lease range, whole seconds from 15 s to 60 s"
		}
		where := map[string]string{"container": s.Container, "blob": s.Blob}
		with := func(kv ...string) map[string]string {
			m := map[string]string{}
			for k, v := range where {
				m[k] = v
			}
			for i := 0; i < len(kv); i += 2 {
				m[kv[i]] = kv[i+1]
			}
			return m
		}
		requireAttrs(t, tapeA.one(t, "leaderelection: contending for leadership"), with("identity", "pod-a", "lease", kind))
		led := tapeA.one(t, "leaderelection: became leader")
		requireAttrs(t, led, with("identity", "pod-a", "lease", kind, "leaseReason", why))
		requireAttrs(t, tapeA.one(t, "leaderelection: stopped leading"), with("term", led.attrs["term"], "reason", string(ReasonCallerCancelled)))
		assert.Len(t, tapeA.story(), 3, "the leader's lines: %v", tapeA.all())

		requireAttrs(t, tapeB.one(t, "leaderelection: contending for leadership"), with("identity", "pod-b", "lease", kind))
		follows := tapeB.one(t, "leaderelection: following the leader")
		requireAttrs(t, follows, with("leader", "pod-a", "term", led.attrs["term"], "identity", "pod-b"))
		assert.NotEmpty(t, follows.attrs["since"])
		requireAttrs(t, tapeB.one(t, "leaderelection: became leader"), with("identity", "pod-b", "lease", kind))
		assert.Len(t, tapeB.story(), 3, "the follower's lines: %v", tapeB.all())
	})
}

// The lines that name the lease's kind say why it is an ETag lease: a
// LeaseDuration of 10 s (or 2 min) is outside Azure's native range, which
// would otherwise be a silent choice; a native lease needs no reason.
func TestLogsSayWhyALeaseIsAnETagLease(t *testing.T) {
	t.Parallel()
	for d, why := range map[time.Duration]string{
		10 * time.Second: "LeaseDuration 10s is outside Azure's native lease range, whole seconds from 15 s to 60 s",
		2 * time.Minute:  "LeaseDuration 2m0s is outside Azure's native lease range, whole seconds from 15 s to 60 s",
		30 * time.Second: "",
	} {
		s := validSettings()
		s.LeaseDuration = d
		m, err := NewBlobLeaseManager(s)
		require.NoError(t, err)
		assert.Equal(t, why, m.kindReason(), d)
		assert.Equal(t, why == "", m.Kind() == NativeLease, d)
	}
}

func ignoreCancel(err error) error {
	if err == context.Canceled {
		return nil
	}
	return err
}

// TestLogsWarnOfATwinIdentity: a follower that sees the lease held, and
// renewed, under its own identity by another instance warns, once a term:
// on an ETag lease once its ETag has changed under that term, on a native
// lease once it has been held longer than any native lease lasts unrenewed
// (an earlier run of this instance, restarted, is not warned of). The leader
// cannot see its twin without requests of its own: a follower leaves
// nothing on the blob.
func TestLogsWarnOfATwinIdentity(t *testing.T) {
	for _, kind := range []LeaseKind{ETagLease, NativeLease} {
		t.Run(string(kind), func(t *testing.T) {
			inBubble(t, func(t *testing.T, _ *memblob.Service) {
				s := testSettings(t)
				within := 30 * time.Second
				if kind == ETagLease {
					s.LeaseDuration, s.StopMargin = etagTestLease, etagTestMargin // renewed by writes, seen in the ETag
					within = 15 * time.Second
				}
				la, tapeA := tapeLogger(t, "a")
				lb, tapeB := tapeLogger(t, "b")
				terms := newTermLog()
				startContender(t, "a", s, terms.leaderFunc("a", untilCancelled), WithIdentity("pod-0"), WithLogger(la))
				terms.next(t, 10*time.Second)
				startContender(t, "b", s, terms.leaderFunc("b", untilCancelled), WithIdentity("pod-0"), WithLogger(lb))
				const twin = "leaderelection: another live instance leads with this instance's identity; give each instance an identity of its own (WithIdentity)"
				waitFor(t, within, "b warns", func() bool { return len(tapeB.find(twin)) > 0 })
				time.Sleep(3 * s.RetryInterval)
				w := tapeB.one(t, twin)
				assert.Equal(t, slog.LevelWarn, w.level)
				requireAttrs(t, w, map[string]string{"container": s.Container, "blob": s.Blob, "identity": "pod-0", "term": "1"})
				assert.Empty(t, tapeB.find("following the leader"), "a twin is not followed as a leader")
				// The leader reads the twin's mark at its next look beside the
				// lease (every 30 RetryIntervals without a priority).
				const twinOfLeader = "leaderelection: another live instance contends with this instance's identity; give each instance an identity of its own (WithIdentity)"
				waitFor(t, twinCheckEvery*s.withDefaults().RetryInterval+10*time.Second, "a warns", func() bool { return len(tapeA.find(twinOfLeader)) > 0 })
				wa := tapeA.one(t, twinOfLeader)
				assert.Equal(t, slog.LevelWarn, wa.level)
				requireAttrs(t, wa, map[string]string{"container": s.Container, "blob": s.Blob, "identity": "pod-0"})
				assert.Len(t, tapeA.above(slog.LevelWarn), 1, "the leader warns of its twin once, and of nothing else")
			})
		})
	}
}

// sumCount adds up the "count" attributes of lines.
func sumCount(t testing.TB, ls []logLine) int {
	t.Helper()
	n := 0
	for _, l := range ls {
		var c int
		_, err := fmt.Sscan(l.attrs["count"], &c)
		require.NoError(t, err, l)
		n += c
	}
	return n
}

// TestLogsOfAShardOwnerSummarise: a ShardOwner's Info lines tell its
// session's start and end and, summed up per listing, the shards it took
// and stopped, never a line per shard: 200 shards on a cold start make a
// handful of lines. A handover and a shutdown say how many moved, and why.
// A healthy owner logs nothing periodic.
func TestLogsOfAShardOwnerSummarise(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(200)
		l := &shardLog{}
		la, tapeA := tapeLogger(t, "a")
		lb, tapeB := tapeLogger(t, "b")
		startOwner(t, "a", s, names, l.fn("a", nil), WithLogger(la))
		waitFor(t, 60*time.Second, "a runs every shard", func() bool { return balanced(l, 200, "a") })
		waitFor(t, 10*time.Second, "a reports its shards", func() bool { return sumCount(t, tapeA.find("leaderelection: took shards")) == 200 })

		coldStart := tapeA.story()
		assert.LessOrEqual(t, len(coldStart), 4, "a cold start's lines: %v", coldStart)
		started := tapeA.one(t, "leaderelection: session started")
		requireAttrs(t, started, map[string]string{"container": s.Container, "prefix": s.Blob + "/", "identity": "a", "lease": "etag",
			"leaseReason": "a ShardOwner's session lease is always an ETag lease"})
		assert.NotEmpty(t, started.attrs["session"])
		assert.Empty(t, tapeA.find("became leader"), "a session is not a leader")
		time.Sleep(5 * s.RetryInterval)
		require.Equal(t, len(coldStart), len(tapeA.story()), "a healthy owner logs nothing periodic: %v", tapeA.all())

		b := startOwner(t, "b", s, names, l.fn("b", nil), WithLogger(lb))
		waitFor(t, 60*time.Second, "a and b share the shards", func() bool { return balanced(l, 200, "a", "b") })
		waitFor(t, 10*time.Second, "b reports its shards", func() bool { return sumCount(t, tapeB.find("leaderelection: took shards")) == 100 })
		requireAttrs(t, tapeB.one(t, "leaderelection: session started"), map[string]string{"identity": "b"})
		waitFor(t, 10*time.Second, "a reports the handover", func() bool { return sumCount(t, tapeA.find("leaderelection: stopped shards")) == 100 })
		for _, h := range tapeA.find("leaderelection: stopped shards") {
			assert.Equal(t, fmt.Sprintf("handed over: %s", h.attrs["count"]), h.attrs["reasons"])
			assert.Equal(t, slog.LevelInfo, h.level)
		}
		lines := len(tapeA.all()) + len(tapeB.all())
		time.Sleep(5 * s.RetryInterval)
		require.Equal(t, lines, len(tapeA.all())+len(tapeB.all()), "a healthy pair logs nothing periodic: %v %v", tapeA.all(), tapeB.all())

		require.NoError(t, ignoreCancel(b.stop(t)))
		stopped := tapeB.one(t, "leaderelection: stopped shards")
		requireAttrs(t, stopped, map[string]string{"count": "100", "reasons": "handed over: 100", "running": "0"})
		requireAttrs(t, tapeB.one(t, "leaderelection: leaving: handing shards on to the other sessions"), map[string]string{"count": "100", "sessions": "1"})
		ended := tapeB.one(t, "leaderelection: session ended")
		requireAttrs(t, ended, map[string]string{"reason": string(ReasonCallerCancelled), "session": tapeB.one(t, "session started").attrs["session"]})
		bLines := tapeB.story()
		assert.Equal(t, "leaderelection: session ended", bLines[len(bLines)-1].msg, "the session ends after its shards: %v", bLines)
		assert.LessOrEqual(t, len(bLines), 7, "b's lines: %v", bLines)
		assert.Empty(t, tapeA.above(slog.LevelWarn))
		assert.Empty(t, tapeB.above(slog.LevelWarn))
	})
}

// TestLogsOfShardOwnersWithOneIdentity: two live sessions under one
// identity each warn of the other.
func TestLogsOfShardOwnersWithOneIdentity(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(4)
		l := &shardLog{}
		la, tapeA := tapeLogger(t, "a")
		lb, tapeB := tapeLogger(t, "b")
		startOwner(t, "a", s, names, l.fn("a", nil), WithLogger(la), WithIdentity("pod-0"))
		startOwner(t, "b", s, names, l.fn("b", nil), WithLogger(lb), WithIdentity("pod-0"))
		const twin = "leaderelection: another live session runs under this instance's identity; give each instance an identity of its own (WithIdentity)"
		for _, tape := range []*logTape{tapeA, tapeB} {
			waitFor(t, 20*time.Second, "a warning", func() bool { return len(tape.find(twin)) > 0 })
			w := tape.one(t, twin)
			assert.Equal(t, slog.LevelWarn, w.level)
			requireAttrs(t, w, map[string]string{"container": s.Container, "identity": "pod-0"})
		}
		other := tapeB.one(t, "session started").attrs["session"]
		assert.Equal(t, "["+other+"]", tapeA.one(t, twin).attrs["sessions"])
	})
}

// TestLogsARestartedInstanceIsNotItsOwnTwin: an instance restarted under
// the same identity, that finds its earlier run's lease still held (a crash,
// no release), waits for it to expire and takes over, and warns of nothing.
func TestLogsARestartedInstanceIsNotItsOwnTwin(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		terms := newTermLog()
		sa, ta := withTransport(t, s)
		startContender(t, "a", sa, terms.leaderFunc("a", untilCancelled), WithIdentity("pod-0"))
		terms.next(t, 10*time.Second)
		ta.Blackhole() // a crashes: no renewal, no release
		lb, tapeB := tapeLogger(t, "b")
		startContender(t, "b", s, terms.leaderFunc("b", untilCancelled), WithIdentity("pod-0"), WithLogger(lb))
		require.Equal(t, "b", terms.next(t, 2*s.withDefaults().LeaseDuration+10*time.Second).who)
		assert.Empty(t, tapeB.above(slog.LevelWarn), "a lease left by an earlier run is no twin")
		requireAttrs(t, tapeB.one(t, "leaderelection: became leader"), map[string]string{"identity": "pod-0", "term": "2"})
	})
}

// TestLogsOfAShardOwnerWarnOfSlowHandovers: shard funcs asked to stop for
// a handover, still running StopMargin later, are one warning for all, not
// one a shard.
func TestLogsOfAShardOwnerWarnOfSlowHandovers(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(8)
		l := &shardLog{}
		la, tapeA := tapeLogger(t, "a")
		slow := func(ctx context.Context, _ string) error {
			<-ctx.Done()
			time.Sleep(s.StopMargin + time.Second)
			return nil
		}
		startOwner(t, "a", s, names, l.fn("a", slow), WithLogger(la))
		waitFor(t, 30*time.Second, "a runs every shard", func() bool { return balanced(l, 8, "a") })
		startOwner(t, "b", s, names, l.fn("b", nil))
		waitFor(t, 30*time.Second, "a and b share the shards", func() bool { return balanced(l, 8, "a", "b") })
		const slowMsg = "leaderelection: shard funcs asked to stop for a handover or a removal are still running after StopMargin"
		slows := tapeA.find(slowMsg)
		require.NotEmpty(t, slows)
		assert.LessOrEqual(t, len(slows), 2, "one warning per handover round, not per shard: %v", slows)
		assert.Equal(t, 4, sumCount(t, slows))
		assert.Empty(t, tapeA.find("shard func still winding down"), "no warning per shard")
		waitFor(t, 10*time.Second, "a reports the handover", func() bool { return sumCount(t, tapeA.find("leaderelection: stopped shards")) == 4 })
	})
}

// TestLogsOfShardFuncsThatReturnByThemselves: shard funcs that do their
// work and return nil (a periodic job) have their shards taken again after
// a cooldown, round after round. That is routine: past the first round, such
// a fleet logs nothing at Info, however many rounds it runs.
func TestLogsOfShardFuncsThatReturnByThemselves(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		l := &shardLog{}
		job := func(ctx context.Context, _ string) error {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			return nil
		}
		la, tapeA := tapeLogger(t, "a")
		lb, tapeB := tapeLogger(t, "b")
		startOwner(t, "a", s, shardNames(4), l.fn("a", job), WithLogger(la))
		startOwner(t, "b", s, shardNames(4), l.fn("b", job), WithLogger(lb))
		waitFor(t, 30*time.Second, "a round of re-takes", func() bool { return l.starts() > 2*4 })
		time.Sleep(2 * s.RetryInterval) // the first round's lines, if any are still to come
		firstA, firstB := tapeA.story(), tapeB.story()

		rounds := l.starts()
		waitFor(t, 60*time.Second, "five more rounds", func() bool { return l.starts() >= rounds+5*4 })
		assert.Equal(t, firstA, tapeA.story(), "no Info line per round")
		assert.Equal(t, firstB, tapeB.story(), "no Info line per round")
		assert.Empty(t, tapeA.above(slog.LevelWarn))
		assert.Empty(t, tapeB.above(slog.LevelWarn))
	})
}
