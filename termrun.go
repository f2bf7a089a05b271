package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blobelect/leaderelection/internal/clock"
)

// The term engine: one term of a lease, from the grant that took it to its
// release, as every election here runs it. A BlobDistributedMutex runs its
// leader func's terms on it, a ShardOwner each session's (whose func runs
// the shards), and a shard run the part that fits a lease it holds under its
// session's fuse (see shardrun.go): record the term, start the func under
// the safety fuse, keep the lease alive, stop in two stages, end the term,
// release. Why each step is where it is, and why that keeps two funcs from
// acting at once, is the argument at the top of renew.go.

// termKind says what runs under a term: it names it in the logs, and sets
// how loud they are.
type termKind int

const (
	runsLeader  termKind = iota // a mutex's leader func
	runsSession                 // a ShardOwner's session: its func runs the shard funcs
	runsShard                   // one shard's func, under its session's fuse
)

// termRunner runs the terms of one lease, one at a time.
type termRunner struct {
	lease    termLease // the lease its terms run on: one blob's, or a quorum's
	logger   *slog.Logger
	metrics  *metrics
	identity string        // written in each term's record
	stall    time.Duration // see WithStallTimeout; 0: off
	emit     func(Event)   // StartedLeading and StoppedLeading, as each term starts and ends
	kind     termKind
	prefix   string // a session's: its owner's prefix, which its logs name

	health    health
	leading   atomic.Bool // a term's func is running
	badRecord string      // the record problem last reported ("" if none); see noteRecord

	// What an election adds to its terms, set before the first.
	hooks termHooks
}

// termLease is what the term engine needs of a lease: one blob's
// (*BlobLeaseManager), or a quorum's over several accounts (quorum.go). Each
// keeps the argument at the top of renew.go: a Grant it returns bounds, by
// its send time, when another instance may take the lease.
type termLease interface {
	config() BlobSettings // the settings, with defaults applied
	bootClock() clock.Boot
	Kind() LeaseKind
	kindAttrs() []any // what a start line says of the lease's kind
	Renew(ctx context.Context) (Grant, error)
	recordTerm(ctx context.Context, identity string) (Term, Grant, error)
	endTerm(ctx context.Context, t Term) error
	// giveBack releases the lease, sending a release whose outcome is
	// unknown again while attempts fail fast, until ctx ends.
	giveBack(ctx context.Context) error
	// partsHeldWhenLost reports whether a lease known lost may still be
	// held in part (a quorum's accounts other than those lost), and is
	// given back all the same.
	partsHeldWhenLost() bool
}

// progressive is a lease whose renewal may extend the term before it
// returns: a quorum's, as each account answers (quorum.go). The engine
// hands it the fuse's extension for the life of each term.
type progressive interface {
	onProgress(extend func(Grant))
}

// blob is the manager of the one blob a session's or a shard's terms run
// on (never a quorum's: a ShardOwner runs over one account).
func (r *termRunner) blob() *BlobLeaseManager { return r.lease.(*BlobLeaseManager) }

// termHooks are what an election adds to the terms it runs.
type termHooks struct {
	// started is told each term once it is recorded, before its func
	// starts (the mutex notes the highest term it has seen).
	started func(Term)
	// whileLeading, if set, runs beside the func while it runs, and may
	// ask it to stop (the mutex's watch for a preferred candidate).
	whileLeading func(ctx context.Context, pleaseStop context.CancelCauseFunc)
	// ending, if set, decides how a term ends once its func has returned
	// (a ShardOwner's session with a lease ID file: see sessionfile.go):
	// endKeep sends nothing, and leaves the lease and its record to the
	// process that resumes it; endRelease ends the term as usual;
	// endAbandon sends nothing either (the file could not move on: the
	// lease is left to the followers' rule). lost says whether the lease is
	// known lost.
	ending func(lost bool) endHow
	// afterRelease, if set, runs after each term's release, within the
	// same endWindow (a session deletes its blob).
	afterRelease func(ctx context.Context)
	// renewSoon, if set, asks the renewal loop for a renewal now; it sends
	// the renewal's outcome on the channel it received (buffered). A
	// session asks for one to say, at once, that it is leaving.
	renewSoon chan chan<- error
	// windDown is how long a func may wind down after its context was
	// cancelled (the lease still ours) before that is worth a warning,
	// beyond StopMargin: for a session, the time it hands its shards on.
	windDown time.Duration
}

// endHow is how a term ends once its func has returned (see termHooks.ending).
type endHow int

const (
	endRelease endHow = iota // mark the term ended, release the lease, then afterRelease
	endKeep                  // send nothing: the lease and its record stay for a resume
	endAbandon               // send nothing: the lease may not be released
)

// liveTerm is one term in flight: its two contexts, its fuse, and what its
// end needs to know.
type liveTerm struct {
	r         *termRunner
	state     *termState
	leaderCtx context.Context // the func's own: cancelled to ask it to stop, or to stop now
	leaseCtx  context.Context // cancelled only when the lease may pass to another instance
	ts        termStop
	fuse      *safetyFuse

	stopRenewing context.CancelFunc
	funcDone     chan struct{}
	wg           sync.WaitGroup // the renewal loop, the func's watcher, whileLeading
	renewErr     error          // why the renewal loop ended (nil: the func returned first)

	term     Term
	started  bool // StartedLeading was (being) reported: StoppedLeading must follow
	returned bool // the func returned rather than panicked
	funcErr  error
}

// run runs one term of the lease g granted: it records the term, runs fn
// under a context the renewal loop cancels, and releases the lease once fn
// has returned. It returns why the term ended ("" if it never started), and
// a non-nil error only when contention must stop (a permanent storage
// error). A panic in fn releases the lease first, then goes on.
func (r *termRunner) run(ctx context.Context, g Grant, fn func(context.Context) error) (reason StopReason, err error) {
	t := r.begin(ctx, g)
	defer r.metrics.holding(t.state)() // after end's release: the lease is held until then
	// This runs however run exits: normally, or by a panic from the func or
	// from a hook (logger, metrics, event callback). Only now that the func
	// is no longer running is the lease released; a panic goes on after.
	defer func() { reason, err = t.end(ctx, err) }()
	if err := t.record(); err != nil || t.leaderCtx.Err() != nil {
		return "", err // cancelled while recording: the func does not start at all
	}
	t.start()
	if r.hooks.whileLeading != nil {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			r.hooks.whileLeading(t.leaderCtx, t.ts.pleaseStop)
		}()
	}
	if t.fuse.ahead() {
		t.funcErr = fn(context.WithValue(t.leaderCtx, termKey{}, t.state))
	}
	t.returned = true
	switch {
	case t.funcErr != nil && t.leaderCtx.Err() == nil && r.kind == runsLeader:
		s := r.lease.config()
		r.logger.Warn("leaderelection: leader func returned an error; releasing the lease", "container", s.Container, "blob", s.Blob, "error", t.funcErr)
	case t.funcErr != nil:
		// A session's func (the shard loop) fails only when storage
		// refuses it for good, which ShardOwner.Run logs as it returns.
		r.logger.Debug("leaderelection: leader func returned after its context was cancelled", "error", t.funcErr)
	}
	return "", nil // end sets reason and err
}

// begin arms a term: its two contexts (see the top of renew.go: leaderCtx,
// the func's own, ends with the caller's context too; leaseCtx only when
// the lease may pass to another instance), the fuse at the grant's safety
// deadline, the renewal loop, which outlives the caller's cancellation (it
// stops when the func has returned), and the watch on the func's stop.
func (r *termRunner) begin(ctx context.Context, g Grant) *liveTerm {
	s := r.lease.config()
	t := &liveTerm{r: r, state: &termState{}, funcDone: make(chan struct{})}
	t.leaderCtx, t.leaseCtx, t.ts = twoStages(ctx, context.WithoutCancel(ctx), t.state)
	t.fuse = newSafetyFuse(g.safetyDeadline(s.StopMargin), t.ts.stopNow, r.lease.bootClock())
	t.state.fuse = t.fuse
	if p, ok := r.lease.(progressive); ok {
		p.onProgress(func(g Grant) { t.fuse.extend(g.safetyDeadline(s.StopMargin)) })
	}
	r.health.beginTerm()
	stopCtx, stopRenewing := context.WithCancel(context.WithoutCancel(ctx))
	t.stopRenewing = stopRenewing
	t.wg.Add(2)
	go func() {
		defer t.wg.Done()
		t.renewErr = r.keepAlive(stopCtx, g, t.fuse, t.ts, r.lease.Renew, t.state)
	}()
	go func() {
		defer t.wg.Done()
		r.watchFunc(t.leaderCtx, t.leaseCtx, t.funcDone)
	}()
	return t
}

// twoStages makes a term's two contexts, for the two stages of a stop (see
// the top of renew.go): leaderCtx, the func's own, derived from
// funcParent, which ts.pleaseStop cancels alone; and leaseCtx, derived from
// leaseParent, which only ts.stopNow cancels (with leaderCtx), when the
// lease may pass to another instance. leaseCtx carries the term's state,
// and is the state's lease context.
func twoStages(funcParent, leaseParent context.Context, state *termState) (leaderCtx, leaseCtx context.Context, ts termStop) {
	leaderCtx, cancel := context.WithCancelCause(funcParent)
	leaseCtx, cancelLease := context.WithCancelCause(context.WithValue(leaseParent, termKey{}, state))
	state.lease = leaseCtx
	return leaderCtx, leaseCtx, termStop{pleaseStop: cancel, stopNow: func(cause error) {
		cancelLease(cause)
		cancel(cause)
	}}
}

// record writes the term's record, under the lease, before the func may
// start. A record that cannot be built on, a blob that must settle first,
// or a failure, ends the term before it started: a permanent one ends the
// contention too (the error returned).
func (t *liveTerm) record() error {
	r := t.r
	s := r.lease.config()
	term, err := r.recordTerm(t.leaderCtx, t.fuse)
	if err != nil {
		t.ts.pleaseStop(err)
		var bad *RecordError
		switch {
		case errors.As(err, &bad):
			r.noteRecord(bad)
			return nil
		case errors.Is(err, errNotSettled):
			r.logger.Debug("leaderelection: took a blob that has no term recorded yet; giving it back to watch it settle", "container", s.Container, "blob", s.Blob)
			return nil
		}
		r.logger.Warn("leaderelection: took the lease but could not record the term; releasing it", "container", s.Container, "blob", s.Blob, "error", err)
		if !errors.Is(err, ErrPermanent) {
			err = nil
		}
		return err
	}
	t.term = term
	if r.hooks.started != nil {
		r.hooks.started(term)
	}
	return nil
}

// start marks the recorded term's func as running, and says so.
func (t *liveTerm) start() {
	r := t.r
	s := r.lease.config()
	r.health.funcStarted()
	t.state.start(t.term)
	r.leading.Store(true)
	r.metrics.transition("started", "")
	msg, attrs := "leaderelection: became leader", []any{"container", s.Container, "blob", s.Blob, "term", t.term.Number, "identity", t.term.Identity}
	if r.kind == runsSession {
		msg, attrs = "leaderelection: session started", []any{"container", s.Container, "prefix", r.prefix, "identity", t.term.Identity,
			"leaseDuration", s.LeaseDuration}
	}
	r.logger.Info(msg, append(attrs, r.lease.kindAttrs()...)...)
	// Set just before the event, so that a hook panicking before it
	// cannot make StoppedLeading the first event of the term.
	t.started = true
	r.emit(Event{Kind: StartedLeading, Term: t.term, At: t.term.Since})
}

// end stops the term once its func is no longer running (returned,
// panicked, or never started): the lease context ends, the renewal loop
// stops, then the term is marked ended and the lease released (unless the
// election keeps it), all within one endWindow, and the term's end is said.
// It returns why the term ended, and err, or the renewal loop's permanent
// failure.
func (t *liveTerm) end(ctx context.Context, err error) (StopReason, error) {
	r := t.r
	s := r.lease.config()
	funcEnd := time.Now()
	r.leading.Store(false)
	expires := t.fuse.current().Add(s.StopMargin)
	// Why the func was stopped: the lease's reason if it came to that
	// (a lease lost while winding down after a caller's cancel says so).
	cause := context.Cause(t.leaseCtx)
	if cause == nil {
		cause = context.Cause(t.leaderCtx)
	}
	close(t.funcDone)
	t.ts.stopNow(errTermEnded)
	t.stopRenewing()
	t.wg.Wait()
	if p, ok := r.lease.(progressive); ok {
		p.onProgress(nil)
	}
	t.fuse.stop()
	t.release(ctx)
	r.health.endTerm()
	if errors.Is(t.renewErr, ErrPermanent) && err == nil {
		err = t.renewErr
	}
	if !t.started {
		return "", err
	}
	reason, why := stopReason(t.returned, cause, t.funcErr)
	r.metrics.stopMargin(expires.Sub(funcEnd))
	r.metrics.transition("stopped", reason)
	if r.kind == runsSession {
		r.logger.Info("leaderelection: session ended", "container", s.Container, "prefix", r.prefix,
			"reason", reason, "ran", funcEnd.Sub(t.state.beatBase).Round(time.Millisecond))
	} else {
		r.logger.Info("leaderelection: stopped leading", "container", s.Container, "blob", s.Blob, "term", t.term.Number,
			"reason", reason, "led", funcEnd.Sub(t.state.beatBase).Round(time.Millisecond))
	}
	r.emit(Event{Kind: StoppedLeading, Term: t.term, Reason: reason, Err: why, FuncReturned: funcEnd, LeaseExpiry: expires})
	return reason, err
}

// release ends the term on storage, once its func has returned: everything
// shares one RequestTimeout (see BlobSettings.RequestTimeout), so that a
// shutdown is bounded even with storage unreachable.
func (t *liveTerm) release(ctx context.Context) {
	r := t.r
	s := r.lease.config()
	end, cancelEnd := r.endWindow(ctx)
	defer cancelEnd()
	lost := errors.Is(t.renewErr, ErrLeaseLost)
	how := endRelease
	if r.hooks.ending != nil {
		how = r.hooks.ending(lost)
	}
	if how != endRelease {
		return
	}
	if t.started && errors.Is(context.Cause(t.leaseCtx), errTermEnded) {
		// The lease is still ours: say the term ended, so that readers
		// do not take the next holder for us until it records its term.
		// Half the window at most: the release matters more.
		half, cancelHalf := context.WithTimeout(end, s.RequestTimeout/2)
		if err := r.lease.endTerm(half, t.term); err != nil {
			r.logger.Debug("leaderelection: could not mark the term ended", "container", s.Container, "blob", s.Blob, "error", err)
		}
		cancelHalf()
	}
	if !lost || r.lease.partsHeldWhenLost() {
		r.releaseQuietly(end, !lost)
	}
	if r.hooks.afterRelease != nil {
		r.hooks.afterRelease(end)
	}
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
func (r *termRunner) recordTerm(ctx context.Context, fuse *safetyFuse) (Term, error) {
	retryDelay := r.lease.config().retryDelay()
	for {
		callCtx, cancel := context.WithDeadline(ctx, fuse.current())
		t, g, err := r.lease.recordTerm(callCtx, r.identity)
		cancel()
		if err == nil {
			r.securedByRecord(fuse, g)
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

// securedByRecord extends an ETag lease's term by the write of its term
// record: the first write that secures the lease, and so the first that
// sets the safety deadline (the acquire's grant only bounded how long the
// record could take). A metadata write does not move a native lease's clock
// on the server: for one it does nothing. If the deadline passed while the
// record was being written, the fuse blows and the func is not started.
func (r *termRunner) securedByRecord(fuse *safetyFuse, g Grant) {
	if r.lease.Kind() == ETagLease {
		fuse.extend(g.safetyDeadline(r.lease.config().StopMargin))
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
func (r *termRunner) watchFunc(leaderCtx, leaseCtx context.Context, funcDone <-chan struct{}) {
	select {
	case <-funcDone:
		return
	case <-leaderCtx.Done():
	}
	r.health.cancelled(context.Cause(leaderCtx))
	s := r.lease.config()
	cancelled := time.Now()
	windingDown := time.NewTimer(s.StopMargin + r.hooks.windDown)
	defer windingDown.Stop()
	for leaseCtx.Err() == nil {
		select {
		case <-funcDone:
			return
		case <-leaseCtx.Done():
		case <-windingDown.C:
			r.logger.Log(context.Background(), r.stopLevel(slog.LevelWarn), "leaderelection: "+r.funcName()+" still winding down after its context was cancelled; the lease is still ours",
				"container", s.Container, "blob", s.Blob, "cancelledFor", time.Since(cancelled).Round(time.Millisecond),
				"cause", fmt.Sprint(context.Cause(leaderCtx)))
			windingDown.Reset(failureLogEvery)
		}
	}
	r.health.leaseEnded(context.Cause(leaseCtx))
	ended := time.Now()
	t := time.NewTicker(s.StopMargin)
	defer t.Stop()
	for {
		select {
		case <-funcDone:
			return
		case <-t.C:
			r.logger.Log(context.Background(), r.stopLevel(slog.LevelError), "leaderelection: "+r.funcName()+" still running after its lease context was cancelled; it must stop acting within StopMargin of that, or two instances may act at once",
				"container", s.Container, "blob", s.Blob, "leaseEndedFor", time.Since(ended).Round(time.Millisecond),
				"cause", fmt.Sprint(context.Cause(leaseCtx)))
		}
	}
}

// funcName names, in the logs, what runs under this lease: the user's
// leader func, a shard's func, or the shard funcs a session waits for.
func (r *termRunner) funcName() string {
	switch r.kind {
	case runsSession:
		return "shard funcs of the session"
	case runsShard:
		return "shard func"
	}
	return "leader func"
}

// stopLevel is the level of watchFunc's lines. A shard's are at Debug: one
// line per shard would be thousands; the session's own lines cover a
// shutdown or a lost session, reportSlow a handover or a removal, and
// lost() a shard taken from under its func.
func (r *termRunner) stopLevel(level slog.Level) slog.Level {
	if r.kind == runsShard {
		return slog.LevelDebug
	}
	return level
}

// endWindow is the time a lease's holder has, once its func returned (or a
// follower once ctx is done), for the requests that end its term: one
// RequestTimeout in all, whatever ctx says.
func (r *termRunner) endWindow(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.lease.config().RequestTimeout)
}

// releaseQuietly gives the lease back within ctx (an endWindow), best
// effort: if it fails the lease expires on its own (an ETag lease, once
// followers have timed its silence). held says whether the lease is ours;
// if not, it may be (an acquire whose answer was lost), and a failure is
// no news: logged at Debug. A release whose outcome is unknown is sent
// again while attempts fail fast, until ctx ends: an unreleased ETag lease
// holds everyone off for a whole lease duration, perhaps hours.
func (r *termRunner) releaseQuietly(ctx context.Context, held bool) {
	s := r.lease.config()
	err := r.lease.giveBack(ctx)
	if err == nil {
		return
	}
	if !held {
		r.logger.Debug("leaderelection: could not give back a lease that an acquire whose answer was lost may have taken",
			"container", s.Container, "blob", s.Blob, "error", err)
		return
	}
	then := "it will expire by itself"
	if r.lease.Kind() == ETagLease {
		then = fmt.Sprintf("followers will break it once its ETag has stood for its lease duration, %v", s.LeaseDuration)
	}
	r.logger.Warn("leaderelection: could not release the lease; "+then,
		"container", s.Container, "blob", s.Blob, "error", err)
}

// noteRecord reports a record on the lease blob that this instance cannot
// build on (nil: none), at Error, once for each value, and that it reads
// again once it is repaired; health reports it meanwhile.
func (r *termRunner) noteRecord(problem *RecordError) {
	r.health.setRecord(problem)
	key := ""
	if problem != nil {
		key = problem.Key + "=" + problem.Value
	}
	if key == r.badRecord {
		return
	}
	was := r.badRecord
	r.badRecord = key
	s := r.lease.config()
	switch {
	case problem != nil && problem.blocks():
		r.logger.Error("leaderelection: cannot lead: the lease blob's record cannot be built on; repair it (leaderctl repair)",
			"container", s.Container, "blob", s.Blob, "key", problem.Key, "value", problem.Value, "error", problem)
	case problem != nil:
		r.logger.Error("leaderelection: the lease blob's record does not read; it is not trusted",
			"container", s.Container, "blob", s.Blob, "key", problem.Key, "value", problem.Value, "error", problem)
	case was != "":
		r.logger.Info("leaderelection: the lease blob's record reads again", "container", s.Container, "blob", s.Blob)
	}
}

// healthy is a term's health as Healthy reports it: see
// [BlobDistributedMutex.Healthy], whose rules it applies.
func (r *termRunner) healthy() error {
	s := r.lease.config()
	h, record := r.health.snapshot()
	if !h.leading {
		if record != nil {
			return fmt.Errorf("leaderelection: the lease blob's record does not read, and is not trusted (repair it: leaderctl repair): %w", record)
		}
		return nil
	}
	if !h.leaseEndedAt.IsZero() {
		if late := time.Since(h.leaseEndedAt); late > s.StopMargin {
			return fmt.Errorf("leaderelection: leader func still running %v after its lease context was cancelled (%v): another instance may lead", late.Round(time.Millisecond), h.leaseCause)
		}
	}
	if errors.Is(h.cause, ErrStalled) {
		return fmt.Errorf("leaderelection: leader func stalled: %v", h.cause)
	}
	if !h.renewFailures.IsZero() {
		if failing := time.Since(h.renewFailures); failing > (s.LeaseDuration-s.StopMargin)/2 {
			return fmt.Errorf("leaderelection: lease renewals failing for %v", failing.Round(time.Millisecond))
		}
	}
	return nil
}
