package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	lease     *BlobLeaseManager
	fn        func(ctx context.Context) error
	logger    *slog.Logger
	opts      options
	metrics   *metrics
	running   atomic.Bool
	leading   atomic.Bool
	health    health
	observed  int64       // highest term number reported or held; touched only by the Run goroutine
	freeETag  azcore.ETag // the blob's ETag when this follower last saw the lease free; likewise
	badRecord string      // the record problem last reported ("" if none); likewise
	twin      twinWatch   // a term held under this instance's identity, not by it; likewise

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
	handedETag azcore.ETag
	handedSeen time.Time

	// prefix is set on a ShardOwner's session (its owner's prefix): lead()
	// then logs a session's start and end, not a leader's. shard is set on a
	// shard's run. Both only name things in the logs.
	prefix string
	shard  bool

	// silence is a follower's clock on an ETag lease (silence.go); touched
	// only by the Run goroutine.
	silence silenceWatch

	// afterRelease, if set, runs after each term's release, within the
	// same endWindow (a session deletes its blob).
	afterRelease func(ctx context.Context)
	// ending, if set, decides how a term ends once its func has returned
	// (a ShardOwner's session with a lease ID file: see sessionfile.go):
	// endKeep sends nothing, and leaves the lease and its record to the
	// process that resumes it; endRelease ends the term as usual;
	// endAbandon sends nothing either (the file could not move on: the
	// lease is left to the followers' rule). lost says whether the lease is
	// known lost.
	ending func(lost bool) endHow
	// renewSoon, if set, asks the renewal loop for a renewal now; it sends
	// the renewal's outcome on the channel it received (buffered). A
	// session asks for one to say, at once, that it is leaving.
	renewSoon chan chan<- error
	// windDown is how long a func may wind down after its context was
	// cancelled (the lease still ours) before that is worth a warning:
	// StopMargin, and for a session the time it hands its shards on.
	windDown time.Duration
}

// endHow is how a term ends once its func has returned (see ending).
type endHow int

const (
	endRelease endHow = iota // mark the term ended, release the lease, then afterRelease
	endKeep                  // send nothing: the lease and its record stay for a resume
	endAbandon               // send nothing: the lease may not be released
)

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
	// Long enough for every contender polling the blob, every
	// RetryInterval, to have read a blob created again and raised its seed.
	lm.settle = 2 * lm.settings.RetryInterval
	m := &BlobDistributedMutex{
		lease:   lm,
		fn:      fn,
		logger:  lm.logger,
		opts:    o,
		metrics: newMetrics(o.meterProvider, settings.Container, settings.Blob),
	}
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
func (m *BlobDistributedMutex) IsLeader() bool { return m.leading.Load() }

// Leader asks the server who leads, and since when (see
// [BlobLeaseManager.Inspect]). It needs no lease.
func (m *BlobDistributedMutex) Leader(ctx context.Context) (LeaseInfo, error) {
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
	// be ours: every lease activity ends before Run returns.
	unlock, err := m.lease.LockLeaseIDFile()
	if err != nil {
		return err
	}
	defer unlock()
	defer m.metrics.observeLeading(m.leading.Load)()

	s := m.lease.settings
	m.logger.Info("leaderelection: contending for leadership", "container", s.Container, "blob", s.Blob,
		"identity", m.opts.identity, "lease", m.lease.Kind(), "leaseDuration", s.LeaseDuration)
	backoff := s.RetryInterval
	// Backing off longer than a native lease lasts gains nothing; a long
	// ETag lease would have followers notice a recovery only after hours.
	maxBackoff := max(s.RetryInterval, min(s.LeaseDuration, maxLeaseDuration))
	var failing failureLog
	// look is whether to read the lease's state before trying to acquire
	// it. Followers poll with a cheap read while someone leads (which also
	// tells them who), so they make one request per RetryInterval either
	// way. After a transient failure they acquire directly: an acquire whose
	// answer was lost may have succeeded, and repeating it with the same
	// lease ID claims it.
	// With a priority, it looks first: a lease just handed to another
	// contender is left to it (see deferTo).
	look := m.opts.prioritySet
	// standAside is set when this instance was deposed (its lease lost,
	// broken, or its func stalled): it lets the lease go free once without
	// taking it, so a follower takes over rather than the deposed leader
	// winning the race again.
	standAside := false
	// mayHold is set while an acquire's outcome is unknown: it may have
	// taken the lease with its answer lost, until an answer says whose the
	// lease is. Leaving then, we give the lease back, so that followers
	// need not wait out a whole lease (an ETag lease's may be hours); once,
	// within RequestTimeout of ctx's end, and quietly: the lease is
	// probably not ours.
	mayHold := false
	defer func() {
		if !mayHold && m.candidate.lease == nil && m.twinMark.lease == nil {
			return
		}
		end, cancel := m.endWindow(ctx)
		defer cancel()
		if mayHold {
			m.releaseQuietly(end, false)
		}
		m.withdraw(end, &m.candidate) // not to be handed a lease it will not take
		m.withdraw(end, &m.twinMark)
	}()
	wait := time.Duration(0)
	for clock.Sleep(ctx, wait) {
		wait = clock.Jitter(s.RetryInterval)
		handedTo := "" // whom the last look showed the free lease handed to
		if look {
			info, err := m.lease.Inspect(ctx)
			var problem *RecordError
			if err == nil {
				m.observe(info)
				problem = m.lease.recordProblem(info)
				m.noteRecord(problem)
				m.stand(ctx, info, &wait)
				m.markTwin(ctx, m.twin.seen && info.Held() && info.Leader.Identity == m.opts.identity, &wait)
				handedTo = info.HandedTo
			}
			silent := err == nil && m.breakIfSilent(ctx, info, &wait)
			if err == nil && info.Held() && !silent {
				failing.recovered(m.logger, "leaderelection: storage reachable again", "container", s.Container, "blob", s.Blob)
				backoff = s.RetryInterval
				m.metrics.attempt("held")
				if info.Leader.Identity != m.opts.identity {
					standAside = false // someone else took over: done standing aside
				}
				continue
			}
			if err == nil && !silent && !info.Held() {
				if left := m.lease.seedFresh(ctx, info); left > 0 {
					wait = min(wait, left)
					continue
				}
				if left, ok := m.deferTo(info); ok {
					wait = min(wait, left)
					continue
				}
			}
			if err == nil && !silent && problem.blocks() {
				// A term cannot be recorded over this record: poll it
				// until it is repaired, rather than take the lease and
				// give it back at every turn.
				continue
			}
			if err == nil && standAside && !silent {
				standAside = false
				wait = clock.Behind(s.RetryInterval)
				continue
			}
		}
		if ctx.Err() != nil {
			// Cancelled during the read: an acquire now would be cut off
			// unanswered, and leave a lease to give back that nobody took.
			break
		}
		g, err := m.lease.Acquire(ctx)
		m.metrics.attempt(outcome(err, "acquired"))
		look = true
		// A request that never left this host (no connection) took
		// nothing, and leaves what an earlier one may have taken as it was.
		if !errors.Is(err, ErrTransient) || !unsent(err) {
			mayHold = errors.Is(err, ErrTransient)
		}
		switch {
		case err == nil:
			failing.recovered(m.logger, "leaderelection: storage reachable again", "container", s.Container, "blob", s.Blob)
			backoff = s.RetryInterval
			// Its candidacy, if it stood, lapses by itself: a delete now
			// would delay the func, and one at the end stretch the
			// shutdown's bound.
			m.candidate.lease, m.twinMark.lease = nil, nil
			m.passedOver = handedTo
			if ctx.Err() != nil {
				end, cancel := m.endWindow(ctx) // won just as the caller gave up
				m.releaseQuietly(end, true)
				cancel()
				break
			}
			reason, err := m.lead(ctx, g)
			if err != nil {
				return err
			}
			standAside = reason == ReasonLeaseLost || reason == ReasonStalled || reason == ReasonDeadline
			// Followers retry within one RetryInterval; waiting a little
			// longer lets one of them take over, rather than this instance,
			// whose func just ended (perhaps failing), winning again.
			wait = clock.Behind(s.RetryInterval)
		case ctx.Err() != nil:
			// The acquire may have succeeded on the server with its answer
			// cut off: mayHold gives the lease back on the way out.
		case errors.Is(err, ErrLeaseHeld):
			failing.recovered(m.logger, "leaderelection: storage reachable again", "container", s.Container, "blob", s.Blob)
			m.logger.Debug("leaderelection: lease held by another instance", "container", s.Container, "blob", s.Blob)
			backoff = s.RetryInterval
		case errors.Is(err, ErrPermanent):
			m.logger.Error("leaderelection: giving up: storage refused the lease request", "container", s.Container, "blob", s.Blob, "error", err)
			return err
		default:
			failing.failed(m.logger, "leaderelection: cannot reach the lease; retrying with backoff", "container", s.Container, "blob", s.Blob, "error", err)
			look = false
			wait = clock.Jitter(backoff)
			backoff = min(2*backoff, maxBackoff)
		}
	}
	return ctx.Err()
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

// noteRecord reports a record on the lease blob that this instance cannot
// build on (nil: none), at Error, once for each value, and that it reads
// again once it is repaired; health reports it meanwhile.
func (m *BlobDistributedMutex) noteRecord(problem *RecordError) {
	m.health.setRecord(problem)
	key := ""
	if problem != nil {
		key = problem.Key + "=" + problem.Value
	}
	if key == m.badRecord {
		return
	}
	was := m.badRecord
	m.badRecord = key
	s := m.lease.settings
	switch {
	case problem != nil && problem.blocks():
		m.logger.Error("leaderelection: cannot lead: the lease blob's record cannot be built on; repair it (leaderctl repair)",
			"container", s.Container, "blob", s.Blob, "key", problem.Key, "value", problem.Value, "error", problem)
	case problem != nil:
		m.logger.Error("leaderelection: the lease blob's record does not read; it is not trusted",
			"container", s.Container, "blob", s.Blob, "key", problem.Key, "value", problem.Value, "error", problem)
	case was != "":
		m.logger.Info("leaderelection: the lease blob's record reads again", "container", s.Container, "blob", s.Blob)
	}
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

// lead runs one term: it records the term, runs the leader func under a
// context the renewal loop cancels, and releases the lease once the func has
// returned. It returns why the term ended ("" if it never started), and a
// non-nil error only when contention must stop (a permanent storage error).
func (m *BlobDistributedMutex) lead(ctx context.Context, g Grant) (reason StopReason, err error) {
	s := m.lease.settings
	state := &termState{}
	// Two contexts for the two stages of a stop (see the top of renew.go):
	// leaderCtx, the func's own, ends with the caller's context too;
	// leaseCtx only when the lease may pass to another instance.
	leaderCtx, cancel := context.WithCancelCause(ctx)
	leaseCtx, cancelLease := context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), termKey{}, state))
	state.lease = leaseCtx
	ts := termStop{pleaseStop: cancel, stopNow: func(cause error) {
		cancelLease(cause)
		cancel(cause)
	}}
	fuse := newSafetyFuse(g.safetyDeadline(s.StopMargin), ts.stopNow, m.lease.boot)
	state.fuse = fuse
	m.handTo.Store(nil)
	defer m.metrics.holding(state)() // after the release below: the lease is held until then
	m.health.beginTerm()
	// Renewal outlives the caller's cancellation: it stops when the func has
	// returned.
	stopCtx, stopRenewing := context.WithCancel(context.WithoutCancel(ctx))
	funcDone := make(chan struct{})
	var wg sync.WaitGroup
	var renewErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		renewErr = m.keepAlive(stopCtx, g, fuse, ts, m.lease.Renew, state)
	}()
	go func() {
		defer wg.Done()
		m.watchFunc(leaderCtx, leaseCtx, funcDone)
	}()

	var (
		term     Term
		started  bool // StartedLeading was (being) reported: StoppedLeading must follow
		returned bool // the func returned rather than panicked
		funcErr  error
	)
	// This runs however lead exits: normally, or by a panic from the func or
	// from a hook (logger, metrics, event callback). Only now that the func
	// is no longer running is the lease released; a panic goes on after.
	defer func() {
		funcEnd := time.Now()
		m.leading.Store(false)
		expires := fuse.current().Add(s.StopMargin)
		// Why the func was stopped: the lease's reason if it came to that
		// (a lease lost while winding down after a caller's cancel says so).
		cause := context.Cause(leaseCtx)
		if cause == nil {
			cause = context.Cause(leaderCtx)
		}
		close(funcDone)
		ts.stopNow(errTermEnded)
		stopRenewing()
		wg.Wait()
		fuse.stop()
		// Everything from here to the return shares one RequestTimeout
		// (see BlobSettings.RequestTimeout): a shutdown is bounded even
		// with storage unreachable.
		end, cancelEnd := m.endWindow(ctx)
		defer cancelEnd()
		how := endRelease
		if m.ending != nil {
			how = m.ending(errors.Is(renewErr, ErrLeaseLost))
		}
		if how == endRelease && started && errors.Is(context.Cause(leaseCtx), errTermEnded) {
			// The lease is still ours: say the term ended, so that readers
			// do not take the next holder for us until it records its term.
			// Half the window at most: the release matters more.
			half, cancelHalf := context.WithTimeout(end, s.RequestTimeout/2)
			if err := m.lease.endTerm(half, term); err != nil {
				m.logger.Debug("leaderelection: could not mark the term ended", "container", s.Container, "blob", s.Blob, "error", err)
			}
			cancelHalf()
		}
		if how == endRelease && !errors.Is(renewErr, ErrLeaseLost) {
			m.releaseQuietly(end, true)
		}
		if how == endRelease && m.afterRelease != nil {
			m.afterRelease(end)
		}
		m.health.endTerm()
		if errors.Is(renewErr, ErrPermanent) && err == nil {
			err = renewErr
		}
		if !started {
			return
		}
		var why error
		reason, why = stopReason(returned, cause, funcErr)
		m.metrics.stopMargin(expires.Sub(funcEnd))
		m.metrics.transition("stopped", reason)
		if m.prefix != "" {
			m.logger.Info("leaderelection: session ended", "container", s.Container, "prefix", m.prefix,
				"reason", reason, "ran", funcEnd.Sub(state.beatBase).Round(time.Millisecond))
		} else {
			m.logger.Info("leaderelection: stopped leading", "container", s.Container, "blob", s.Blob, "term", term.Number,
				"reason", reason, "led", funcEnd.Sub(state.beatBase).Round(time.Millisecond))
		}
		m.emit(Event{Kind: StoppedLeading, Term: term, Reason: reason, Err: why, FuncReturned: funcEnd, LeaseExpiry: expires})
	}()

	term, err = m.recordTerm(leaderCtx, fuse)
	if err != nil {
		cancel(err)
		var bad *RecordError
		switch {
		case errors.As(err, &bad):
			m.noteRecord(bad)
			return "", nil
		case errors.Is(err, errNotSettled):
			m.logger.Debug("leaderelection: took a blob that has no term recorded yet; giving it back to watch it settle", "container", s.Container, "blob", s.Blob)
			return "", nil
		}
		m.logger.Warn("leaderelection: took the lease but could not record the term; releasing it", "container", s.Container, "blob", s.Blob, "error", err)
		if !errors.Is(err, ErrPermanent) {
			err = nil
		}
		return "", err
	}
	m.observed = max(m.observed, term.Number)
	if leaderCtx.Err() != nil {
		return "", nil // cancelled while recording: do not start the func at all
	}
	m.health.funcStarted()
	state.start(term)
	m.leading.Store(true)
	m.metrics.transition("started", "")
	if m.prefix != "" {
		m.logger.Info("leaderelection: session started", "container", s.Container, "prefix", m.prefix, "identity", term.Identity,
			"lease", m.lease.Kind(), "leaseDuration", s.LeaseDuration)
	} else {
		m.logger.Info("leaderelection: became leader", "container", s.Container, "blob", s.Blob, "term", term.Number, "identity", term.Identity,
			"lease", m.lease.Kind())
	}
	// Set just before the event, so that a hook panicking before it
	// cannot make StoppedLeading the first event of the term.
	started = true
	m.emit(Event{Kind: StartedLeading, Term: term, At: term.Since})

	if m.prefix == "" && !m.shard {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.watchCandidates(leaderCtx, cancel, m.passedOver)
		}()
	}
	if fuse.ahead() {
		funcErr = m.fn(context.WithValue(leaderCtx, termKey{}, state))
	}
	returned = true
	switch {
	case funcErr != nil && leaderCtx.Err() == nil && m.prefix == "":
		m.logger.Warn("leaderelection: leader func returned an error; releasing the lease", "container", s.Container, "blob", s.Blob, "error", funcErr)
	case funcErr != nil:
		// A session's func (the shard loop) fails only when storage
		// refuses it for good, which ShardOwner.Run logs as it returns.
		m.logger.Debug("leaderelection: leader func returned after its context was cancelled", "error", funcErr)
	}
	return "", nil // the deferred cleanup sets reason and err
}

// stopReason names why a term ended, from the leader context's cause at the
// moment the func returned.
func stopReason(returned bool, cause, funcErr error) (StopReason, error) {
	var lost *leaseLostError
	switch {
	case !returned:
		return ReasonFuncPanicked, nil
	case cause == nil:
		return ReasonFuncReturned, funcErr
	case errors.Is(cause, ErrRenewDeadline):
		return ReasonDeadline, cause
	case errors.As(cause, &lost):
		return ReasonLeaseLost, cause
	case errors.Is(cause, ErrStalled):
		return ReasonStalled, cause
	case errors.Is(cause, ErrPermanent):
		return ReasonStorageRefused, cause
	case errors.Is(cause, ErrPreferredCandidate):
		return ReasonPreferred, cause
	}
	return ReasonCallerCancelled, cause
}

// recordTerm writes this term into the blob's metadata, retrying transient
// failures until ctx (the leader's, cancelled at the safety deadline) ends.
func (m *BlobDistributedMutex) recordTerm(ctx context.Context, fuse *safetyFuse) (Term, error) {
	retryDelay := m.lease.settings.retryDelay()
	for {
		callCtx, cancel := context.WithDeadline(ctx, fuse.current())
		t, g, err := m.lease.recordTerm(callCtx, m.opts.identity)
		cancel()
		if err == nil {
			m.securedByRecord(fuse, g)
		}
		if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrPermanent) || errors.Is(err, ErrMalformedRecord) || errors.Is(err, errNotSettled) {
			return t, err
		}
		if !clock.Sleep(ctx, retryDelay) {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return Term{}, cause
			}
			return Term{}, err
		}
	}
}

// errTermEnded cancels the leader's context once its func has returned.
var errTermEnded = errors.New("leaderelection: term ended")

// watchFunc records in the health state when the running func's contexts
// end, and tells the func's two stages of a stop apart in the logs: a func
// winding down after its own context ended, while the lease is still ours,
// is normal and at most worth a warning; a func still running StopMargin
// after its lease context ended breaks the contract that keeps leaders from
// overlapping, and is logged at Error until it returns.
func (m *BlobDistributedMutex) watchFunc(leaderCtx, leaseCtx context.Context, funcDone <-chan struct{}) {
	select {
	case <-funcDone:
		return
	case <-leaderCtx.Done():
	}
	m.health.cancelled(context.Cause(leaderCtx))
	s := m.lease.settings
	cancelled := time.Now()
	windingDown := time.NewTimer(s.StopMargin + m.windDown)
	defer windingDown.Stop()
	for leaseCtx.Err() == nil {
		select {
		case <-funcDone:
			return
		case <-leaseCtx.Done():
		case <-windingDown.C:
			m.logger.Log(context.Background(), m.stopLevel(slog.LevelWarn), "leaderelection: "+m.funcName()+" still winding down after its context was cancelled; the lease is still ours",
				"container", s.Container, "blob", s.Blob, "cancelledFor", time.Since(cancelled).Round(time.Millisecond),
				"cause", fmt.Sprint(context.Cause(leaderCtx)))
			windingDown.Reset(failureLogEvery)
		}
	}
	m.health.leaseEnded(context.Cause(leaseCtx))
	ended := time.Now()
	t := time.NewTicker(s.StopMargin)
	defer t.Stop()
	for {
		select {
		case <-funcDone:
			return
		case <-t.C:
			m.logger.Log(context.Background(), m.stopLevel(slog.LevelError), "leaderelection: "+m.funcName()+" still running after its lease context was cancelled; it must stop acting within StopMargin of that, or two instances may act at once",
				"container", s.Container, "blob", s.Blob, "leaseEndedFor", time.Since(ended).Round(time.Millisecond),
				"cause", fmt.Sprint(context.Cause(leaseCtx)))
		}
	}
}

// funcName names, in the logs, what runs under this lease: the user's
// leader func, a shard's func, or the shard funcs a session waits for.
func (m *BlobDistributedMutex) funcName() string {
	switch {
	case m.prefix != "":
		return "shard funcs of the session"
	case m.shard:
		return "shard func"
	}
	return "leader func"
}

// stopLevel is the level of watchFunc's lines. A shard's are at Debug: one
// line per shard would be thousands; the session's own lines cover a
// shutdown or a lost session, reportSlow a handover or a removal, and
// lost() a shard taken from under its func.
func (m *BlobDistributedMutex) stopLevel(level slog.Level) slog.Level {
	if m.shard {
		return slog.LevelDebug
	}
	return level
}

// endWindow is the time a lease's holder has, once its func returned (or a
// follower once ctx is done), for the requests that end its term: one
// RequestTimeout in all, whatever ctx says.
func (m *BlobDistributedMutex) endWindow(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), m.lease.settings.RequestTimeout)
}

// releaseQuietly gives the lease back within ctx (an endWindow), best
// effort: if it fails the lease expires on its own (an ETag lease, once
// followers have timed its silence). held says whether the lease is ours;
// if not, it may be (an acquire whose answer was lost), and a failure is
// no news: logged at Debug. A release whose outcome is unknown is sent
// again while attempts fail fast, until ctx ends: an unreleased ETag lease
// holds everyone off for a whole lease duration, perhaps hours.
func (m *BlobDistributedMutex) releaseQuietly(ctx context.Context, held bool) {
	s := m.lease.settings
	h, err := m.lease.release(ctx)
	for h != nil && errors.Is(err, ErrTransient) && clock.Sleep(ctx, s.retryDelay()) {
		err = m.lease.releaseWith(ctx, h)
	}
	if err == nil {
		return
	}
	if !held {
		m.logger.Debug("leaderelection: could not give back a lease that an acquire whose answer was lost may have taken",
			"container", m.lease.container, "blob", m.lease.blob, "error", err)
		return
	}
	then := "it will expire by itself"
	if m.lease.Kind() == ETagLease {
		then = fmt.Sprintf("followers will break it once its ETag has stood for its lease duration, %v", s.LeaseDuration)
	}
	m.logger.Warn("leaderelection: could not release the lease; "+then,
		"container", m.lease.container, "blob", m.lease.blob, "error", err)
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
	m.metrics.silentBreak(outcome)
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

// securedByRecord extends an ETag lease's term by the write of its term
// record: the first write that secures the lease, and so the first that
// sets the safety deadline (the acquire's grant only bounded how long the
// record could take). A metadata write does not move a native lease's clock
// on the server: for one it does nothing. If the deadline passed while the
// record was being written, the fuse blows and the func is not started.
func (m *BlobDistributedMutex) securedByRecord(fuse *safetyFuse, g Grant) {
	if m.lease.Kind() == ETagLease {
		fuse.extend(g.safetyDeadline(m.lease.settings.StopMargin))
	}
}
