package leaderelection

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ShardOwner runs a func for each shard of a set (one per tenant, partition,
// queue...) on exactly one live instance at a time, and spreads the shards
// evenly over the instances: a fair share each, within one. Build it with
// [NewShardOwner] and call Run on every instance.
//
// Each instance runs a session: a blob and an [ETagLease] of its own,
// renewed by one metadata write per RenewInterval (see session.go). Each
// shard is a blob whose infinite lease its owner takes, with a record naming
// its session; it needs no renewal of its own, as the session's safety
// deadline is every shard's. An instance lists the sessions once per
// RetryInterval (one request) and lists the shards (1,000 a page) only while
// ownership moves: while it holds fewer than its share, and once after each
// change settles (the instances take turns), so that when a session dies its
// shards are claimed from that listing. In steady state an instance
// therefore makes one write per RenewInterval and one list per
// RetryInterval, whatever the number of shards.
//
// Blobs live under BlobSettings.Blob + "/": sessions/<session ID> and
// shards/<shard name>. The prefix is reserved for the owner; a shard's blob
// outlives the shard's removal, and keeps its term number.
type ShardOwner struct {
	settings BlobSettings // defaults applied; Blob is the prefix without its slash
	prefix   string       // Blob + "/"
	fn       func(ctx context.Context, shard string) error
	opts     options
	logger   *slog.Logger

	cc        *container.Client
	red       secretRedactor
	transport *http.Transport   // built by the library, nil for the caller's
	ops       *BlobLeaseManager // classifies and bounds the listings
	reached   atomic.Bool       // the account has answered
	running   atomic.Bool

	sessionMetrics *metrics // the sessions' renewals and breaks
	shardMetrics   *metrics // the shards' terms
	counts         shardCounters

	eventMu sync.Mutex // events are reported one at a time
	wake    chan struct{}
	release chan struct{} // bounds the releases in flight

	mu       sync.Mutex
	set      map[string]bool      // the shards to run
	runs     map[string]*shardRun // the shards whose func runs here, or is being stopped
	claiming map[string]bool      // claims in flight
	cooldown map[string]time.Time // shards whose func returned by itself: not claimed again before
	leftover map[string]string    // shard -> lease ID of a lease this instance may hold and must release
	current  *session
	target   int
	live     int
	mgrErr   error // a permanent error that ended a session's manager
	panicked any   // a shard func's panic, to propagate from Run
	panicSet bool
}

// The causes (see [context.Cause]) of a shard func's context when its
// owner gives the shard up while the shard's lease is still its own: the
// func is asked to stop, and the lease is released once it has returned.
var (
	// ErrShardHandedOver: the shard moves to another instance, to balance
	// the load (a new instance joined).
	ErrShardHandedOver = errors.New("leaderelection: shard handed over to balance the load")
	// ErrShardRemoved: the shard left the set (see [ShardOwner.SetShards]).
	ErrShardRemoved = errors.New("leaderelection: shard removed from the set")
)

// errShardPanicked asks every other shard func to stop when one panicked:
// the panic propagates from Run once they have all returned.
var errShardPanicked = errors.New("leaderelection: another shard's func panicked")

// Limits on how much ownership moves at once.
const (
	claimParallel  = 8  // claims in flight at once: on Azurite, 40 claimers got through 30 % more than 160, at half the latency
	claimBatch     = 64 // claims before the sessions are listed again (and the share recomputed)
	releaseAtOnce  = 16 // releases in flight at once
	lookupsPerList = 8  // unknown sessions looked up per listing of the shards
)

// NewShardOwner validates settings, the shard names and the options, and
// returns an owner that runs fn for the shards this instance holds. Every
// invalid setting is reported; a nil fn, an invalid identity or shard name,
// a shard named twice, WithStallTimeout and WithLeaseIDFile (which a
// ShardOwner does not support) are errors too. No network call is made.
//
// settings.Blob is the prefix of the owner's blobs. LeaseDuration is the
// sessions' lease, always an [ETagLease] here (3 s to 24 h; default 15 s):
// how long a crashed instance's shards wait, and how long a cut-off
// instance's shard funcs run on. RenewInterval is how often a session
// writes, RetryInterval how often the sessions are listed, StopMargin how
// long before its session could be broken every shard func's context is
// cancelled.
//
// Shard names are letters, digits and - _ . ~ : @ =, with / between
// non-empty segments, at most 256 characters, not ending with a dot.
func NewShardOwner(settings BlobSettings, shards []string, fn func(ctx context.Context, shard string) error, opts ...Option) (*ShardOwner, error) {
	var errs []error
	if fn == nil {
		errs = append(errs, errors.New("leaderelection: the shard func is nil"))
	}
	if err := settings.Validate(); err != nil {
		errs = append(errs, err)
	}
	if maxPrefix := 1024 - 1 - len(shardsDir) - maxShardName; len(settings.Blob) > maxPrefix {
		errs = append(errs, &SettingsError{Field: "Blob", Rule: fmt.Sprintf("is the ShardOwner's prefix: at most %d characters long, got %d", maxPrefix, len(settings.Blob))})
	}
	o := buildOptions(opts)
	if err := checkIdentity(o.identity); err != nil {
		errs = append(errs, err)
	}
	if o.stallTimeout != 0 {
		errs = append(errs, errors.New("leaderelection: WithStallTimeout is not supported by a ShardOwner"))
	}
	if o.leaseIDFileSet {
		errs = append(errs, errors.New("leaderelection: WithLeaseIDFile is not supported by a ShardOwner: a session never resumes"))
	}
	set, err := checkShardNames(shards)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	settings = settings.withDefaults()
	cc, red, transport, err := settings.containerClient()
	if err != nil {
		return nil, err
	}
	if transport != nil {
		// Claims, releases, the listing and the session's write run at
		// once: keep their connections rather than open new ones.
		transport.MaxIdleConnsPerHost = claimParallel + releaseAtOnce + 4
	}
	own := &ShardOwner{
		settings:  settings,
		prefix:    settings.Blob + "/",
		fn:        fn,
		opts:      o,
		logger:    o.logger,
		cc:        cc,
		red:       red,
		transport: transport,
		wake:      make(chan struct{}, 1),
		release:   make(chan struct{}, releaseAtOnce),
		set:       set,
		runs:      map[string]*shardRun{},
		claiming:  map[string]bool{},
		cooldown:  map[string]time.Time{},
		leftover:  map[string]string{},
	}
	own.ops = own.managerFor(settings.Blob, uuid.NewString())
	own.sessionMetrics = newMetrics(o.meterProvider, settings.Container, own.prefix+sessionsDir)
	own.shardMetrics = newMetrics(o.meterProvider, settings.Container, own.prefix+shardsDir)
	own.counts = newShardCounters(own.shardMetrics)
	return own, nil
}

// Identity is this instance's identity (see [WithIdentity]), written in its
// session's and its shards' records.
func (o *ShardOwner) Identity() string { return o.opts.identity }

// Settings returns the settings in force, with defaults applied.
func (o *ShardOwner) Settings() BlobSettings { return o.settings }

// SetShards replaces the set of shards, at any time, on any instance
// (every instance should come to have the same set: each computes its share
// from its own). A shard that leaves the set has its func's context
// cancelled with [ErrShardRemoved] and its lease released once the func
// returns; a new one is claimed by whichever instance is below its share.
// Names are checked as by NewShardOwner; on error nothing changes.
func (o *ShardOwner) SetShards(shards []string) error {
	set, err := checkShardNames(shards)
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.set = set
	o.mu.Unlock()
	o.poke()
	return nil
}

// Shards returns the set of shards, sorted.
func (o *ShardOwner) Shards() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.set))
	for n := range o.set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Owned returns the shards whose func runs on this instance now, sorted,
// including those asked to stop and not yet returned.
func (o *ShardOwner) Owned() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.runs))
	for n, r := range o.runs {
		if !r.returned.Load() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Session returns the ID of this instance's current session, "" between
// sessions.
func (o *ShardOwner) Session() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.current == nil {
		return ""
	}
	return o.current.id
}

// ownedCount is how many shards this instance holds and keeps: running, not
// being given up. A session's record publishes it.
func (o *ShardOwner) ownedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, r := range o.runs {
		if !r.leaving && !r.returned.Load() {
			n++
		}
	}
	return n
}

func (o *ShardOwner) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// pause waits d, or until poked, and reports whether ctx is still alive.
func (o *ShardOwner) pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-o.wake:
	}
	return true
}

func (o *ShardOwner) emit(e Event) {
	if o.opts.onEvent == nil {
		return
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	o.eventMu.Lock()
	defer o.eventMu.Unlock()
	o.opts.onEvent(e)
}

// Run runs sessions until ctx is done, and the funcs of the shards each
// session holds. It returns ctx.Err() when ctx is done, after every shard
// func has returned, every shard's lease and then the session's have been
// released (so other instances take the shards within a RetryInterval); or
// an error matching [ErrPermanent] when storage refuses us for good (bad
// credentials, missing permissions). Transient storage failures are retried
// forever with capped, jittered backoff.
//
// Each shard func runs under a context derived from ctx that carries the
// shard's term (see [TermFromContext]: its number is the shard's fencing
// token, one more than the last on the shard's blob). It is cancelled when
// ctx is, when the shard is handed over ([ErrShardHandedOver]) or removed
// ([ErrShardRemoved]): those ask the func to stop while the shard is still
// ours, and its lease is released once it returns. What means stop now, the
// shard may pass to another instance, cancels [LeaseContext] too: the
// session's safety deadline ([ErrRenewDeadline]: send time of its last
// confirmed write + LeaseDuration - StopMargin), or the session's or the
// shard's lease found lost ([ErrLeaseLost]). A shard func must stop acting
// within StopMargin of its LeaseContext ending. A func that returns by
// itself (nil or an error, which is logged) releases the shard, which this
// instance does not claim again for 1 to 1.25 RetryIntervals. A panic in a
// shard func releases that shard, then every other shard func is asked to
// stop; once all have returned and the leases are released the panic
// propagates from Run.
//
// A session that ends (its deadline passed, it was broken as silent) ends
// every shard func; once all have returned the instance starts a new
// session, with a new ID, and claims its share again. A shard func is never
// started while an earlier run of it on this instance is still running.
// No goroutine started by Run outlives it. Calling Run again while it runs
// returns [ErrAlreadyRunning].
func (o *ShardOwner) Run(ctx context.Context) error {
	if !o.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer o.running.Store(false)
	defer func() {
		if o.transport != nil {
			o.transport.CloseIdleConnections()
		}
	}()
	defer o.counts.observe(o)()
	s := o.settings
	backoff := s.RetryInterval
	maxBackoff := max(s.RetryInterval, min(s.LeaseDuration, maxLeaseDuration))
	var failing failureLog
	for ctx.Err() == nil {
		sess, g, err := o.startSession(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrPermanent):
			o.logger.Error("leaderelection: giving up: storage refused the session", "container", s.Container, "prefix", o.prefix, "error", err)
			return err
		case err != nil:
			failing.failed(o.logger, "leaderelection: cannot start a session; retrying with backoff", "container", s.Container, "prefix", o.prefix, "error", err)
			sleep(ctx, jitter(backoff))
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		failing.recovered(o.logger, "leaderelection: storage reachable again", "container", s.Container, "prefix", o.prefix)
		backoff = s.RetryInterval
		reason, err := sess.m.lead(ctx, g)
		o.endSession(ctx, sess)
		o.mu.Lock()
		mgrErr := o.mgrErr
		o.mgrErr = nil
		o.mu.Unlock()
		if mgrErr != nil {
			return mgrErr
		}
		if err != nil {
			return err
		}
		if ctx.Err() == nil {
			o.logger.Warn("leaderelection: session ended; every shard func has returned; starting a new session",
				"container", s.Container, "session", sess.id, "reason", reason)
		}
	}
	return ctx.Err()
}

// shardRun is one run of a shard's func on this instance.
type shardRun struct {
	name    string
	m       *BlobDistributedMutex // the shard's lease (this claim's ID), its health and logger
	term    Term
	etag    azcore.ETag // the ETag our record gave the blob: any other means the shard is not ours
	claimed time.Time   // when the record was confirmed
	ts      termStop
	state   *termState

	leaving  bool        // asked to stop for a handover or a removal; under ShardOwner.mu
	returned atomic.Bool // its func has returned
}

// candidate is a shard that a listing showed free to claim.
type candidate struct {
	name   string
	exists bool        // its blob exists (else the claim creates it)
	etag   azcore.ETag // its ETag in the listing: every step of a claim is conditional on it
	leased bool        // its lease must be broken first: its session is dead, or it was never recorded
	prev   int64       // the term number on the blob
	dead   bool        // a dead session held it: once this session's part is claimed, take it without waiting
}

// manager is one session's loop: it balances, claims, hands over, and runs
// the shards. Its fields are touched only by the session's goroutine.
type manager struct {
	o         *ShardOwner
	s         *session
	ctx       context.Context // the session func's context: please stop, or stop now
	shardsCtx context.Context // parent of every shard func's own context
	stopNow   context.Context // the session's lease context
	runs      sync.WaitGroup
	watch     *sessionWatch
	deadline  func() time.Time // the session's safety deadline

	cands     map[string]candidate // free shards by the last listing (and the dead sessions' since)
	freeSince map[string]time.Time // since when each was seen free
	part      []string             // this session's part of them (see assign), best first
	partFor   string               // the live sessions it was assigned among
	deathRoom map[string]int       // after a death, each live session's room by the last listing (see takeFromDead); nil otherwise
	deathFor  string               // the live sessions deathRoom is for
	fromDeath bool                 // the candidates are a dead session's shards by owners, not a listing's
	liveSig   string               // the live sessions, at the last change
	liveSince time.Time            // when they last changed
	stale     bool                 // the last claims from them mostly failed: list again
	listedAt  time.Time            // when the listing they come from started
	strayAt   time.Time            // when to look for leases nobody counts, if fewer shards than the set stay held
	lastList  time.Time
	listTook  time.Duration
	anomalies map[string]unleasedSince // leased shards without a live holder to name: since when their ETag stands

	// owners is who held each shard by the last listing (and this
	// session's own claims since): when a session dies, its shards are
	// claimed from here, without a listing of every shard.
	owners   map[string]holder
	ownersAt time.Time  // when the listing owners comes from started
	ownersMu sync.Mutex // claims write owners in parallel
	// The view of the sessions (who is live, what each holds) settles
	// after ownership moved; the shards are then listed once, at a random
	// moment, so that owners is fresh for the next death.
	viewSig   string
	viewSince time.Time
	settleAt  time.Time
	settled   bool
	// listNotBefore delays this instance's listing of the shards to its
	// turn, after a death.
	listNotBefore time.Time
}

// holder is who held a shard, by a listing.
type holder struct {
	session string
	etag    azcore.ETag
	term    int64
}

// manage is a session's func (lead() runs it under the session's lease): it
// runs the shards until the session's context ends, then stops them all and
// returns once every shard func has returned and its lease is released.
func (o *ShardOwner) manage(ctx context.Context, s *session) (err error) {
	state, _ := ctx.Value(termKey{}).(*termState)
	g := &manager{o: o, s: s, ctx: ctx, stopNow: LeaseContext(ctx), watch: newSessionWatch(), anomalies: map[string]unleasedSince{}, owners: map[string]holder{},
		cands: map[string]candidate{}, freeSince: map[string]time.Time{},
		deadline: func() time.Time { return state.fuse.current() }}
	shardsCtx, stopShards := context.WithCancelCause(ctx)
	g.shardsCtx = shardsCtx
	o.mu.Lock()
	o.current = s
	o.mu.Unlock()
	defer func() {
		cause := context.Cause(ctx)
		switch {
		case err != nil:
			cause = err
		case o.panicking():
			cause = errShardPanicked
		case cause == nil:
			cause = context.Canceled
		}
		stopShards(cause)
		g.runs.Wait()
		g.releaseLeftovers(context.WithoutCancel(ctx))
		o.mu.Lock()
		o.current = nil
		if err != nil {
			o.mgrErr = err
		}
		p, panicked := o.panicked, o.panicSet
		o.panicked, o.panicSet = nil, false
		o.mu.Unlock()
		if panicked {
			panic(p)
		}
	}()
	o.reached.Store(true)
	return g.loop()
}

func (o *ShardOwner) panicking() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.panicSet
}

func (g *manager) loop() error {
	o, s := g.o, g.o.settings
	var failing failureLog
	backoff := s.RetryInterval
	maxBackoff := max(s.RetryInterval, min(s.LeaseDuration, maxLeaseDuration))
	wait := time.Duration(0)
	for o.pause(g.ctx, wait) && !o.panicking() {
		wait = jitter(s.RetryInterval)
		view, err := o.judgeSessions(g.ctx, g.s, g.watch, &wait)
		if err == nil {
			err = g.balance(view, &wait)
		}
		switch {
		case err == nil:
			failing.recovered(o.logger, "leaderelection: storage reachable again", "container", s.Container, "prefix", o.prefix)
			backoff = s.RetryInterval
		case g.ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrPermanent):
			o.logger.Error("leaderelection: giving up: storage refused a request", "container", s.Container, "prefix", o.prefix, "error", err)
			return err
		default:
			failing.failed(o.logger, "leaderelection: cannot list the sessions or shards; retrying with backoff", "container", s.Container, "prefix", o.prefix, "error", err)
			wait = jitter(backoff)
			backoff = min(2*backoff, maxBackoff)
		}
	}
	return nil
}

// balance moves this session toward its share: it stops removed shards,
// hands over the excess, claims free shards while below its share, and
// releases leases left from failed requests.
func (g *manager) balance(view sessionView, wait *time.Duration) error {
	o := g.o
	o.mu.Lock()
	n := len(o.set)
	for name, r := range o.runs {
		if !o.set[name] && !r.leaving && !r.returned.Load() {
			r.leaving = true
			r.ts.pleaseStop(ErrShardRemoved)
		}
	}
	own := len(o.claiming)
	for _, r := range o.runs {
		if !r.leaving && !r.returned.Load() {
			own++
		}
	}
	target := fairShare(n, view.live, g.s.id)
	o.target, o.live = target, len(view.live)
	o.mu.Unlock()

	short, held := 0, own
	for _, id := range view.live {
		if id != g.s.id {
			short += max(0, fairShare(n, view.live, id)-view.owned[id])
			held += view.owned[id]
		}
	}
	if excess := own - target; excess > 0 && short > 0 {
		g.handOver(min(excess, short), view)
	}
	g.retryLeftovers()
	deficit := target - own
	// Claim only once the live sessions have stood one poll: instances
	// that start, or see a session die, at about the same moment then
	// agree on who is alive, and so on who claims what.
	// (A death needs no such wait: every instance that sees it sees one
	// session fewer, and claims from what it knew that session held.)
	rank, _ := slices.BinarySearch(view.live, g.s.id)
	if live := strings.Join(view.live, ","); live != g.liveSig {
		grew := false
		for _, id := range view.live {
			if !strings.Contains(g.liveSig, id) {
				grew = true
			}
		}
		g.liveSig = live
		if grew {
			g.liveSince = time.Now()
		}
	}
	if left := o.settings.RetryInterval - time.Since(g.liveSince); deficit > 0 && left > 0 {
		*wait = min(*wait, left)
		return nil
	}
	if len(view.died) > 0 {
		// Every survivor is below its share now. Those that still need to
		// list take turns, by rank, rather than all list at once.
		g.listNotBefore = time.Now().Add(time.Duration(rank) * g.listTurn())
	}
	if deficit > 0 && len(view.died) > 0 {
		g.takeFromDead(view, n)
	}
	sig := view.signature()
	if sig != g.viewSig {
		g.viewSig, g.viewSince, g.settled, g.settleAt = sig, time.Now(), false, time.Time{}
	}
	if held < n {
		if g.strayAt.IsZero() {
			g.strayAt = time.Now().Add(strayAfter + time.Duration(rand.Int64N(int64(strayAfter))))
		}
	} else {
		g.strayAt = time.Time{}
	}
	list := false
	switch {
	case deficit > 0:
		// Claims are conditional, so claiming from an old listing is safe;
		// list again only when it has nothing left, or its shards were
		// mostly taken meanwhile.
		list = len(g.cands) == 0 || g.stale
	case held < n:
		// Fewer shards are held than the set has, and it lasts: a session
		// below its share would have claimed them, so some may be held by
		// a lease that nobody's record counts (a claim whose record was
		// written with its answer lost, then given up, then its release
		// lost too): only the session its record names can tell. Look,
		// seldom, and not all at once.
		list = !time.Now().Before(g.strayAt)
		if list {
			g.strayAt = time.Time{}
		}
	case held == n && deficit == 0 && !g.settled && time.Since(g.viewSince) >= o.settings.RenewInterval+o.settings.RetryInterval:
		// Settled: every session's record says it holds its share. List
		// once, each instance in its turn by rank, to know who holds what
		// when one of them dies.
		if g.settleAt.IsZero() {
			g.settleAt = time.Now().Add(time.Duration(rank) * g.listTurn())
		}
		list = !time.Now().Before(g.settleAt)
	}
	if list && time.Since(g.lastList) >= g.listSpacing() && !time.Now().Before(g.listNotBefore) {
		if err := g.listShards(view); err != nil {
			return err
		}
		g.settled = deficit == 0
	}
	if deficit <= 0 {
		clear(g.cands)
		return nil
	}
	if g.stale {
		return nil // its shards were mostly taken: wait for the next listing rather than fail on the rest
	}
	claimed, tried := g.claim(min(deficit, claimBatch), deficit, view)
	switch {
	case claimed < deficit && (claimed > 0 || tried > 0 && g.deadLeft()):
		*wait = 0 // more to claim: list the sessions again and go on
	case tried == 0 && g.stale && time.Since(g.lastList) >= g.listSpacing():
		*wait = 0 // list now (see claim)
	}
	return nil
}

// strayAfter is how long fewer shards than the set must stay held before
// the sessions at their share look for a lease nobody counts: 5 to 10
// minutes, drawn by each.
const strayAfter = 5 * time.Minute

// listSpacing is the least time between two listings of the shards: one
// RetryInterval, or four times what the last one took, if more. A listing
// costs the storage account in proportion to the shards (Azurite: about a
// second for 10,000), and every instance below its share lists.
func (g *manager) listSpacing() time.Duration {
	return max(g.o.settings.RetryInterval, 4*g.listTook)
}

// listTurn is how long each instance's turn to list the shards lasts when
// they take turns: what its last listing took, twice, or half a
// RetryInterval if more.
func (g *manager) listTurn() time.Duration {
	return max(2*g.listTook, g.o.settings.RetryInterval/2)
}

// takeFromDead adds to the candidates the shards that, by the last listing,
// sessions that just died held: free to take, each on condition that its
// ETag is still the one listed, with no listing of every shard. A shard a
// dead session claimed after that listing is found by the next listing,
// which this instance makes at once if its last one is older than the last
// change in who holds what, or once its part of those shards is claimed
// and it is still short.
func (g *manager) takeFromDead(view sessionView, n int) {
	if g.ownersAt.IsZero() || g.ownersAt.Before(g.viewSince) {
		// Who holds what changed since this instance's last listing (it
		// had not had its turn yet): list now, out of turn.
		g.stale, g.listNotBefore = true, time.Time{}
		return
	}
	dead := map[string]bool{}
	for _, id := range view.died {
		dead[id] = true
	}
	// Each survivor's room is its share less what it held by the listing,
	// not by its record: records are rewritten while the survivors claim,
	// and read by each at its own moment, whereas every survivor's last
	// listing (one each, after ownership settled) showed the same holders.
	// So every survivor assigns the dead sessions' shards alike, and the
	// parts are disjoint and cover them all.
	held := map[string]int{}
	for _, h := range g.owners {
		held[h.session]++
	}
	g.deathFor = strings.Join(view.live, ",")
	g.deathRoom = make(map[string]int, len(view.live))
	for _, id := range view.live {
		g.deathRoom[id] = max(0, fairShare(n, view.live, id)-held[id])
	}
	now := time.Now()
	for name, h := range g.owners {
		if dead[h.session] {
			g.cands[name] = candidate{name: name, exists: true, etag: h.etag, leased: true, prev: h.term, dead: true}
			if _, ok := g.freeSince[name]; !ok {
				g.freeSince[name] = now
			}
			delete(g.owners, name)
		}
	}
	// As fresh as a listing can make them, without one: claim them first.
	g.stale, g.listedAt, g.part, g.fromDeath = false, now, nil, true
}

// deadLeft reports whether a shard of a dead session is left to try.
func (g *manager) deadLeft() bool {
	for _, c := range g.cands {
		if c.dead {
			return true
		}
	}
	return false
}

// handOver asks k running shards to stop, to be released for a session
// below its share: those another live session prefers first, the sessions
// below their share before the others, then this session's least preferred.
func (g *manager) handOver(k int, view sessionView) {
	o := g.o
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.set)
	type pick struct {
		r    *shardRun
		rank int
		s    uint64
	}
	var picks []pick
	for _, r := range o.runs {
		if r.leaving || r.returned.Load() {
			continue
		}
		p := pick{r: r, s: rendezvous(g.s.id, r.name)}
		switch pref := preferred(view.live, r.name); {
		case pref == g.s.id:
			p.rank = 2
		case view.owned[pref] < fairShare(n, view.live, pref):
			p.rank = 0
		default:
			p.rank = 1
		}
		picks = append(picks, p)
	}
	sort.Slice(picks, func(i, j int) bool {
		if picks[i].rank != picks[j].rank {
			return picks[i].rank < picks[j].rank
		}
		return picks[i].s < picks[j].s
	})
	for _, p := range picks[:min(k, len(picks))] {
		p.r.leaving = true
		p.r.ts.pleaseStop(ErrShardHandedOver)
	}
	o.counts.handovers.Add(context.Background(), int64(min(k, len(picks))), metric.WithAttributeSet(o.shardMetrics.attrs))
	o.logger.Info("leaderelection: handing shards over to balance the load", "container", o.settings.Container, "prefix", o.prefix,
		"count", min(k, len(picks)), "liveSessions", len(view.live))
}

// listShards lists the shards and keeps, as candidates to claim, every shard
// of the set that is free: no blob yet, no lease, or a lease whose session
// is dead. It also stops the funcs of shards this session holds that the
// listing shows held by another (which should never happen), and times the
// leases that name no live holder.
func (g *manager) listShards(view sessionView) error {
	o := g.o
	start := time.Now()
	o.mu.Lock()
	set := make(map[string]bool, len(o.set))
	for n := range o.set {
		set[n] = true
	}
	o.mu.Unlock()
	var entries []listed
	if err := o.list(g.ctx, shardsDir, func(l listed) {
		if set[l.name] {
			entries = append(entries, l)
		} else if o.isRunning(l.name) {
			entries = append(entries, l)
		}
	}); err != nil {
		return err
	}
	g.lastList = time.Now()
	g.listTook = g.lastList.Sub(start)
	owners := make(map[string]holder, len(entries))
	live := map[string]bool{}
	for _, id := range view.live {
		live[id] = true
	}
	seen := map[string]bool{}
	unknown := map[string][]listed{}
	var cands []candidate
	anomalies := map[string]unleasedSince{}
	for _, l := range entries {
		seen[l.name] = true
		g.checkHeld(l, start)
		if !set[l.name] {
			continue
		}
		if l.info.Held() && l.session != "" {
			owners[l.name] = holder{session: l.session, etag: l.info.ETag, term: l.info.Leader.Number}
		}
		c := candidate{name: l.name, exists: true, etag: l.info.ETag, prev: l.info.Leader.Number}
		switch {
		case !l.info.Held():
			cands = append(cands, c)
		case l.info.State != lease.StateTypeLeased:
			// Breaking: an operator's break, which ends by itself.
		case l.session == "" || l.session == g.s.id:
			// Leased with no record, or with this session's record but
			// not held by this session: a claim that failed, or one in
			// flight. Its holder has not started a func for it (that
			// needs its own record), so a break is safe; wait until its
			// ETag has stood a lease duration, not to fight a live claim.
			if l.session == g.s.id && o.holds(l.name) {
				continue
			}
			a, ok := g.anomalies[l.name]
			if !ok || a.etag != l.info.ETag {
				a = unleasedSince{etag: l.info.ETag, since: l.info.Received}
			}
			anomalies[l.name] = a
			if time.Since(a.since) >= o.settings.LeaseDuration {
				c.leased = true
				cands = append(cands, c)
			}
		case live[l.session]:
			// Held by a live session.
		default:
			if _, dead := g.watch.dead[l.session]; dead {
				c.leased, c.dead = true, true
				cands = append(cands, c)
				continue
			}
			unknown[l.session] = append(unknown[l.session], l)
		}
	}
	g.anomalies = anomalies
	// A session the listing of the sessions did not show: one started since
	// (its shards are held) or one whose blob is gone (dead). Look it up.
	lookups := 0
	for id, ls := range unknown {
		if lookups == lookupsPerList {
			break
		}
		lookups++
		dead, err := o.sessionState(g.ctx, g.watch, id)
		if err != nil {
			if errors.Is(err, ErrPermanent) {
				return err
			}
			continue
		}
		if dead {
			for _, l := range ls {
				cands = append(cands, candidate{name: l.name, exists: true, etag: l.info.ETag, leased: true, prev: l.info.Leader.Number, dead: true})
			}
		}
	}
	for name := range set {
		if !seen[name] {
			cands = append(cands, candidate{name: name})
		}
	}
	// Runs the listing did not show at all: their blob is gone.
	o.mu.Lock()
	var gone []*shardRun
	for name, r := range o.runs {
		if !seen[name] && set[name] && r.claimed.Before(start) {
			gone = append(gone, r)
		}
	}
	o.mu.Unlock()
	for _, r := range gone {
		g.lost(r, "its blob is gone")
	}
	g.cands = make(map[string]candidate, len(cands))
	freeSince := make(map[string]time.Time, len(cands))
	for _, c := range cands {
		g.cands[c.name] = c
		if at, ok := g.freeSince[c.name]; ok {
			freeSince[c.name] = at
		} else {
			freeSince[c.name] = start
		}
	}
	g.freeSince, g.stale, g.owners, g.ownersAt, g.listedAt, g.part = freeSince, false, owners, start, start, nil
	g.deathRoom, g.fromDeath = nil, false
	o.logger.Debug("leaderelection: listed the shards", "prefix", o.prefix, "took", g.listTook.Round(time.Millisecond),
		"shards", len(entries), "free", len(cands), "liveSessions", len(view.live))
	return nil
}

// checkHeld stops the func of a shard this session holds if a listing that
// started after the claim shows the shard unleased or written by another:
// only the lease's holder can write the blob.
func (g *manager) checkHeld(l listed, start time.Time) {
	o := g.o
	o.mu.Lock()
	r := o.runs[l.name]
	o.mu.Unlock()
	if r == nil || r.returned.Load() || !r.claimed.Before(start) {
		return
	}
	switch {
	case !l.info.Held():
		g.lost(r, "its lease was broken or released")
	case l.info.ETag != r.etag:
		g.lost(r, "another instance wrote its record")
	}
}

func (g *manager) lost(r *shardRun, why string) {
	if r.returned.Load() {
		return
	}
	o := g.o
	err := &StorageError{Op: "list shards", Container: o.settings.Container, Blob: o.shardBlob(r.name),
		detail: "the shard is no longer ours: " + why, kind: ErrLeaseLost}
	o.logger.Error("leaderelection: a shard this instance runs is no longer its own; its func is told to stop now (was its lease broken by hand?)",
		"container", o.settings.Container, "shard", r.name, "term", r.term.Number, "why", why)
	r.ts.stopNow(&leaseLostError{err: err})
}

// isRunning reports whether this instance runs name's func.
func (o *ShardOwner) isRunning(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.runs[name] != nil
}

// holds reports whether this instance holds name's lease, or may: running,
// claiming, or with a release left to retry.
func (o *ShardOwner) holds(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, left := o.leftover[name]
	return o.runs[name] != nil || o.claiming[name] || left
}

// claim claims up to k candidates, claimParallel at a time, toward a
// deficit of shards, and returns how many it won and how many it tried.
func (g *manager) claim(k, deficit int, view sessionView) (int, int) {
	o := g.o
	now := time.Now()
	o.mu.Lock()
	n := len(o.set)
	free := make([]string, 0, len(g.cands))
	for name := range g.cands {
		_, left := o.leftover[name]
		if !o.set[name] || o.runs[name] != nil || o.claiming[name] || left || now.Before(o.cooldown[name]) {
			continue
		}
		free = append(free, name)
	}
	o.mu.Unlock()
	// This session's part of the free shards, by the rule every instance
	// applies to the same listing and the same records, computed once per
	// listing and set of live sessions (records change as shards are
	// claimed, and instances read them at different moments); then the
	// shards left free for long, whoever they were assigned to.
	if live := strings.Join(view.live, ","); g.part == nil || live != g.partFor {
		room := make(map[string]int, len(view.live))
		for _, id := range view.live {
			room[id] = max(0, fairShare(n, view.live, id)-view.owned[id])
			if r, ok := g.deathRoom[id]; ok && live == g.deathFor {
				room[id] = r
			}
		}
		room[g.s.id] = max(room[g.s.id], deficit)
		g.part, g.partFor = assign(free, view.live, room, g.s.id), live
	}
	isFree := make(map[string]bool, len(free))
	for _, name := range free {
		isFree[name] = true
	}
	var order []string
	mine := make(map[string]bool, len(g.part))
	for _, name := range g.part {
		mine[name] = true
		if isFree[name] {
			order = append(order, name)
		}
	}
	if len(order) == 0 {
		g.part = nil // spent: assign again at the next claim, from the records then
		if g.fromDeath {
			// This session's part of a dead session's shards is claimed,
			// and it is still short: another survivor's last listing
			// differed from its own. The rest are mostly taken by now: a
			// listing, out of turn, finds those left at less cost than a
			// try of each.
			g.stale, g.listNotBefore = true, time.Time{}
			return 0, 0
		}
	}
	// A shard another session was assigned but has not claimed while its
	// record had time to be rewritten and read again (its room was
	// overstated, or it is stuck) is anyone's.
	long := o.settings.RenewInterval + 2*o.settings.RetryInterval
	// So is, once this session's part is claimed, a shard a dead session
	// held by a listing: the survivors' records, and so their parts, may
	// differ, but not what must be claimed.
	var others []string
	for _, name := range free {
		if !mine[name] && (now.Sub(g.freeSince[name]) >= long || len(order) == 0 && g.cands[name].dead) {
			others = append(others, name)
		}
	}
	slices.SortFunc(others, func(a, b string) int {
		sa, sb := rendezvous(g.s.id, a), rendezvous(g.s.id, b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	order = append(order, others...)

	var picked []candidate
	o.mu.Lock()
	for _, name := range order {
		if len(picked) == k {
			break
		}
		if o.claiming[name] {
			continue
		}
		delete(o.cooldown, name)
		o.claiming[name] = true
		picked = append(picked, g.cands[name])
		delete(g.cands, name)
	}
	o.mu.Unlock()
	if len(picked) > 0 && len(g.part) > 0 {
		taken := make(map[string]bool, len(picked))
		for _, c := range picked {
			taken[c.name] = true
		}
		g.part = slices.DeleteFunc(g.part, func(name string) bool { return taken[name] })
	}
	var won, listedWon atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, claimParallel)
	listed := 0
	for _, c := range picked {
		if !c.dead {
			listed++
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if g.claimOne(c) {
				won.Add(1)
				if !c.dead {
					listedWon.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// Half of the candidates from a listing or more were taken meanwhile:
	// list again rather than try the rest one by one. A dead session's
	// shards are not counted: there are only as many as it held, and every
	// survivor must find those nobody took without waiting for its turn to
	// list (each try costs one conditional request, and is made once).
	g.stale = 2*int(listedWon.Load()) < listed
	o.logger.Debug("leaderelection: claimed shards", "prefix", o.prefix, "won", won.Load(), "tried", len(picked),
		"deficit", deficit, "part", len(mine), "freeForLong", len(others), "free", len(free))
	return int(won.Load()), len(picked)
}

// claimOne takes one shard: breaks its lease if its session is dead, on
// condition that the blob's ETag is still the listing's (a claim made since
// has changed it by writing its record, and stays), acquires it on the same
// condition with a lease ID of this claim's own, and writes the shard's
// record on that condition too: this session, the term one greater than the
// listing's. Only then does the func start. It reports whether it did.
func (g *manager) claimOne(c candidate) bool {
	o := g.o
	id := uuid.NewString()
	lm := o.managerFor(o.shardBlob(c.name), id)
	done := func(outcome string, release bool) bool {
		if release {
			if err := lm.Release(context.WithoutCancel(g.ctx)); err != nil {
				o.addLeftover(c.name, id)
			}
		}
		o.mu.Lock()
		delete(o.claiming, c.name)
		o.mu.Unlock()
		o.counts.claim(outcome)
		return false
	}
	ctx := g.ctx
	etag := c.etag
	if !c.exists {
		var err error
		if etag, err = o.createShard(ctx, lm); err != nil {
			return done(outcome(err, "claimed"), false)
		}
	}
	if c.leased {
		switch res, _ := lm.breakIfUnchanged(ctx, etag); res {
		case breakDone:
			o.logger.Debug("leaderelection: broke the lease of a shard whose session is dead", "shard", c.name)
		case noLease:
		case etagChanged:
			return done("held", false)
		default:
			return done("transient", false)
		}
	}
	if err := o.acquireIfMatch(ctx, lm, etag); err != nil {
		// An acquire whose answer was lost may hold the lease: give it back.
		return done(outcome(err, "claimed"), errors.Is(err, ErrTransient))
	}
	t := Term{Number: c.prev + 1, Identity: o.opts.identity, LeaseID: id, Since: time.Now().UTC()}
	newETag, err := o.writeShardRecord(ctx, lm, t, g.s.id, etag)
	if err != nil {
		return done(outcome(err, "claimed"), true)
	}
	if c.leased {
		o.counts.claim("taken")
	} else {
		o.counts.claim("claimed")
	}
	g.noteOwner(c.name, holder{session: g.s.id, etag: newETag, term: t.Number})
	return g.start(c.name, lm, t, newETag)
}

// noteOwner records a claim of this session in owners (claims run in
// parallel).
func (g *manager) noteOwner(name string, h holder) {
	g.ownersMu.Lock()
	defer g.ownersMu.Unlock()
	g.owners[name] = h
}

// createShard creates a shard's blob, empty, if nobody has: a conditional
// upload (If-None-Match: *). It returns the new blob's ETag; an error
// matching ErrLeaseHeld if the blob exists already (another claim made it).
func (o *ShardOwner) createShard(ctx context.Context, lm *BlobLeaseManager) (azcore.ETag, error) {
	ctx, cancel := lm.call(ctx)
	defer cancel()
	anyETag := azcore.ETagAny
	resp, err := lm.blobClient.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyETag}},
	})
	if err != nil {
		return "", lm.classify("create shard", err, []string{string(bloberror.BlobAlreadyExists), string(bloberror.ConditionNotMet), string(bloberror.LeaseIDMissing)}, nil)
	}
	if resp.ETag == nil {
		return "", &StorageError{Op: "create shard", Container: lm.container, Blob: lm.blob, detail: "the answer carried no ETag", kind: ErrTransient}
	}
	return *resp.ETag, nil
}

// acquireIfMatch takes the shard's infinite lease with lm's ID, if the blob's
// ETag is still etag. ErrLeaseHeld: another holds it, or the blob changed.
func (o *ShardOwner) acquireIfMatch(ctx context.Context, lm *BlobLeaseManager, etag azcore.ETag) error {
	ctx, cancel := lm.call(ctx)
	defer cancel()
	h := lm.id.Load()
	resp, err := h.client.AcquireLease(ctx, -1, &lease.BlobAcquireOptions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
	})
	if err != nil {
		return lm.classify("acquire shard lease", err,
			append([]string{string(bloberror.ConditionNotMet), string(bloberror.BlobNotFound)}, heldCodes...), nil)
	}
	if resp.LeaseID == nil || *resp.LeaseID != h.id {
		return &StorageError{Op: "acquire shard lease", Container: lm.container, Blob: lm.blob,
			detail: "the server answered with another lease ID", kind: ErrLeaseHeld}
	}
	return nil
}

// writeShardRecord writes the shard's record under its lease, if the blob's
// ETag is still etag, and returns the ETag it made.
func (o *ShardOwner) writeShardRecord(ctx context.Context, lm *BlobLeaseManager, t Term, sessionID string, etag azcore.ETag) (azcore.ETag, error) {
	ctx, cancel := lm.call(ctx)
	defer cancel()
	md := recordMetadata(t, o.settings.LeaseDuration)
	md[metaSession] = &sessionID
	id := lm.LeaseID()
	resp, err := lm.blobClient.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
		LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &id},
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
	}})
	if err != nil {
		return "", lm.classify("write shard record", err, []string{string(bloberror.ConditionNotMet)}, lostCodes)
	}
	if resp.ETag == nil {
		return "", &StorageError{Op: "write shard record", Container: lm.container, Blob: lm.blob, detail: "the answer carried no ETag", kind: ErrTransient}
	}
	return *resp.ETag, nil
}

func (o *ShardOwner) addLeftover(name, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.leftover[name] = id
}

// retryLeftovers releases the leases that a failed request may have left
// with this instance, a few per cycle. A lease that is not ours (any more)
// counts as released.
func (g *manager) retryLeftovers() {
	o := g.o
	o.mu.Lock()
	left := make(map[string]string, len(o.leftover))
	for n, id := range o.leftover {
		if len(left) == releaseAtOnce {
			break
		}
		left[n] = id
	}
	o.mu.Unlock()
	for name, id := range left {
		if err := o.managerFor(o.shardBlob(name), id).Release(g.ctx); err != nil {
			continue
		}
		o.mu.Lock()
		if o.leftover[name] == id {
			delete(o.leftover, name)
		}
		o.mu.Unlock()
	}
}

// releaseLeftovers tries once more every leftover lease as the session ends.
func (g *manager) releaseLeftovers(ctx context.Context) {
	o := g.o
	o.mu.Lock()
	left := o.leftover
	o.leftover = map[string]string{}
	o.mu.Unlock()
	for name, id := range left {
		_ = o.managerFor(o.shardBlob(name), id).Release(ctx)
	}
}

// start runs the func of a shard just claimed, under two contexts as the
// mutex's leader func (see the top of renew.go): its own, cancelled to ask
// it to stop (the caller cancelled, a handover, a removal) or to stop now;
// and its lease context, derived from the session's, cancelled only when
// the shard may pass to another instance. It reports false, and releases
// the shard, if the session is ending or the shard left the set meanwhile.
func (g *manager) start(name string, lm *BlobLeaseManager, t Term, etag azcore.ETag) bool {
	o := g.o
	state := &termState{}
	leaderCtx, cancel := context.WithCancelCause(g.shardsCtx)
	leaseCtx, cancelLease := context.WithCancelCause(context.WithValue(g.stopNow, termKey{}, state))
	state.lease = leaseCtx
	r := &shardRun{name: name, term: t, etag: etag, claimed: time.Now(), state: state,
		ts: termStop{pleaseStop: cancel, stopNow: func(cause error) {
			cancelLease(cause)
			cancel(cause)
		}}}
	r.m = &BlobDistributedMutex{lease: lm, logger: o.logger.With("shard", name), opts: o.opts, metrics: o.shardMetrics}
	o.mu.Lock()
	delete(o.claiming, name)
	if !o.set[name] || g.shardsCtx.Err() != nil {
		o.mu.Unlock()
		r.ts.stopNow(errTermEnded)
		if err := lm.Release(context.WithoutCancel(g.ctx)); err != nil {
			o.addLeftover(name, lm.LeaseID())
		}
		return false
	}
	o.runs[name] = r
	o.mu.Unlock()
	g.runs.Add(1)
	go func() {
		defer g.runs.Done()
		g.run(r, leaderCtx, leaseCtx)
	}()
	return true
}

// run runs a shard's func, then releases the shard, however the func ends:
// normally, or by a panic, which is handed to Run once the lease is
// released.
func (g *manager) run(r *shardRun, leaderCtx, leaseCtx context.Context) {
	o, s := g.o, g.o.settings
	m := r.m
	defer func() {
		if p := recover(); p != nil {
			o.mu.Lock()
			if !o.panicSet {
				o.panicked, o.panicSet = p, true
			}
			o.mu.Unlock()
			o.poke()
		}
	}()
	funcDone := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Add(1)
	go func() {
		defer watcher.Done()
		m.watchFunc(leaderCtx, leaseCtx, funcDone)
	}()
	var (
		returned bool
		funcErr  error
	)
	defer func() {
		funcEnd := time.Now()
		r.returned.Store(true)
		m.leading.Store(false)
		expires := g.deadline().Add(s.StopMargin)
		cause := context.Cause(leaseCtx)
		ours := cause == nil // the shard's lease is still ours to give back
		if cause == nil {
			cause = context.Cause(leaderCtx)
		}
		close(funcDone)
		r.ts.stopNow(errTermEnded)
		watcher.Wait()
		if ours {
			// Once the session must stop now, its shards are not released
			// one by one: the session's lease is (lead() does it, if it is
			// still ours), which sets them all free at once, and spares
			// storage a request per shard when it may be what failed. So
			// releases still waiting then are dropped.
			o.releaseShard(g.stopNow, r)
		}
		m.health.endTerm()
		o.mu.Lock()
		delete(o.runs, r.name)
		if cause == nil {
			// It returned by itself: let another instance take it first.
			o.cooldown[r.name] = time.Now().Add(behind(s.RetryInterval))
		}
		o.mu.Unlock()
		o.poke()
		reason, why := shardStopReason(returned, cause, funcErr)
		o.shardMetrics.stopMargin(expires.Sub(funcEnd))
		o.shardMetrics.transition("stopped", reason)
		o.logger.Info("leaderelection: stopped running shard", "container", s.Container, "shard", r.name, "term", r.term.Number,
			"reason", reason, "ran", funcEnd.Sub(r.state.beatBase).Round(time.Millisecond))
		o.emit(Event{Kind: StoppedLeading, Term: r.term, Reason: reason, Err: why, FuncReturned: funcEnd, LeaseExpiry: expires,
			Shard: r.name, Session: g.s.id})
		if !returned {
			stopAll(o)
		}
	}()
	m.health.beginTerm()
	m.health.funcStarted()
	r.state.start(r.term)
	m.leading.Store(true)
	o.shardMetrics.transition("started", "")
	o.logger.Info("leaderelection: running shard", "container", s.Container, "shard", r.name, "term", r.term.Number, "session", g.s.id)
	o.emit(Event{Kind: StartedLeading, Term: r.term, At: r.term.Since, Shard: r.name, Session: g.s.id})
	funcErr = o.fn(context.WithValue(leaderCtx, termKey{}, r.state), r.name)
	returned = true
	switch {
	case funcErr != nil && leaderCtx.Err() == nil:
		o.logger.Warn("leaderelection: shard func returned an error; releasing the shard", "container", s.Container, "shard", r.name, "error", funcErr)
	case funcErr != nil:
		o.logger.Debug("leaderelection: shard func returned after its context was cancelled", "shard", r.name, "error", funcErr)
	}
}

// stopAll asks every shard func to stop, as one has panicked: the panic
// propagates from Run once they all have returned.
func stopAll(o *ShardOwner) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.runs {
		r.ts.pleaseStop(errShardPanicked)
	}
}

// releaseShard gives a shard's lease back once its func has returned, a few
// at a time; a failed release is retried by the session's loop. A lease
// that is no longer ours counts as released.
func (o *ShardOwner) releaseShard(ctx context.Context, r *shardRun) {
	select {
	case o.release <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-o.release }()
	lm := r.m.lease
	id := lm.LeaseID()
	if err := lm.Release(ctx); err != nil && ctx.Err() == nil {
		o.logger.Debug("leaderelection: could not release a shard; retrying", "shard", r.name, "error", err)
		o.addLeftover(r.name, id)
	}
}

// shardStopReason names why a shard's run ended.
func shardStopReason(returned bool, cause, funcErr error) (StopReason, error) {
	switch {
	case returned && errors.Is(cause, ErrShardHandedOver):
		return ReasonHandedOver, cause
	case returned && errors.Is(cause, ErrShardRemoved):
		return ReasonShardRemoved, cause
	}
	return stopReason(returned, cause, funcErr)
}

// Healthy reports nil while this instance's session and shard funcs are
// healthy, and an error saying why otherwise: a shard func still running
// StopMargin after its lease context was cancelled (the shard may have
// passed to another instance), or the session's renewals failing for
// longer than (LeaseDuration - StopMargin)/2. It makes no network call.
func (o *ShardOwner) Healthy() error {
	o.mu.Lock()
	sess := o.current
	runs := make([]*shardRun, 0, len(o.runs))
	for _, r := range o.runs {
		runs = append(runs, r)
	}
	o.mu.Unlock()
	for _, r := range runs {
		if err := r.m.Healthy(); err != nil {
			return fmt.Errorf("leaderelection: shard %q: %w", r.name, err)
		}
	}
	if sess != nil {
		if err := sess.m.Healthy(); err != nil {
			return fmt.Errorf("leaderelection: session %s: %w", sess.id, err)
		}
	}
	return nil
}

// HealthHandler serves [ShardOwner.Healthy] over HTTP, for a Kubernetes
// liveness probe: 200 "ok", or 503 with the reason.
func (o *ShardOwner) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := o.Healthy(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// ShardsInfo is what one listing under a ShardOwner's prefix shows.
type ShardsInfo struct {
	Sessions []SessionInfo // sorted by ID
	Shards   []ShardInfo   // every shard blob, sorted by name (also shards no longer in anyone's set)
}

// SessionInfo describes a session as the listing shows it.
type SessionInfo struct {
	ID string
	// Live: its lease is held and it has written its record, so it counts
	// for the fair shares (a silent one counts until it is broken).
	Live             bool
	Identity         string
	Since            time.Time
	Owned            int           // how many shards it held at its last write, by its own count
	DeclaredDuration time.Duration // the lease duration it declared
	ETag             azcore.ETag
	LastModified     time.Time
}

// ShardInfo describes a shard as the listing shows it.
type ShardInfo struct {
	Name string
	// Held: its lease is held. Held by Session if that session is live;
	// a shard held by a dead session is free to take.
	Held    bool
	Session string
	Term    Term // its last record (its LeaseID is not readable and stays empty)
}

// Inspect lists the sessions and the shards: who is alive, and who holds
// what. Read access is enough; it holds nothing. Two or more requests (the
// sessions, then the shards 1,000 a page), not one snapshot: a shard may
// name a session that started after the sessions were listed.
func (o *ShardOwner) Inspect(ctx context.Context) (ShardsInfo, error) {
	var info ShardsInfo
	err := o.list(ctx, sessionsDir, func(l listed) {
		info.Sessions = append(info.Sessions, SessionInfo{
			ID: l.name, Live: l.info.State == lease.StateTypeLeased && l.record, Identity: l.info.Leader.Identity,
			Since: l.info.Leader.Since, Owned: max(l.owned, 0), DeclaredDuration: l.info.DeclaredDuration,
			ETag: l.info.ETag, LastModified: l.info.LastModified,
		})
	})
	if err != nil {
		return ShardsInfo{}, err
	}
	err = o.list(ctx, shardsDir, func(l listed) {
		info.Shards = append(info.Shards, ShardInfo{Name: l.name, Held: l.info.Held(), Session: l.session, Term: l.info.Leader})
	})
	if err != nil {
		return ShardsInfo{}, err
	}
	return info, nil
}

// shardCounters are the metrics of ownership as a whole (see
// [WithMeterProvider]), with the attributes leaderelection.container and
// leaderelection.blob (the shards' prefix):
//
//	leaderelection.shards.owned      gauge    shards whose func runs on this instance
//	leaderelection.shards.target     gauge    this instance's fair share
//	leaderelection.sessions.live     gauge    live sessions, this one's included
//	leaderelection.shards.claims     counter  claims by outcome (claimed|taken: from a dead session|held: lost the race|transient|permanent)
//	leaderelection.shards.handovers  counter  shards handed over to balance the load
//
// The shards' terms are counted and timed by leaderelection.transitions and
// leaderelection.term.stop_margin, without the shard's name: with thousands
// of shards, a name per series would swamp a metrics backend. Events carry
// the name.
type shardCounters struct {
	m         *metrics
	owned     metric.Int64ObservableGauge
	target    metric.Int64ObservableGauge
	live      metric.Int64ObservableGauge
	claims    metric.Int64Counter
	handovers metric.Int64Counter
}

func newShardCounters(m *metrics) shardCounters {
	c := shardCounters{m: m}
	c.owned, _ = m.meter.Int64ObservableGauge("leaderelection.shards.owned", metric.WithDescription("Shards whose func runs on this instance."))
	c.target, _ = m.meter.Int64ObservableGauge("leaderelection.shards.target", metric.WithDescription("This instance's fair share of the shards."))
	c.live, _ = m.meter.Int64ObservableGauge("leaderelection.sessions.live", metric.WithDescription("Live sessions, this instance's included."))
	c.claims, _ = m.meter.Int64Counter("leaderelection.shards.claims", metric.WithDescription("Shard claims, by outcome."))
	c.handovers, _ = m.meter.Int64Counter("leaderelection.shards.handovers", metric.WithDescription("Shards handed over to balance the load."))
	return c
}

// observe registers the gauges for one Run; the returned func unregisters
// them.
func (c shardCounters) observe(o *ShardOwner) func() {
	reg, err := c.m.meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		owned := int64(o.ownedCount())
		o.mu.Lock()
		target, live := int64(o.target), int64(o.live)
		o.mu.Unlock()
		ob.ObserveInt64(c.owned, owned, metric.WithAttributeSet(c.m.attrs))
		ob.ObserveInt64(c.target, target, metric.WithAttributeSet(c.m.attrs))
		ob.ObserveInt64(c.live, live, metric.WithAttributeSet(c.m.attrs))
		return nil
	}, c.owned, c.target, c.live)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

func (c shardCounters) claim(outcome string) {
	c.claims.Add(context.Background(), 1, c.m.with(attribute.String("outcome", outcome)))
}
