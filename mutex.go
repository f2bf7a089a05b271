package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/google/uuid"
)

// BlobDistributedMutex runs a leader func on exactly one of many instances at
// a time, using a lease on one blob. Build it with [NewBlobDistributedMutex]
// and call RunTaskWhenMutexAcquired.
type BlobDistributedMutex struct {
	lease    *BlobLeaseManager // a quorum mutex's: its first account's
	quorum   *quorumLease      // a quorum mutex's lease (quorum.go); nil for one account's
	term     *termRunner       // runs each term of the lease (termrun.go)
	fn       func(ctx context.Context) error
	logger   *slog.Logger
	opts     options
	running  atomic.Bool
	observed int64       // highest term number reported or held; touched only by the Run goroutine
	freeETag azcore.ETag // the blob's ETag when this follower last saw the lease free; likewise
	twin     twinWatch   // a term held under this instance's identity, not by it; likewise

	// Blobs beside the lease (prefer.go): the contender this leader's term
	// hands the lease to, once chosen (set by the watcher goroutine); the
	// rest touched only by the Run goroutine: whom the lease was handed to
	// when this term took it, this follower's candidacy and twin's mark,
	// and the free lease it leaves to another.
	handTo     atomic.Pointer[string]
	passedOver string // the contender the lease was handed to when this term took it
	candidate  candidacy
	twinMark   candidacy // a follower's mark that it sees a live leader with its own identity
	instance   string    // this mutex's own, in those blobs: a twin's is another
	handed     handover  // the last handover to another seen free, and since when
	handedSeen time.Time

	// silence is a follower's clock on an ETag lease (silence.go); touched
	// only by the Run goroutine.
	silence silenceWatch
}

// NewBlobDistributedMutex validates settings and returns a mutex that runs fn
// while it holds the lease. Every invalid setting is reported (see
// [BlobSettings.Validate]); a nil fn, an invalid identity or stall timeout
// are errors too. No network call is made.
func NewBlobDistributedMutex(settings BlobSettings, fn func(ctx context.Context) error, opts ...Option) (*BlobDistributedMutex, error) {
	var errs []error
	if fn == nil {
		errs = append(errs, errors.New("leaderelection: the leader func is nil"))
	}
	if err := settings.Validate(); err != nil {
		errs = append(errs, err)
	} else if err := checkOwnName(settings.Blob, false); err != nil {
		errs = append(errs, err)
	}
	o := buildOptions(opts)
	if err := checkIdentity(o.identity); err != nil {
		errs = append(errs, err)
	}
	if renew := settings.withDefaults().RenewInterval; o.stallTimeout != 0 && o.stallTimeout < renew {
		errs = append(errs, fmt.Errorf("leaderelection: stall timeout must be 0 (off) or at least RenewInterval (%v), got %v", renew, o.stallTimeout))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	lm, err := NewBlobLeaseManager(settings, opts...)
	if err != nil {
		return nil, err
	}
	lm.waitForBlobsCreatedAgain()
	m := &BlobDistributedMutex{
		lease:  lm,
		fn:     fn,
		logger: lm.logger,
		opts:   o,
	}
	m.term = &termRunner{lease: lm, logger: lm.logger, metrics: newMetrics(o.meterProvider, settings.Container, settings.Blob),
		identity: o.identity, stall: o.stallTimeout, emit: m.emit, kind: runsLeader,
		hooks: termHooks{
			started: func(t Term) { m.observed = max(m.observed, t.Number) },
			whileLeading: func(ctx context.Context, pleaseStop context.CancelCauseFunc) {
				m.watchCandidates(ctx, pleaseStop, m.passedOver)
			},
		}}
	if o.prioritySet {
		lm.extraMetadata = m.preferMetadata
	}
	m.instance = uuid.NewString()[:8]
	return m, nil
}

// LeaseManager returns the manager of the mutex's lease, for inspection and
// operator actions.
func (m *BlobDistributedMutex) LeaseManager() *BlobLeaseManager { return m.lease }

// Identity is this contender's identity (see [WithIdentity]).
func (m *BlobDistributedMutex) Identity() string { return m.opts.identity }

// IsLeader reports whether this instance's leader func is running now.
func (m *BlobDistributedMutex) IsLeader() bool { return m.term.leading.Load() }

// Leader asks the server who leads, and since when (see
// [BlobLeaseManager.Inspect]). It needs no lease.
func (m *BlobDistributedMutex) Leader(ctx context.Context) (LeaseInfo, error) {
	if m.quorum != nil {
		return m.quorum.leader(ctx)
	}
	return m.lease.Inspect(ctx)
}

// RunTaskWhenMutexAcquired contends for the lease until ctx is done, and runs
// the leader func each time it wins. While following, it breaks an
// [ETagLease] whose holder has fallen silent (see [SilentLeaseBroken]) and
// takes it. It returns ctx.Err() when ctx is done, or
// an error matching [ErrPermanent] when storage refuses us for good (bad
// credentials, missing permissions); transient storage failures are retried
// forever with capped, jittered backoff.
//
// Each term, the func runs under a context derived from ctx, which carries
// the term (see [TermFromContext]). That context is cancelled when ctx is,
// when the lease is lost, at the safety deadline (see
// [BlobSettings.StopMargin]), or when the func stalls (see
// [WithStallTimeout]); [context.Cause] says which, matching [ErrLeaseLost],
// [ErrRenewDeadline] or [ErrStalled] for the last three. The lease is renewed
// until the func returns, and released only then. When the func returns, nil
// or an error (which is logged, and does not stop the loop), the term ends,
// the lease is released, and this instance contends again after 1 to 1.25
// RetryIntervals (a waiting follower, which retries within one, takes over
// first): the func may run again, here or on another instance. A panic in
// the func releases the lease and propagates.
//
// After the caller's cancel the func may wind down for as long as it needs:
// the lease is still renewed. It must stop acting within StopMargin of
// [LeaseContext] being done, when the lease may pass to another instance; a
// func still running then is logged at Error level every StopMargin until
// it returns. The func is never started while an earlier run of it is still
// running.
//
// Once the func has returned after ctx is done (or once ctx is done, if it
// is not leading), RunTaskWhenMutexAcquired returns within RequestTimeout,
// storage reachable or not: the term's end mark and release share it, and a
// lease that an acquire whose answer was lost may have taken is given back
// within it too (see [BlobSettings.RequestTimeout]).
//
// No goroutine started by RunTaskWhenMutexAcquired outlives it. Calling it
// again while it runs returns [ErrAlreadyRunning]. With [WithLeaseIDFile] it
// holds the file for its whole run; if another holder has it, it returns an
// error matching [ErrLeaseIDFileLocked] at once, without contending.
func (m *BlobDistributedMutex) RunTaskWhenMutexAcquired(ctx context.Context) error {
	defer m.lease.CloseIdleConnections()
	if !m.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer m.running.Store(false)
	// Held for the whole run, so for as long as any lease with its ID may
	// be ours: every lease activity ends before Run returns. (A quorum's
	// file is its first account's, and names every account's ID.)
	unlock, err := m.lease.LockLeaseIDFile()
	if err != nil {
		return err
	}
	defer unlock()
	if m.quorum != nil {
		return m.runQuorum(ctx)
	}
	defer m.term.metrics.observeLeading(m.term.leading.Load)()

	s := m.lease.settings
	m.logger.Info("leaderelection: contending for leadership", append([]any{"container", s.Container, "blob", s.Blob,
		"identity", m.opts.identity, "leaseDuration", s.LeaseDuration}, m.lease.kindAttrs()...)...)
	c := &contention{
		backoff: s.RetryInterval,
		// Backing off longer than a native lease lasts gains nothing; a long
		// ETag lease would have followers notice a recovery only after hours.
		maxBackoff: max(s.RetryInterval, min(s.LeaseDuration, maxLeaseDuration)),
		// With a priority, it looks first: a lease just handed to another
		// contender is left to it (see deferTo).
		look: m.opts.prioritySet,
	}
	defer func() {
		if !c.mayHold && m.candidate.lease == "" && m.twinMark.lease == "" {
			return
		}
		end, cancel := m.term.endWindow(ctx)
		defer cancel()
		if c.mayHold {
			m.term.releaseQuietly(end, false)
		}
		m.withdraw(end, &m.candidate) // not to be handed a lease it will not take
		m.withdraw(end, &m.twinMark)
	}()
	for clock.Sleep(ctx, c.wait) {
		c.wait = clock.Jitter(s.RetryInterval)
		handedTo := "" // whom the last look showed the free lease handed to
		if c.look {
			var again bool
			if handedTo, again = m.look(ctx, c); again {
				continue
			}
		}
		if ctx.Err() != nil {
			// Cancelled during the read: an acquire now would be cut off
			// unanswered, and leave a lease to give back that nobody took.
			break
		}
		if err := m.acquireAndLead(ctx, c, handedTo); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// contention is what RunTaskWhenMutexAcquired keeps from one turn of its
// loop to the next, and its steps (look, acquireAndLead) share.
type contention struct {
	backoff, maxBackoff time.Duration
	failing             failureLog
	// look is whether to read the lease's state before trying to acquire
	// it. Followers poll with a cheap read while someone leads (which also
	// tells them who), so they make one request per RetryInterval either
	// way. After a transient failure they acquire directly: an acquire whose
	// answer was lost may have succeeded, and repeating it with the same
	// lease ID claims it.
	look bool
	// standAside is set when this instance was deposed (its lease lost,
	// broken, or its func stalled): it lets the lease go free once without
	// taking it, so a follower takes over rather than the deposed leader
	// winning the race again.
	standAside bool
	// mayHold is set while an acquire's outcome is unknown: it may have
	// taken the lease with its answer lost, until an answer says whose the
	// lease is. Leaving then, we give the lease back, so that followers
	// need not wait out a whole lease (an ETag lease's may be hours); once,
	// within RequestTimeout of ctx's end, and quietly: the lease is
	// probably not ours.
	mayHold bool
	wait    time.Duration // until the next turn
}

// look reads the lease's state before an acquire, and acts on it: it
// notes who leads, stands as a candidate, breaks a silent lease, and
// defers to a contender the lease was handed to. It returns whom the free
// lease was handed to, and whether to skip the acquire this turn.
func (m *BlobDistributedMutex) look(ctx context.Context, c *contention) (handedTo string, again bool) {
	s := m.lease.settings
	info, err := m.lease.Inspect(ctx)
	var problem *RecordError
	if err == nil {
		m.observe(info)
		problem = m.lease.recordProblem(info)
		m.term.noteRecord(problem)
		m.stand(ctx, info, &c.wait)
		m.markTwin(ctx, m.twin.seen && info.Held() && info.Leader.Identity == m.opts.identity, &c.wait)
		handedTo = info.HandedTo
	}
	silent := err == nil && m.breakIfSilent(ctx, info, &c.wait)
	if err == nil && info.Held() && !silent {
		c.failing.recovered(m.logger, "leaderelection: storage reachable again", "container", s.Container, "blob", s.Blob)
		c.backoff = s.RetryInterval
		m.term.metrics.attempt("held")
		if info.Leader.Identity != m.opts.identity {
			c.standAside = false // someone else took over: done standing aside
		}
		return handedTo, true
	}
	if err == nil && !silent && !info.Held() {
		if left := m.lease.seedFresh(ctx, info); left > 0 {
			c.wait = min(c.wait, left)
			return handedTo, true
		}
		if left, ok := m.deferTo(info); ok {
			c.wait = min(c.wait, left)
			return handedTo, true
		}
	}
	if err == nil && !silent && problem.blocks() {
		// A term cannot be recorded over this record: poll it
		// until it is repaired, rather than take the lease and
		// give it back at every turn.
		return handedTo, true
	}
	if err == nil && c.standAside && !silent {
		c.standAside = false
		c.wait = clock.Behind(s.RetryInterval)
		return handedTo, true
	}
	return handedTo, false
}

// acquireAndLead tries to acquire the lease, and runs the term if it
// did. It returns an error only when the run is over: storage refused us
// for good, or the term's run failed.
func (m *BlobDistributedMutex) acquireAndLead(ctx context.Context, c *contention, handedTo string) error {
	s := m.lease.settings
	g, err := m.lease.Acquire(ctx)
	m.term.metrics.attempt(outcome(err, "acquired"))
	c.look = true
	// A request that never left this host (no connection) took
	// nothing, and leaves what an earlier one may have taken as it was.
	if !errors.Is(err, ErrTransient) || !unsent(err) {
		c.mayHold = errors.Is(err, ErrTransient)
	}
	switch {
	case err == nil:
		c.failing.recovered(m.logger, "leaderelection: storage reachable again", "container", s.Container, "blob", s.Blob)
		c.backoff = s.RetryInterval
		// Its candidacy, if it stood, lapses by itself: a delete now
		// would delay the func, and one at the end stretch the
		// shutdown's bound.
		m.candidate.lease, m.twinMark.lease = "", ""
		m.passedOver = handedTo
		if ctx.Err() != nil {
			end, cancel := m.term.endWindow(ctx) // won just as the caller gave up
			m.term.releaseQuietly(end, true)
			cancel()
			break
		}
		m.handTo.Store(nil)
		reason, err := m.term.run(ctx, g, m.fn)
		if err != nil {
			return err
		}
		c.standAside = reason == ReasonLeaseLost || reason == ReasonStalled || reason == ReasonDeadline
		// Followers retry within one RetryInterval; waiting a little
		// longer lets one of them take over, rather than this instance,
		// whose func just ended (perhaps failing), winning again.
		c.wait = clock.Behind(s.RetryInterval)
	case ctx.Err() != nil:
		// The acquire may have succeeded on the server with its answer
		// cut off: mayHold gives the lease back on the way out.
	case errors.Is(err, ErrLeaseHeld):
		c.failing.recovered(m.logger, "leaderelection: storage reachable again", "container", s.Container, "blob", s.Blob)
		m.logger.Debug("leaderelection: lease held by another instance", "container", s.Container, "blob", s.Blob)
		c.backoff = s.RetryInterval
	case errors.Is(err, ErrPermanent):
		m.logger.Error("leaderelection: giving up: storage refused the lease request", "container", s.Container, "blob", s.Blob, "error", err)
		return err
	default:
		c.failing.failed(m.logger, "leaderelection: cannot reach the lease; retrying with backoff", "container", s.Container, "blob", s.Blob, "error", err)
		c.look = false
		// The blob or its container gone, or being deleted: polled every
		// RetryInterval, whatever backoff earlier failures built
		// (recreated.go's goneOrGoing).
		gone := goneOrGoing(err)
		if gone {
			c.backoff = s.RetryInterval
		}
		c.wait = clock.Jitter(c.backoff)
		if !gone {
			c.backoff = min(2*c.backoff, c.maxBackoff)
		}
	}
	return nil
}

// observe reports, once a term, a leader this follower has not seen before.
// A lease held with the record this follower saw while the lease was free
// (same ETag: no new term written since) is a new holder that has not
// recorded its term, not the record's leader. A leader with this instance's
// own identity is not followed but watched (see twinWatch).
func (m *BlobDistributedMutex) observe(info LeaseInfo) {
	if !info.Held() {
		m.freeETag = info.ETag
		m.twin = twinWatch{}
		return
	}
	if info.TermPending() || info.ETag == m.freeETag || info.Leader.Number <= m.observed {
		return
	}
	s := m.lease.settings
	if info.Leader.Identity == m.opts.identity {
		if !m.twin.alive(info, s.LeaseDuration, s.RetryInterval) {
			return
		}
		m.observed = info.Leader.Number
		m.twin.seen = true
		m.logger.Warn("leaderelection: another live instance leads with this instance's identity; give each instance an identity of its own (WithIdentity)",
			"container", s.Container, "blob", s.Blob, "identity", info.Leader.Identity, "term", info.Leader.Number,
			"since", info.Leader.Since)
		return
	}
	m.observed = info.Leader.Number
	m.logger.Info("leaderelection: following the leader", "container", s.Container, "blob", s.Blob,
		"leader", info.Leader.Identity, "term", info.Leader.Number, "since", info.Leader.Since, "identity", m.opts.identity)
	m.emit(Event{Kind: NewLeaderObserved, Term: info.Leader})
}

// twinWatch tells a live instance that leads under this instance's identity
// from this instance's own earlier lease, left behind by a restart (it
// expires, or is broken as silent, and is no sign of a twin). A term held
// under our identity is some other instance's once it is seen renewed:
// its ETag changed under the same term (only the holder writes), or, for a
// native lease, held without a gap for longer than any native lease lasts
// unrenewed.
type twinWatch struct {
	term  int64
	etag  azcore.ETag
	since time.Time
	seen  bool // that term was found a twin's
}

func (w *twinWatch) alive(info LeaseInfo, leaseDuration, retry time.Duration) bool {
	if w.term != info.Leader.Number {
		*w = twinWatch{term: info.Leader.Number, etag: info.ETag, since: info.Received}
		return false
	}
	if info.ETag != w.etag {
		return true
	}
	lasts := min(max(leaseDuration, info.DeclaredDuration), maxLeaseDuration)
	return info.Kind == NativeLease && info.Received.Sub(w.since) > lasts+retry
}

func (m *BlobDistributedMutex) emit(e Event) {
	if m.opts.onEvent == nil {
		return
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	m.opts.onEvent(e)
}

// breakIfSilent is a follower's rule for an ETag lease, applied to each
// answer while someone holds the lease. It reports true when the lease has
// just been broken, or had ended: the follower should acquire it now.
// Otherwise it shortens wait so that the follower reads again at the moment
// the lease may be broken, not at its next regular poll.
func (m *BlobDistributedMutex) breakIfSilent(ctx context.Context, info LeaseInfo, wait *time.Duration) bool {
	if info.Role != "" && info.Role != m.lease.role {
		// A session's or a shard's: its holder never rewrites it, or times
		// it by another rule. Never broken here.
		m.silence = silenceWatch{}
		return false
	}
	due := m.silence.observe(info, m.lease.settings.LeaseDuration)
	if due.IsZero() {
		return false
	}
	if left := time.Until(due); left > 0 {
		*wait = min(*wait, left)
		return false
	}
	w := m.silence
	s := m.lease.settings
	outcome, err := m.lease.breakIfUnchanged(ctx, w.etag)
	m.term.metrics.silentBreak(outcome)
	if outcome != breakFailed {
		m.silence = silenceWatch{} // this ETag's clock is spent
	}
	switch outcome {
	case breakDone:
		stood := time.Since(w.since)
		m.logger.Warn("leaderelection: broke the lease of a silent leader: its ETag stood unchanged for the lease duration it declared",
			"container", s.Container, "blob", s.Blob, "leader", w.leader.Identity, "term", w.leader.Number,
			"declared", w.declared, "stood", stood.Round(time.Millisecond))
		m.emit(Event{Kind: SilentLeaseBroken, Term: w.leader, Silence: stood})
		return true
	case noLease:
		return true
	case etagChanged:
		m.logger.Debug("leaderelection: a leader renewed just before its lease would have been broken", "container", s.Container, "blob", s.Blob)
	default:
		// The ETag has stood long enough whatever the break's fate: keep
		// timing it, and try again soon, rather than wait a whole lease
		// duration more (the break stays conditional on that ETag).
		*wait = min(*wait, s.retryDelay())
		m.logger.Debug("leaderelection: could not break a silent leader's lease; reading it again", "container", s.Container, "blob", s.Blob, "error", err)
	}
	return false
}

// Healthy reports nil while this instance is a healthy leader or follower,
// and an error saying why otherwise:
//   - its leader func is still running StopMargin after its lease context
//     was cancelled (see [LeaseContext]): the lease may have passed to
//     another instance while it still acts;
//   - its func has stalled (see [WithStallTimeout]) and not yet returned;
//   - it leads and its renewals have been failing for longer than
//     (LeaseDuration - StopMargin)/2 (6 s by default);
//   - it follows, and the lease blob's record, last read, does not read
//     (a [*RecordError]: a value another writer put there, or a blob of
//     another role): no term can be recorded over it until it is repaired,
//     and the error names the blob, the key and the value.
//
// A func winding down after the caller cancelled its context, however long,
// is healthy while the lease is renewed: it is shutting down as designed. It
// makes no network call. A follower that cannot reach storage is healthy:
// restarting it would not help.
func (m *BlobDistributedMutex) Healthy() error { return m.term.healthy() }

// HealthHandler serves [BlobDistributedMutex.Healthy] over HTTP, for a
// Kubernetes liveness probe: 200 "ok", or 503 with the reason; a quorum
// mutex that leads on fewer than all its accounts answers 200 "degraded:"
// with the accounts it does not hold (see [BlobDistributedMutex.Degraded]).
func (m *BlobDistributedMutex) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := m.Healthy(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		if err := m.Degraded(); err != nil {
			fmt.Fprintln(w, "degraded:", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
