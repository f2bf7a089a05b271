package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// eventLog records the events of several contenders.
type eventLog struct {
	mu     sync.Mutex
	events map[string][]Event
	all    []Event // everyone's, as they were reported
}

func newEventLog() *eventLog { return &eventLog{events: map[string][]Event{}} }

func (l *eventLog) option(who string) Option {
	return WithEvents(func(e Event) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.events[who] = append(l.events[who], e)
		l.all = append(l.all, e)
	})
}

func (l *eventLog) of(who string) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events[who]...)
}

// started returns every StartedLeading event, of anyone, in the order they
// were reported: a term starts after the one before it ended and was
// reported, so this is their order in time, even where two carry the same
// At (under virtual time, with no time passing between them).
func (l *eventLog) started() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, e := range l.all {
		if e.Kind == StartedLeading {
			out = append(out, e)
		}
	}
	return out
}

// requireAlternating checks one contender's own events: Started, Stopped,
// Started, Stopped... never a Stopped without a Started before it.
func requireAlternating(t *testing.T, who string, events []Event) {
	t.Helper()
	want := StartedLeading
	for i, e := range events {
		if e.Kind == NewLeaderObserved {
			continue
		}
		require.Equalf(t, want, e.Kind, "%s event %d", who, i)
		if want == StartedLeading {
			want = StoppedLeading
		} else {
			want = StartedLeading
		}
	}
}

func TestTermsStrictlyIncreaseAcrossHandoversCrashesAndBreaks(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		s.RenewInterval = time.Second
		events := newEventLog()
		log := newTermLog()
		transports := map[string]*faults.Transport{}
		contenders := map[string]*contender{}
		start := func(name string) {
			si, tr := withTransport(t, s)
			transports[name] = tr
			contenders[name] = startContender(t, name, si, log.leaderFunc(name, func(ctx context.Context) error {
				term, ok := TermFromContext(ctx)
				if !ok || term.Identity != name || term.Number < 1 || term.LeaseID == "" {
					return fmt.Errorf("bad term in context: %+v", term)
				}
				<-ctx.Done()
				return nil
			}), WithIdentity(name), events.option(name))
		}
		for _, name := range []string{"a", "b", "c"} {
			start(name)
		}
		leader := log.next(t, 10*time.Second).who

		// Handover: the leader shuts down; a restarted instance joins.
		contenders[leader].stop(t)
		start(leader + "2")
		leader = log.next(t, 10*time.Second).who

		// Break: an operator breaks the lease. The holders are connected, so a
		// period of RenewInterval + StopMargin is enough for the holder to stop.
		_, err := contenders[leader].mutex.LeaseManager().Break(context.Background(), 4*time.Second)
		require.NoError(t, err)
		leader = log.next(t, 10*time.Second).who

		// Crash: the leader is cut off; its lease expires.
		transports[leader].Blackhole()
		log.next(t, 40*time.Second)
		time.Sleep(time.Second) // let the last StartedLeading event land

		started := events.started()
		require.GreaterOrEqual(t, len(started), 4)
		for i := 1; i < len(started); i++ {
			assert.Greater(t, started[i].Term.Number, started[i-1].Term.Number,
				"term %d (%s) after term %d (%s)", started[i].Term.Number, started[i].Term.Identity, started[i-1].Term.Number, started[i-1].Term.Identity)
		}
		for _, tm := range log.snapshot() {
			require.Falsef(t, tm.end.Before(tm.start) && !tm.end.IsZero(), "bad term record")
		}
		log.requireNoOverlap(t)
		for who := range contenders {
			requireAlternating(t, who, events.of(who))
		}
	})
}

func TestFollowerSeesWhoLeadsAndNewLeaders(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		events := newEventLog()
		log := newTermLog()
		cs := map[string]*contender{}
		for _, name := range []string{"a", "b", "c"} {
			si, _ := withTransport(t, s)
			cs[name] = startContender(t, name, si, log.leaderFunc(name, untilCancelled), WithIdentity(name), events.option(name))
		}
		first := log.next(t, 10*time.Second)
		var follower string
		for name := range cs {
			if name != first.who {
				follower = name
				break
			}
		}
		info, err := cs[follower].mutex.Leader(context.Background())
		require.NoError(t, err)
		assert.True(t, info.Held())
		assert.Equal(t, first.who, info.Leader.Identity)
		assert.Positive(t, info.Leader.Number)
		assert.WithinDuration(t, first.start, info.Leader.Since, time.Second)
		assert.True(t, cs[first.who].mutex.IsLeader())
		assert.False(t, cs[follower].mutex.IsLeader())

		// Hand over; every remaining follower observes the new leader within a
		// couple of retry intervals.
		cs[first.who].stop(t)
		second := log.next(t, 10*time.Second)
		for name := range cs {
			if name == first.who || name == second.who {
				continue
			}
			require.Eventually(t, func() bool {
				for _, e := range events.of(name) {
					if e.Kind == NewLeaderObserved && e.Term.Identity == second.who {
						return true
					}
				}
				return false
			}, 2*s.RetryInterval+slack, 20*time.Millisecond, "%s did not observe %s", name, second.who)
		}
	})
}

func TestFollowerMakesOneRequestPerRetryInterval(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		sa, _ := withTransport(t, s)
		startContender(t, "a", sa, log.leaderFunc("a", untilCancelled))
		log.next(t, 10*time.Second)
		sb, tb := withTransport(t, s)
		var requests atomic.Int32
		tb.Observe(func(faults.Exchange) { requests.Add(1) })
		startContender(t, "b", sb, log.leaderFunc("b", untilCancelled), WithEvents(func(Event) {}))
		const watch = 5 * time.Second
		time.Sleep(watch)
		// Waits are drawn from [3/4, 1] of the interval: at most watch/(3/4 RI)
		// polls, plus the first acquire (which also creates nothing: the blob exists).
		most := int32(watch/(s.RetryInterval*3/4)) + 2
		assert.LessOrEqual(t, requests.Load(), most)
		assert.GreaterOrEqual(t, requests.Load(), int32(watch/s.RetryInterval)-1)
		t.Logf("follower made %d requests in %v at a %v retry interval", requests.Load(), watch, s.RetryInterval)
	})
}

func TestStalledLeaderLosesLeadershipAndAnotherLeads(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		s.RenewInterval = time.Second
		const stall = 2 * time.Second
		events := newEventLog()
		log := newTermLog()
		var lastBeat atomic.Int64
		base := time.Now()
		sa, _ := withTransport(t, s)
		startContender(t, "a", sa, log.leaderFunc("a", func(ctx context.Context) error {
			for range 4 { // heartbeats for 2 s, then stalls (but honours ctx)
				Heartbeat(ctx)
				lastBeat.Store(int64(time.Since(base)))
				time.Sleep(500 * time.Millisecond)
			}
			<-ctx.Done()
			return nil
		}), WithStallTimeout(stall), WithIdentity("a"), events.option("a"))
		log.next(t, 10*time.Second)
		sb, _ := withTransport(t, s)
		startContender(t, "b", sb, log.leaderFunc("b", untilCancelled), WithIdentity("b"))

		b := log.next(t, 30*time.Second)
		require.Equal(t, "b", b.who)
		a := log.snapshot()[0]
		require.ErrorIs(t, a.cause, ErrStalled)
		stalledFor := a.cancelled.Sub(base.Add(time.Duration(lastBeat.Load())))
		t.Logf("a cancelled %v after its last heartbeat; b led %v later", stalledFor, b.start.Sub(a.cancelled))
		assert.Less(t, stalledFor, stall+s.RenewInterval+slack)
		assert.GreaterOrEqual(t, stalledFor, stall)
		es := events.of("a")
		require.Len(t, es, 2)
		assert.Equal(t, ReasonStalled, es[1].Reason)
	})
}

func TestHealthCheck(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		log := newTermLog()
		release := make(chan struct{})
		sa, _ := withTransport(t, s)
		a := startContender(t, "a", sa, log.leaderFunc("a", func(ctx context.Context) error {
			<-release // ignores its context
			return nil
		}))
		log.next(t, 10*time.Second)
		sb, _ := withTransport(t, s)
		b := startContender(t, "b", sb, log.leaderFunc("b", untilCancelled))
		time.Sleep(s.RetryInterval)

		assert.NoError(t, a.mutex.Healthy(), "a normal leader")
		assert.NoError(t, b.mutex.Healthy(), "a normal follower")
		rec := httptest.NewRecorder()
		a.mutex.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		assert.Equal(t, http.StatusOK, rec.Code)

		// a is asked to stop, and winds down for longer than StopMargin: its
		// lease is renewed meanwhile, so it is shutting down as designed.
		a.cancel()
		margin := s.withDefaults().StopMargin
		for end := time.Now().Add(margin + 2*time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			require.NoError(t, a.mutex.Healthy(), "a func winding down under a held lease")
		}

		// Then its lease is lost while it goes on: that is unhealthy, StopMargin on.
		_, err := a.mutex.LeaseManager().Break(context.Background(), 0)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return a.mutex.Healthy() != nil }, s.withDefaults().RenewInterval+margin+slack, 50*time.Millisecond)
		assert.ErrorContains(t, a.mutex.Healthy(), "still running")
		rec = httptest.NewRecorder()
		a.mutex.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Contains(t, rec.Body.String(), "still running")
		assert.NoError(t, b.mutex.Healthy())

		close(release)
		require.Eventually(t, func() bool { return a.mutex.Healthy() == nil }, 5*time.Second, 50*time.Millisecond)
	})
}

func TestUnhealthyWhileRenewalsKeepFailing(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, tr := withTransport(t, testSettings(t))
		s.RenewInterval = time.Second
		log := newTermLog()
		a := startContender(t, "a", s, log.leaderFunc("a", untilCancelled))
		log.next(t, 10*time.Second)
		tr.Fail(503, "ServerBusy")
		d := s.withDefaults()
		threshold := (d.LeaseDuration - d.StopMargin) / 2
		require.Eventually(t, func() bool { return a.mutex.Healthy() != nil }, threshold+d.RenewInterval+slack, 50*time.Millisecond)
		assert.ErrorContains(t, a.mutex.Healthy(), "renewals failing")
		tr.Heal()
		require.Eventually(t, func() bool { return a.mutex.Healthy() == nil }, 2*d.RenewInterval+slack, 50*time.Millisecond)
	})
}

// Every way a term can end reports Started, then Stopped with its reason.
func TestEventOrderForEveryWayATermEnds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reason StopReason
		fn     func(ctx context.Context) error
		end    func(t *testing.T, c *contender, tr *faults.Transport)
		opts   []Option
	}{
		{ReasonFuncReturned, func(ctx context.Context) error { return errors.New("done") }, nil, nil},
		{ReasonCallerCancelled, untilCancelled, func(t *testing.T, c *contender, _ *faults.Transport) { c.cancel() }, nil},
		{ReasonLeaseLost, untilCancelled, func(t *testing.T, c *contender, _ *faults.Transport) {
			_, err := c.mutex.LeaseManager().Break(context.Background(), 0)
			require.NoError(t, err)
		}, nil},
		{ReasonDeadline, untilCancelled, func(t *testing.T, c *contender, tr *faults.Transport) { tr.Blackhole() }, nil},
		{ReasonStalled, untilCancelled, nil, []Option{WithStallTimeout(time.Second)}},
		{ReasonStorageRefused, untilCancelled, func(t *testing.T, c *contender, tr *faults.Transport) {
			tr.Fail(http.StatusForbidden, "AuthorizationPermissionMismatch")
		}, nil},
		{ReasonFuncPanicked, func(ctx context.Context) error { panic("boom") }, nil, nil},
	}
	for _, tc := range cases {
		t.Run(string(tc.reason), func(t *testing.T) {
			t.Parallel()
			inBubble(t, func(t *testing.T, _ *memblob.Service) {
				s, tr := withTransport(t, testSettings(t))
				s.RenewInterval = time.Second
				events := newEventLog()
				opts := append([]Option{events.option("a"), WithLogger(testLogger(t, "a"))}, tc.opts...)
				if tc.reason == ReasonFuncPanicked {
					m, err := NewBlobDistributedMutex(s, tc.fn, opts...)
					require.NoError(t, err)
					func() {
						defer func() { assert.Equal(t, "boom", recover()) }()
						_ = m.RunTaskWhenMutexAcquired(context.Background())
					}()
				} else {
					c := startContender(t, "a", s, tc.fn, opts...)
					require.Eventually(t, func() bool { return len(events.of("a")) >= 1 }, 10*time.Second, 10*time.Millisecond)
					if tc.end != nil {
						tc.end(t, c, tr)
					}
					require.Eventually(t, func() bool { return len(events.of("a")) >= 2 }, 30*time.Second, 20*time.Millisecond)
					c.stop(t)
				}
				es := events.of("a")
				requireAlternating(t, "a", es)
				require.GreaterOrEqual(t, len(es), 2)
				assert.Equal(t, tc.reason, es[1].Reason, "stop error: %v", es[1].Err)
				assert.Equal(t, es[0].Term, es[1].Term)
				// The func stopped before the lease could expire: by the stop
				// margin, at the deadline, and by more otherwise.
				stopped := es[1]
				require.False(t, stopped.FuncReturned.IsZero())
				assert.False(t, stopped.FuncReturned.Before(es[0].At), "the func returned before its term started")
				assert.False(t, stopped.At.Before(stopped.FuncReturned), "reported before the func returned")
				assert.Greater(t, stopped.LeaseExpiry.Sub(stopped.FuncReturned), s.withDefaults().StopMargin/2,
					"stop margin %v", stopped.LeaseExpiry.Sub(stopped.FuncReturned))
			})
		})
	}
}

func TestMetricsAreRecorded(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		s, _ := withTransport(t, testSettings(t))
		s.RenewInterval = 500 * time.Millisecond
		done := make(chan struct{})
		log := newTermLog()
		c := startContender(t, "a", s, log.leaderFunc("a", func(ctx context.Context) error {
			select {
			case <-done:
			case <-ctx.Done():
			}
			return nil
		}), WithMeterProvider(mp))
		log.next(t, 10*time.Second)
		time.Sleep(1200 * time.Millisecond) // two renewals

		collect := func() map[string]metricdata.Aggregation { return collectMetrics(t, reader) }
		got := collect()
		gauge := got["leaderelection.is_leader"].(metricdata.Gauge[int64])
		require.Len(t, gauge.DataPoints, 1)
		assert.Equal(t, int64(1), gauge.DataPoints[0].Value)
		renew := got["leaderelection.renew.duration"].(metricdata.Histogram[float64])
		require.NotEmpty(t, renew.DataPoints)
		assert.GreaterOrEqual(t, renew.DataPoints[0].Count, uint64(2))
		attempts := got["leaderelection.acquire.attempts"].(metricdata.Sum[int64])
		assert.Equal(t, "acquired", attrValue(attempts.DataPoints[0].Attributes.Value("outcome")))

		close(done)
		require.Eventually(t, func() bool { return !c.mutex.IsLeader() }, 5*time.Second, 10*time.Millisecond)
		time.Sleep(100 * time.Millisecond) // the stopped-leading bookkeeping follows the func's return
		got = collect()
		margin := got["leaderelection.term.stop_margin"].(metricdata.Histogram[float64])
		require.Len(t, margin.DataPoints, 1)
		assert.Equal(t, uint64(1), margin.DataPoints[0].Count)
		d := s.withDefaults()
		assert.Greater(t, margin.DataPoints[0].Sum, (d.LeaseDuration - d.RenewInterval - time.Second).Seconds(),
			"a func that returns on its own ends far ahead of its lease")
		transitions := got["leaderelection.transitions"].(metricdata.Sum[int64])
		var started, stopped int64
		for _, dp := range transitions.DataPoints {
			switch attrValue(dp.Attributes.Value("direction")) {
			case "started":
				started += dp.Value
			case "stopped":
				stopped += dp.Value
			}
		}
		assert.Equal(t, int64(1), started)
		assert.Equal(t, int64(1), stopped)
		assert.Equal(t, int64(0), collectGauge(t, collect))
	})
}

func collectGauge(t *testing.T, collect func() map[string]metricdata.Aggregation) int64 {
	g := collect()["leaderelection.is_leader"].(metricdata.Gauge[int64])
	require.Len(t, g.DataPoints, 1)
	return g.DataPoints[0].Value
}

func attrValue(v interface{ AsString() string }, _ bool) string { return v.AsString() }

func TestIdentityIsValidatedAndDefaultsToHostAndPID(t *testing.T) {
	_, err := NewBlobDistributedMutex(validSettings(), untilCancelled, WithIdentity("tab\there"))
	require.ErrorContains(t, err, "printable ASCII")
	_, err = NewBlobDistributedMutex(validSettings(), untilCancelled, WithIdentity(strings.Repeat("x", 257)))
	require.ErrorContains(t, err, "1 to 256")
	_, err = NewBlobDistributedMutex(validSettings(), untilCancelled, WithStallTimeout(time.Second))
	require.ErrorContains(t, err, "stall timeout")

	m1, err := NewBlobDistributedMutex(validSettings(), untilCancelled)
	require.NoError(t, err)
	m2, err := NewBlobDistributedMutex(validSettings(), untilCancelled)
	require.NoError(t, err)
	assert.NotEqual(t, m1.Identity(), m2.Identity(), "unique per mutex")
	assert.Contains(t, m1.Identity(), fmt.Sprintf("-%d-", os.Getpid()))
}

// An operator's break moves leadership: the deposed leader stands aside once,
// so a waiting contender takes over instead of the old leader winning again.
func TestBreakHandsLeadershipToAWaitingContender(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		s.RenewInterval = time.Second
		// The holders are connected: a break period of RenewInterval +
		// StopMargin lets the holder notice and stop before it ends.
		const period = 4 * time.Second
		log := newTermLog()
		cs := map[string]*contender{}
		for _, name := range []string{"a", "b"} {
			si, _ := withTransport(t, s)
			cs[name] = startContender(t, name, si, log.leaderFunc(name, untilCancelled), WithIdentity(name))
		}
		leader := log.next(t, 10*time.Second)
		for round := range 3 {
			broke := time.Now()
			_, err := cs[leader.who].mutex.LeaseManager().Break(context.Background(), period)
			require.NoError(t, err)
			next := log.next(t, period+2*s.RetryInterval+slack)
			require.NotEqual(t, leader.who, next.who, "round %d: the deposed leader won again", round)
			old := log.snapshot()[round]
			require.ErrorIs(t, old.cause, ErrLeaseLost)
			require.True(t, old.end.Before(next.start))
			t.Logf("round %d: %s led %v after the break", round, next.who, next.start.Sub(broke))
			leader = next
		}
		log.requireNoOverlap(t)
	})
}

// Between taking the lease and recording its term, a holder is not reported
// as its predecessor: the predecessor marked its term ended as it released.
func TestNewHolderWithoutATermIsNotReportedAsItsPredecessor(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := testSettings(t)
		events := newEventLog()
		done := make(chan struct{})
		log := newTermLog()
		sa, _ := withTransport(t, s)
		startContender(t, "a", sa, log.leaderFunc("a", func(ctx context.Context) error {
			<-done
			return nil
		}), WithIdentity("a"))
		log.next(t, 10*time.Second)
		sb, _ := withTransport(t, s)
		shardHolder, err := NewBlobLeaseManager(sb)
		require.NoError(t, err)
		close(done) // a's term ends; a stands back for a retry interval
		require.Eventually(t, func() bool {
			_, err := shardHolder.Acquire(context.Background())
			return err == nil
		}, 5*time.Second, 20*time.Millisecond, "the lease was never free")
		t.Cleanup(func() { _ = shardHolder.Release(context.Background()) })

		info, err := shardHolder.Inspect(context.Background())
		require.NoError(t, err)
		assert.True(t, info.Held())
		assert.True(t, info.TermPending(), "taken, term not yet recorded")
		assert.Equal(t, "a", info.Leader.Identity, "the record is still a's")
		assert.False(t, info.LeaderEnded.IsZero(), "a marked its term ended")

		sc, _ := withTransport(t, s)
		startContender(t, "c", sc, untilCancelled, WithIdentity("c"), events.option("c"))
		time.Sleep(2*s.RetryInterval + slack)
		for _, e := range events.of("c") {
			assert.NotEqual(t, NewLeaderObserved, e.Kind, "c observed %s while the holder had no term", e.Term.Identity)
		}

		term, err := shardHolder.RecordTerm(context.Background(), "holder")
		require.NoError(t, err)
		info, err = shardHolder.Inspect(context.Background())
		require.NoError(t, err)
		assert.False(t, info.TermPending())
		assert.Equal(t, term.Number, info.Leader.Number)
		require.Eventually(t, func() bool {
			for _, e := range events.of("c") {
				if e.Kind == NewLeaderObserved && e.Term.Identity == "holder" {
					return true
				}
			}
			return false
		}, 2*s.RetryInterval+slack, 20*time.Millisecond, "c did not observe the holder once it recorded its term")
	})
}

// A follower that saw the lease free does not take a new holder that has not
// written its term yet for the record it saw then (after a crash, no end was
// marked).
func TestFollowerDoesNotReportARecordItSawWhileTheLeaseWasFree(t *testing.T) {
	var got []Event
	m, err := NewBlobDistributedMutex(offlineSettings(), func(context.Context) error { return nil }, WithIdentity("me"),
		WithEvents(func(e Event) { got = append(got, e) }), WithLogger(nil))
	require.NoError(t, err)
	old := Term{Number: 4, Identity: "crashed"}
	m.observe(LeaseInfo{Exists: true, State: lease.StateTypeExpired, Leader: old, ETag: "e4"})
	m.observe(LeaseInfo{Exists: true, State: lease.StateTypeLeased, Leader: old, ETag: "e4"})
	assert.Empty(t, got, "a holder with no term yet was reported as the crashed leader")
	m.observe(LeaseInfo{Exists: true, State: lease.StateTypeLeased, Leader: Term{Number: 5, Identity: "new"}, ETag: "e5"})
	require.Len(t, got, 1)
	assert.Equal(t, "new", got[0].Term.Identity)
}

// collectMetrics reads every instrument reader holds, by name.
func collectMetrics(t testing.TB, reader *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}
