package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/shardplan"
	"github.com/blobelect/leaderelection/internal/wire"
	"go.opentelemetry.io/otel/metric"
)

// The shard tier's shared state: the ShardOwner and the state it holds by
// concern, each saying which lock guards it (what its goroutines share is
// ownerState, under one lock: ownerstate.go, and its concerns' types with
// their methods, membership.go, ownership.go and termmemory.go); a shard's
// run; what a session and its instance remember of the terms; the limits
// and errors every part uses.
// Everything above it in the shard tier (see CONTRIBUTING.md) uses it, and it
// uses nothing of theirs.

// ShardOwner runs a func for each shard of a set (one per tenant, partition,
// queue...) on exactly one live instance at a time, and spreads the shards
// evenly over the instances: a fair share each, within one (for instances
// that disagree on the set, see [ShardOwner.SetShards]). Build it with
// [NewShardOwner] and call Run on every instance.
//
// Each instance runs a session: a blob and an [ETagLease] of its own,
// renewed by one metadata write per RenewInterval. Each shard is a blob
// whose infinite lease its owner takes, with a record naming its session; it
// needs no renewal of its own, as the session's safety deadline is every
// shard's. Each session also keeps the list of the shards it holds,
// rewritten at most once per RetryInterval while they change, so that when
// it dies the others take its shards from that list. An instance lists the
// sessions once per RetryInterval (one request) and lists the shards (1,000
// a page) only while ownership moves: while it holds fewer than its share,
// and, once a change settles, only if the sessions' records do not count
// every shard (the instances take turns). In steady state an instance
// therefore makes one write per RenewInterval and one list per
// RetryInterval, whatever the number of shards.
//
// Blobs live under BlobSettings.Blob + "/": sessions/<session ID>,
// shards/<shard name>, held/<session ID> and handoff/<session ID>/ (notes of
// shards handed over). The prefix is reserved for the owner; a shard's blob
// outlives the shard's removal, and keeps its term number.
type ShardOwner struct {
	settings BlobSettings // defaults applied; Blob is the prefix without its slash
	prefix   string       // Blob + "/"
	fn       func(ctx context.Context, shard string) error
	opts     options
	logger   *slog.Logger
	running  atomic.Bool // Run is running

	storage     storage     // how it reaches the account (shardstore.go)
	fleetMemory fleetMemory // the highest terms it and the fleet saw, and the longest lease declared: atomics (shardfloors.go)

	// The lease ID file (WithLeaseIDFile, sessionfile.go), while Run holds
	// it, and the session ID it holds; touched only by Run's goroutine.
	idFile *os.File
	fileID string

	sessionMetrics *metrics // the sessions' renewals and breaks
	shardMetrics   *metrics // the shards' terms
	counts         shardCounters

	eventMu sync.Mutex    // events are reported one at a time
	wake    chan struct{} // poked when a shard func returns, or panics
	woke    time.Time     // when the session's loop last ended a pause (see pause); touched only by it
	release chan struct{} // bounds the releases in flight

	state ownerState // what its goroutines share, under one lock (ownerstate.go)
}

// ownerless is the shards that no live session holds, as this instance last
// saw them: by its last listing of the shards, the shards of its set with no
// blob, no lease, a lease whose session is dead, a lease with no live
// holder's record (a claim that failed half-way), or a record no term can
// follow (see shardProblem); and, since that listing, less the shards it
// claimed or lost the race for, plus the shards that sessions it saw die
// held. Claims by other instances since are not seen until the next listing,
// or until the sessions' records, standing still once ownership has settled,
// count every shard of the set: then none is ownerless (sawAllHeld). Hence
// listed: the count is as old as that. A shard stuck in it for longer than a
// few RetryIntervals is a shard nobody runs.
type ownerless struct {
	mu     sync.Mutex
	names  map[string]bool
	listed time.Time // when the last listing started, or the records last counted every shard; zero before either
}

// count is how many of the ownerless shards are in set, and when the
// listing they come from started; under ownerState.mu (set is its
// membership's).
func (s *ownerless) count(set map[string]bool) (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for name := range s.names {
		if set[name] {
			n++
		}
	}
	return n, s.listed
}

// handoffPoll is how often a session that expects shards reads its notes
// (a test may make it longer: see seams).
func (o *ShardOwner) handoffPoll() time.Duration {
	if p := o.opts.seams.handoffPoll; p > 0 {
		return p
	}
	return handoffPoll
}

// storage is how a ShardOwner reaches the account: its clients, and whether
// the account has answered. The clients are set as it is built; reached is
// atomic.
type storage struct {
	client  *blobstore.Client // the storage package's client: claims, releases, handovers, listings, other sessions
	reached atomic.Bool       // the account has answered

	// The session's lease is kept on connections of its own when the
	// library builds the transport: a renewal never waits behind claims,
	// releases and listings for a connection, nor for a new one to be
	// opened on a busy account (on Azurite, a new connection's first
	// answer waited up to 4 s while ten instances claimed 10,000 shards,
	// and every session's first renewal failed). On the caller's
	// transport or Client, sessionClient is a client on that.
	sessionClient *blobstore.Client
}

// shardRun is one run of a shard's func on this instance.
type shardRun struct {
	name        string
	runner      *termRunner // the shard's lease (this claim's ID), its health and logger
	term        Term
	sessionTerm int64       // the session term its lease ID derives from (wire.ClaimLeaseID); 0: handed to it (wire.HandoffLeaseID)
	etag        azcore.ETag // the ETag our record gave the blob: any other means the shard is not ours
	claimed     time.Time   // when the record was confirmed
	ts          termStop
	state       *termState

	leaving  bool          // asked to stop for a handover or a removal; under ownerState.mu
	leftAt   time.Time     // when it was asked to; likewise
	slowSaid bool          // reportSlow counted it; likewise
	returned atomic.Bool   // its func has returned
	to       *receiver     // the session it is handed to, if any; under ownerState.mu
	done     chan struct{} // closed once it is released or handed on
}

// fleetMemory is what a ShardOwner knows of the terms the fleet ran
// (shardfloors.go): what its session's record publishes, and what the
// others' say; atomics, read without a lock. The floors of the terms it saw,
// and the quiet after a deletion, are termMemory's, under ownerState.mu.
type fleetMemory struct {
	hadRecord atomic.Bool  // a session of this instance has written its record (so the container existed)
	longestD  atomic.Int64 // the longest lease duration a live session declared, in any listing of the sessions
	seenMax   atomic.Int64 // the highest term this instance saw, or sent a record of, on any shard's blob, which its session's record publishes (shardfloors.go)
	fleetSeen atomic.Int64 // the highest term any session's record, in any listing of the sessions, said its instance saw on any shard; seenMax included
}

// publishSeen raises the highest term this instance saw or sent on any
// shard, which its session's record publishes, and the fleet's, to n,
// unless no claim reaches n (wire.MaxSpreadTerm): that is reported, not
// spread. Called under ownerState.mu, with the floor or the proposal it
// follows (ownerState.seeTerms, proposeTerm).
func (f *fleetMemory) publishSeen(n int64) {
	if n <= wire.MaxSpreadTerm {
		raiseTo(&f.seenMax, n)
		raiseTo(&f.fleetSeen, n)
	}
}

// session is this instance's current session.
type session struct {
	id      string
	term    *termRunner // the session's lease, on its own blob, and its one term (run)
	leaving atomic.Bool // its record says it is leaving: it hands its shards on (see leave)

	// With a lease ID file (sessionfile.go): resumed says the session was
	// started by an earlier process, which held shards this one takes back
	// (takeBack); inherited is how many its record said, which this one's
	// record says too until they are taken back; keep says the session
	// ends by the caller's cancel, leaving its leases for the next process.
	resumed   bool
	inherited atomic.Int64
	keep      atomic.Bool

	// endList is, once its shards have stopped, the list (heldlist.go) of those
	// it released as it left instead of handing them on, if any: written
	// as it ends, for the others to take them from it (see endSession).
	endList atomic.Pointer[string]
}

// setID names a set of shards in a session's record: its digest and size.
type setID struct {
	digest string
	size   int
}

// receiver is the session a shard is handed to.
type receiver struct {
	session  string
	identity string
}

// shardCounters are the metrics of ownership as a whole (see
// [WithMeterProvider]), with the attributes leaderelection.container and
// leaderelection.blob (the shards' prefix):
//
//	leaderelection.shards.owned        gauge     shards this instance holds and keeps: their func runs, not being given up
//	leaderelection.shards.target       gauge     this instance's fair share
//	leaderelection.sessions.live       gauge     live sessions, this one's included
//	leaderelection.shards.unowned      gauge     shards of this instance's set that no live session holds, as it last saw them (see ownerless)
//	leaderelection.shards.listing.age  gauge, s  seconds since this instance's last listing of the shards started, or the records counted every shard
//	leaderelection.shards.claims       counter   claims by outcome (claimed|taken: from a dead session|handed: handed to it, adopted|resumed: taken back by a resumed session|held: lost the race|transient|permanent)
//	leaderelection.shards.handovers    counter   shards handed over to balance the load
//
// The shards' terms are counted and timed by leaderelection.transitions and
// leaderelection.term.stop_margin, without the shard's name: with thousands
// of shards, a name per series would swamp a metrics backend. Events carry
// the name. The session's renewals are timed by leaderelection.renew.duration
// and leaderelection.renew.age, with the sessions' prefix as the blob.
type shardCounters struct {
	m         *metrics
	owned     metric.Int64ObservableGauge
	target    metric.Int64ObservableGauge
	live      metric.Int64ObservableGauge
	unowned   metric.Int64ObservableGauge
	listAge   metric.Float64ObservableGauge
	claims    metric.Int64Counter
	handovers metric.Int64Counter
	seen      *ownerless
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

func (o *ShardOwner) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// claimTimeout bounds each request of a claim (create, break, acquire,
// record): three RequestTimeouts. A claim waits for nobody's safety (the
// shard's lease never expires, every step is conditional, and its func
// starts only once the record is written, under a session that is
// renewed apart), and a request cut short costs more than one that waits:
// over HTTP/1.1 its connection is closed, and the next request opens a new
// one. On a busy account a new connection waits for its first answer:
// seconds on Azurite, while ten instances open theirs at once (40 opened
// together while 80 requests were in flight: 4.0 s p50, 6.6 s at most).
// Cut at RequestTimeout, the claims of a cold start closed connections
// faster than Azurite answered new ones. A claim in flight when the
// session ends is cancelled at once: this bounds no shutdown. A transfer's
// record write (writeShardRecord) has the same bound, within the
// handover's own (handoffGrace, and the releases' window as the session
// ends).
func (s BlobSettings) claimTimeout() time.Duration {
	return 3 * s.RequestTimeout
}

// handoffGrace bounds leave: from the caller's cancel to the moment the
// shard funcs not yet handed on are stopped (and released). The session's
// record must say it is leaving (one write, confirmed), the others must
// read it (one RetryInterval), and the shards be handed on.
func (s BlobSettings) handoffGrace() time.Duration {
	return s.RetryInterval + 2*s.RequestTimeout
}

// atOnce calls fn(i) for each i below n, k at a time, and returns once
// every call has.
func atOnce(n, k int, fn func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, k)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
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

const (
	handoverAtOnce   = 48                     // shard funcs stopped for a handover and not yet handed on, among all givers
	handoverPerGiver = 16                     // and by one giver
	handoffPoll      = 100 * time.Millisecond // how often a receiver that expects shards lists its notes
	seldomEvery      = 10                     // every how many handoffPolls it lists them if it only may get some
	handoffBatch     = 50 * time.Millisecond  // how long a giver gathers transfers into one note
	adoptParallel    = 32                     // adoptions in flight at once
	notesParallel    = 8                      // notes written at once
)

// How often a session reads its notes (see balance).
const (
	expectNothing = int32(shardplan.NotesNever)  // at its share: never
	expectSeldom  = int32(shardplan.NotesSeldom) // below its share, the records changing: every seldomEvery handoffPolls
	expectOften   = int32(shardplan.NotesOften)  // another session of its group above its share, or leaving: every handoffPoll
)

// probeMax is the most shards a session below its share reads one by one,
// as the sessions' lists name none of them, rather than list every shard.
const probeMax = 256

// takeBackParallel is how many shards a resumed session takes back at once.
const takeBackParallel = 4 * claimParallel

// warmConns is how many connections a session opens as it starts (warm).
const warmConns = claimParallel + 4

// errSessionGone ends a session whose blob a listing found gone, or whose
// container it did: deleted under it.
var errSessionGone = errors.New("leaderelection: the session's blob is gone: its container was deleted")

// errContainerGone is what list returns when the container is gone, or
// being deleted.
var errContainerGone = errors.New("leaderelection: the container is gone")

// sawDeletion notes that this instance saw its session's blob, or the
// container, gone: its next session's first pass starts a quiet (see above).
func (o *ShardOwner) sawDeletion(how string) {
	quiet := o.quietFor()
	if o.state.noteGap(quiet) {
		o.logger.Warn("leaderelection: the container was deleted under this instance's session; its next session claims no shard until every session that ran before it may have stopped",
			"container", o.settings.Container, "prefix", o.prefix, "how", how, "quiet", quiet.Round(time.Millisecond))
	}
}

// gone reports whether err says a blob, or its container, is gone.
func gone(err error) bool {
	codes := []string{blobstore.BlobNotFound, blobstore.ContainerNotFound, blobstore.ContainerBeingDeleted}
	var se *StorageError
	if errors.As(err, &se) {
		for _, c := range codes {
			if se.ErrorCode == c {
				return true
			}
		}
	}
	return blobstore.HasCode(err, codes...) || errors.Is(err, errContainerGone)
}

// sawCutOff notes that this instance's session ended cut off from storage
// (its deadline passed, or its lease was broken as silent): a deletion of
// the container meanwhile would have gone unseen, as its renewals failed on
// the silence, not on the blob's absence. Its next session begins as after
// a deletion seen: a quiet, its seeds, and first terms above the fleet's
// highest (see above).
func (o *ShardOwner) sawCutOff() {
	quiet := o.quietFor()
	o.state.noteGap(quiet)
	o.logger.Warn("leaderelection: this instance's session ended by its deadline or a lost lease, when a deletion of the container may go unseen; its next session takes the shards handed to it, but claims none until every session that ran before it may have stopped",
		"container", o.settings.Container, "prefix", o.prefix, "quiet", quiet.Round(time.Millisecond))
}

// quietFor is how long a session claims nothing after a deletion seen, and
// how long a shard blob created again must stand: the longest lease
// duration any session this instance listed declared (its own, if longer),
// StopMargin, and a RetryInterval and two RequestTimeouts for the other
// instances that saw it to seed their terms (see above).
func (o *ShardOwner) quietFor() time.Duration {
	s := o.settings
	return max(s.LeaseDuration, time.Duration(o.fleetMemory.longestD.Load())) + s.StopMargin + s.RetryInterval + 2*s.RequestTimeout
}

// checkShardName keeps shard names to what a blob name carries unchanged
// through URLs and listings, and reads back the same (wire.NameProblem).
func checkShardName(name string) error {
	if why := wire.NameProblem(name); why != "" {
		return fmt.Errorf("leaderelection: invalid shard name %q: %s", name, why)
	}
	return nil
}

// checkShardNames checks every name and that none repeats, and returns the
// set. Every bad name and every repeat is reported, joined with
// [errors.Join] as Validate joins its fields: a list generated by a script
// is fixed in one pass, not one name per run.
func checkShardNames(names []string) (map[string]bool, error) {
	set := make(map[string]bool, len(names))
	var errs []error
	reported := map[string]bool{} // each name once, however often it comes
	for _, n := range names {
		err := checkShardName(n)
		if err == nil && set[n] {
			err = fmt.Errorf("leaderelection: shard %q is named twice", n)
		}
		set[n] = true
		if err != nil && !reported[n] {
			errs = append(errs, err)
			reported[n] = true
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return set, nil
}

// pause waits d, or until poked, and reports whether ctx is still alive. A
// poke ends it no sooner than RetryInterval/4 after the last pause ended
// (unless a shard func panicked): a handover pokes once for each shard func
// that returns, and each pass of the session's loop lists the sessions, at
// 10,000 shards on Azurite some 6 ms of its one thread; givers listed them
// three times a second while they handed shards over.
func (o *ShardOwner) pause(ctx context.Context, d time.Duration) bool {
	defer func() { o.woke = time.Now() }()
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
	case <-o.wake:
	}
	if gap := o.settings.RetryInterval/4 - time.Since(o.woke); gap > 0 && !o.state.panicking() {
		g := time.NewTimer(gap)
		defer g.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		case <-g.C:
		}
	}
	return true
}
