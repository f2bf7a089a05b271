package leaderelection

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/shardplan"
	"github.com/blobelect/leaderelection/internal/wire"
)

// A session's shared state: its manager (shardManager) and the state the
// manager keeps by concern (candidates, the last listing, the balance's
// memory, handoffs, its own terms, its held list), the view of the sessions
// it judges by, and the small methods that read them. Above shardstate.go,
// below every part of the session's loop.

// heldLine is a run's line in the list.
func heldLine(r *shardRun) string {
	return wire.HeldLine(wire.Held{Name: r.name, Term: r.term.Number, Gen: r.sessionTerm, ETag: string(r.etag)})
}

// shardManager is one session's loop: it balances, claims, hands over, and runs
// the shards. Its fields are touched only by the session's goroutine.
type shardManager struct {
	o           *ShardOwner
	s           *session
	ctx         context.Context // the session func's context: please stop, or stop now
	shardsCtx   context.Context // parent of every shard func's own context
	stopNow     context.Context // the session's lease context
	sessionTerm int64           // the session's term: wire.ClaimLeaseID derives from it
	runs        sync.WaitGroup  // shard runs, until their release is done
	funcs       sync.WaitGroup  // shard funcs, until they return
	// releases bounds every release of a shard's lease: derived from
	// stopNow, and ended RequestTimeout after the last shard func returned
	// as the session ends (see manage). endReleases ends it.
	releases    context.Context
	endReleases context.CancelFunc
	watch       *sessionWatch
	begun       bool             // mayRun said yes: the session runs shards (see begin)
	toldBehind  bool             // mayRun said why not, once
	deadline    func() time.Time // the session's safety deadline
	fuse        *safetyFuse      // the session's: no shard func starts once it is past

	candidates   candidates   // the free shards, and this session's part of them (shardclaim.go)
	shardListing shardListing // the last listing of the shards, and when to list again (shardlist.go)
	balancing    balancing    // what balance remembers from one pass to the next (shardbalance.go)
	handoffs     handoffs     // the shards handed straight on, and to this session (handoff.go)
	ownTerms     ownTerms     // the terms this session recorded, or adopted, for itself (shardtake.go)
	heldList     heldList     // the list of the shards this session holds (heldlist.go)
	proof        sessionProof // that its blob was there after a claim's lease was granted (sessionproof.go)
}

// sessionView is what one listing of the sessions says, judged by this
// instance: who is alive (counts for balance), how many shards each holds
// and which set it runs, by its own last record.
type sessionView struct {
	live  []string          // IDs of the live sessions that have written their record, this one's included; sorted
	owned map[string]int    // the shards each live session said it held
	set   map[string]string // each live session's set's digest, "" if its record has none; not this one's
	size  map[string]int    // how many shards each live session's set has, -1 if its record does not say
	died  []string          // sessions found dead by this listing that the last one showed alive (or broken by this instance)
	ident map[string]string // each live session's identity, by its record
	leave map[string]bool   // the live sessions whose record says they are leaving (see leave)
	// handing is how many shards each live session's record says it is
	// handing over: asked to stop, not handed yet, and no longer counted
	// in owned. Shards are on their way to the sessions below their share.
	handing map[string]int
	// knows is, for each live session whose record says (wire.MetaLongest), the
	// longest lease duration its instance knows a session declared, its
	// own included (see mayRun); none for a record of an older version.
	knows map[string]time.Duration
}

// sessionWatch is this instance's knowledge of other sessions, kept across
// listings by the manager goroutine of one session.
type sessionWatch struct {
	silence    map[string]*silenceWatch // by session ID: its ETag, and since when it stands
	unleased   map[string]unleasedSince // by session ID: sessions seen without a lease, to collect
	dead       map[string]time.Time     // by session ID: dead for good, and when this was learnt
	live       map[string]bool          // the sessions the last listing showed alive
	ignored    map[string]string        // by name: blobs the last listing found not to be sessions, or sessions whose record does not read (what was reported)
	badSeen    map[string]string        // by session ID: a highest term seen, in its record, that is not trusted (what was reported)
	badLongest map[string]string        // by session ID: a longest lease duration known, in its record, that does not read (what was reported)
	twinETag   map[string]azcore.ETag   // by session ID: live sessions under this instance's identity, the ETag first seen
	twins      string                   // those of them seen renewed, at the last warning
	revived    map[string]azcore.ETag   // by session ID: dead sessions seen with a record but no end mark (reported), at that ETag
	leasedDead map[string]unleasedSince // by session ID: dead sessions seen leased, since when (see collect)
}

type unleasedSince struct {
	etag  azcore.ETag
	since time.Time
}

// candidate is a shard that a listing showed free to claim.
type candidate struct {
	name   string
	exists bool        // its blob exists (else the claim creates it)
	etag   azcore.ETag // its ETag in the listing: every step of a claim is conditional on it
	leased bool        // its lease must be broken first: its session is dead, or it was never recorded
	prev   int64       // the term number on the blob
	// recreated: free, carrying no term's record, and created again by an
	// instance that saw terms on it (record.go): see shardfloors.go. marked:
	// so created again, and carrying no term's record, free or not (a claim
	// that took it may have failed before it recorded its term).
	recreated, marked bool
	dead              bool // a dead session held it (see takeFromDead, and claim's others)
	// oldID is set only for a resumed session's take-back (takeBack): the
	// lease ID the shard's record implies, which its previous process used.
	oldID string
	// ours: leased, with this session's record, not held by it, and its
	// ETag has stood a lease duration: a stray only this session can tell
	// (see freeStrays).
	ours bool
	// fromList: named by a session's list of what it held (heldlist.go), not
	// seen in a listing: taken only by the change from oldID, If-Match
	// etag, never broken (see claimOne).
	fromList bool
	// released: free, its lease released by a peer (see sameSetPeers): a shard
	// its func returned, or one it tells of (see reportTook).
	released bool
}

// candidates are the shards a session may claim, and its part of them:
// free by its last listing (or by the dead sessions' lists, or the probe
// since), assigned by the rule every instance applies alike (see claim),
// and how its last claims went. Touched only by the session's goroutine
// but took, which is atomic.
type candidates struct {
	cands     map[string]candidate // free shards by the last listing (and the dead sessions' since)
	freeSince map[string]time.Time // since when each was seen free
	part      []string             // this session's part of them (see balance.Assign), best first
	partTo    map[string]string    // whom each of them was assigned to, when part was
	partFor   string               // the live sessions it was assigned among
	deathRoom map[string]int       // after a death, each live session's room by the last listing (see takeFromDead); nil otherwise
	deathFor  string               // the live sessions deathRoom is for
	fromDeath bool                 // the candidates are a dead session's shards by owners (see takeFromDead), not a listing's
	stale     bool                 // the last claims from them mostly failed: list again
	// fromListing: the candidates are a listing's, and owners is that
	// listing's (with this session's claims and handovers since): parts
	// are assigned over the whole set (balance.AssignSet).
	fromListing bool
	took        atomic.Int64 // shards claimed or adopted since the last report (see reportTook)
	tookFreed   atomic.Int64 // of those, shards a peer had released (candidate.released)
}

// shardListing is what a session's last listing of the shards told, and
// when it lists them again. Touched only by the session's goroutine but
// owners, which ownersMu guards.
type shardListing struct {
	anomalies map[string]unleasedSince // leased shards without a live holder to name: since when their ETag stands
	lostNow   map[string][]string      // shards a listing found lost, by why (see reportLost)

	// owners is who held each shard by the last listing (and this
	// session's own claims since): when a session dies, its shards are
	// claimed from here, without a listing of every shard.
	owners   map[string]shardHolder
	ownersAt time.Time  // when the listing owners comes from started
	ownersMu sync.Mutex // claims and adoptions write owners in parallel

	// quietAt is when this session last listed the shards during its
	// quiet, quietIdle that that listing found every blob of the set
	// there and none created again, and quietStand when those it found
	// created again will have stood (quietList, waitToStand).
	quietAt    time.Time
	quietIdle  bool
	quietStand time.Time
}

// shardHolder is who held a shard, by a listing.
type shardHolder struct {
	session string
	etag    azcore.ETag
	term    int64
}

// balancing is what balance remembers from one pass to the next: how the
// live sessions' counts moved, and the memory its decisions keep
// (shardplan.Memory). Touched only by the session's goroutine.
type balancing struct {
	grewAt    map[string]time.Time // when each live session's record last said it held more (or it was first seen); see noteGrowth
	lastOwned map[string]int       // what each live session's record said it held, at this pass
	prevOwned map[string]int       // and at the pass before (see takeFromDead)
	group     sessionView          // this session's group, at the last balance (for leave)
	plan      shardplan.Memory     // what the decisions of balance keep from one pass to the next
}

// handoffs are a session's handovers (see the top of this file): the
// shards handed straight to a receiver, and those handed to this session.
// Touched only by the session's goroutine but its atomics, the channels
// and the wait groups.
type handoffs struct {
	expecting   atomic.Int32                    // how often to read its notes: expectNothing, expectSeldom or expectOften (see balance)
	adoptSlots  chan struct{}                   // adoptions in flight
	peers       atomic.Pointer[map[string]bool] // the live sessions, by the last listing (see setPeers)
	out         *outbox                         // notes to write
	pacing      sync.WaitGroup                  // pace, deliver, and what they start
	watching    sync.WaitGroup                  // watchNotes
	changedBack atomic.Int64                    // shards taken back by a change of their lease's ID (see takeBack)
}

// ownTerms are the terms a session recorded, or adopted, for itself (it
// never adopts one twice), and the highest it proposed for each shard
// (its next claim proposes more). Its claims and adoptions run in
// parallel: termsMu guards it.
type ownTerms struct {
	termsMu sync.Mutex       // guards terms
	terms   map[ownTerm]bool // the terms this session recorded, or adopted, for itself
	highest map[string]int64 // by shard, the highest of them, and of the terms its claims proposed
}

// ownTerm is a shard's term, as this session recorded it for itself.
type ownTerm struct {
	name string
	term int64
}

// handed is one shard handed to a receiver: what its note says.
type handed struct {
	name string
	term int64
	etag azcore.ETag
	from string // the giver's session, if a note of its says so and the receiver knows it live
}

// heldEntry is one shard of a session's list.
type heldEntry struct {
	name        string
	term        int64
	sessionTerm int64       // the session's term its claim derived the lease ID from; 0: handed to it
	etag        azcore.ETag // the ETag of the shard's record that named the session: its claim's, or its giver's
}

// derivedID is the lease ID the holder session derived for the entry.
func (e heldEntry) derivedID(session string) string {
	return wire.Held{Name: e.name, Term: e.term, Gen: e.sessionTerm}.LeaseID(session)
}

// heldList is the list of the shards a session holds: when it was last
// written, what it said, whether a write is in flight, and whether the
// last one failed; and the lines of the list it writes as it ends. Touched
// by the session's goroutine but its atomics, and endLines, which endMu
// guards.
type heldList struct {
	heldAt     time.Time
	heldLast   string
	heldBusy   atomic.Bool
	heldFailed atomic.Bool
	endMu      sync.Mutex
	endLines   []string // the list's lines of the shards released as it left (see leftBehind)
}

// outbox keeps the shards handed on, by receiver, for noteKeep: each note
// (one per giver and receiver) is rewritten with them as more are handed.
type outbox struct {
	mu      sync.Mutex
	recent  map[string][]posted // by receiver
	dirty   map[string]bool     // receivers whose note must be rewritten
	writing map[string]bool     // receivers whose note is being written: one write at a time, in order
	ready   chan struct{}       // signalled when a receiver's note becomes dirty, or its write ends
	closed  chan struct{}       // closed once no more are posted
}

// posted is a shard handed on, and when.
type posted struct {
	handed
	at time.Time
}

// record notes a term this session records, or adopts, for itself: it never
// adopts a term twice.
func (t *ownTerms) record(name string, term int64) {
	t.termsMu.Lock()
	defer t.termsMu.Unlock()
	t.terms[ownTerm{name, term}] = true
	t.highest[name] = max(t.highest[name], term)
}

// propose notes a term a claim of this session proposes for shard name
// (see claimOne): its next claim proposes more.
func (t *ownTerms) propose(name string, term int64) {
	t.termsMu.Lock()
	defer t.termsMu.Unlock()
	t.highest[name] = max(t.highest[name], term)
}

// proposed is the highest term this session proposed, recorded or adopted
// for shard name.
func (t *ownTerms) proposed(name string) int64 {
	t.termsMu.Lock()
	defer t.termsMu.Unlock()
	return t.highest[name]
}

func (t *ownTerms) recorded(name string, term int64) bool {
	t.termsMu.Lock()
	defer t.termsMu.Unlock()
	return t.terms[ownTerm{name, term}]
}

// noteOwner records a claim of this session in owners (claims run in
// parallel).
func (l *shardListing) noteOwner(name string, h shardHolder) {
	l.ownersMu.Lock()
	defer l.ownersMu.Unlock()
	l.owners[name] = h
}

// keepOwners makes owners a listing's.
func (l *shardListing) keepOwners(owners map[string]shardHolder) {
	l.ownersMu.Lock()
	defer l.ownersMu.Unlock()
	l.owners = owners
}

// holders is the session that holds each shard of owners.
func (l *shardListing) holders() map[string]string {
	l.ownersMu.Lock()
	defer l.ownersMu.Unlock()
	holders := make(map[string]string, len(l.owners))
	for name, h := range l.owners {
		holders[name] = h.session
	}
	return holders
}

// forgetOwners drops from owners the shards the sessions of dead held.
func (l *shardListing) forgetOwners(dead map[string]bool) {
	l.ownersMu.Lock()
	defer l.ownersMu.Unlock()
	for name, h := range l.owners {
		if dead[h.session] {
			delete(l.owners, name)
		}
	}
}

// heldOutside counts the shards of owners not in free held by a session
// not in in.
func (l *shardListing) heldOutside(in map[string]bool, free map[string]candidate) int {
	l.ownersMu.Lock()
	defer l.ownersMu.Unlock()
	n := 0
	for name, h := range l.owners {
		if _, ok := free[name]; !ok && !in[h.session] {
			n++
		}
	}
	return n
}

// signature sums the view up: it changes when a session comes or goes, says
// it holds a different number of shards, or runs another set.
func (v sessionView) signature() string {
	var b strings.Builder
	for _, id := range v.live {
		fmt.Fprintf(&b, "%s=%d+%d/%s;", id, v.owned[id], v.handing[id], v.set[id])
	}
	return b.String()
}

// group narrows the view to the sessions that agree with this one (self) on
// the set of shards: those whose records carry one of sets (its set now,
// and, just after it changed, the one before: see balance); self's own
// record may still carry an earlier one. A session whose record carries no
// digest (an older version) agrees with none. The shares of a set are
// counted among the sessions that agree on it (see shardbalance.go). A session
// that is leaving (handing its shards on, see leave) counts in no group but
// its own: its shards are not free, and it takes none.
func (v sessionView) group(self string, sets ...setID) sessionView {
	g := v
	g.live = make([]string, 0, len(v.live))
	for _, id := range v.live {
		if id == self || !v.leave[id] && v.agrees(id, sets) {
			g.live = append(g.live, id)
		}
	}
	return g
}

func (v sessionView) agrees(id string, sets []setID) bool {
	return v.set[id] != "" && slices.Contains(sets, setID{v.set[id], v.size[id]})
}

// leaving reports whether a session that agrees on one of sets is leaving.
func (v sessionView) leaving(self string, sets ...setID) bool {
	for id := range v.leave {
		if id != self && v.agrees(id, sets) {
			return true
		}
	}
	return false
}

// sets sums up which set each live session runs, self's being digest: it
// changes when a session comes or goes, or runs another set.
func (v sessionView) sets(self, digest string) string {
	var b strings.Builder
	for _, id := range v.live {
		d := v.set[id]
		if id == self {
			d = digest
		}
		fmt.Fprintf(&b, "%s=%s;", id, d)
	}
	return b.String()
}

// listedCandidate is a shard whose blob was read (info) as a candidate to
// claim.
func listedCandidate(name string, info LeaseInfo) candidate {
	marked := info.Leader.Identity == "" && !info.Recreated.IsZero()
	return candidate{name: name, exists: true, etag: info.ETag, prev: info.Leader.Number,
		recreated: marked && !info.Held(), marked: marked}
}

// setPeers keeps the live sessions of the last listing, for watchNotes.
func (h *handoffs) setPeers(live []string) {
	peers := make(map[string]bool, len(live))
	for _, id := range live {
		peers[id] = true
	}
	h.peers.Store(&peers)
}

func (sm *shardManager) isPeer(id string) bool {
	p := sm.handoffs.peers.Load()
	return p != nil && (*p)[id] && id != sm.s.id
}

// leftBehind notes a shard released as this session leaves, not handed on
// (see endSession): its line of the list the session writes as it ends.
func (h *heldList) leftBehind(r *shardRun) {
	h.endMu.Lock()
	defer h.endMu.Unlock()
	h.endLines = append(h.endLines, heldLine(r))
}

func newOutbox() *outbox {
	return &outbox{recent: map[string][]posted{}, dirty: map[string]bool{}, writing: map[string]bool{},
		ready: make(chan struct{}, 1), closed: make(chan struct{})}
}

func newSessionWatch() *sessionWatch {
	return &sessionWatch{silence: map[string]*silenceWatch{}, unleased: map[string]unleasedSince{}, dead: map[string]time.Time{}, live: map[string]bool{},
		twinETag: map[string]azcore.ETag{}, revived: map[string]azcore.ETag{}, leasedDead: map[string]unleasedSince{}}
}
