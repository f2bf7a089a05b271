package leaderelection

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blobelect/leaderelection/internal/wire"
)

// What a blob's record says. A record is data another writer may have put
// there (an operator's tool, a script, a bug): it is read, checked and
// reported, never trusted (internal/wire reads it, by the rules its package
// doc gives). A value that does not read is a *RecordError, and nothing is
// built on it: no term continues a term number that does not read or cannot
// grow, and a lease duration that does not read counts as the longest any
// setting can declare, so that no follower breaks a lease sooner than its
// holder could have stopped.

// BlobRole says what a blob the library writes is for. Every blob the
// library creates, and every record it writes, carries its role (the
// metadata key leaderkind), so that the kinds of owner keep out of each
// other's way: a mutex neither takes nor breaks a session's or a shard's
// blob, and a ShardOwner neither takes nor breaks a mutex's, whatever names
// they were given. A blob written by no one of ours, or by a version of this
// library before roles, has none ("").
type BlobRole string

const (
	// RoleMutex is a [BlobDistributedMutex]'s (or a [BlobLeaseManager]'s)
	// lease blob.
	RoleMutex BlobRole = "mutex"
	// RoleSession is the blob of a [ShardOwner]'s session.
	RoleSession BlobRole = "session"
	// RoleShard is the blob of a [ShardOwner]'s shard.
	RoleShard BlobRole = "shard"
	// RoleHandoff is a note from one of a [ShardOwner]'s sessions to
	// another, naming shards it handed to it (see handoff.go).
	RoleHandoff BlobRole = "handoff"
	// RoleCandidate is a contender's blob beside a mutex's lease while it
	// waits as a preferred candidate (see [WithPriority]).
	RoleCandidate BlobRole = "candidate"
	// RoleHeld is the list of the shards one of a [ShardOwner]'s sessions
	// holds, for the others to take them if it dies (see heldlist.go).
	RoleHeld BlobRole = "held"
)

// ErrMalformedRecord is matched (with [errors.Is]) by every [*RecordError].
var ErrMalformedRecord = errors.New("malformed record")

// RecordError reports a record on a blob that this instance cannot build on:
// a value that does not read, a term number that cannot grow, or a blob of
// another role than the one this owner takes. It names the blob, the key and
// the value. It is not a storage failure: the fleet goes on polling, logs it
// at Error, reports it in its health, and carries on by itself once the
// record is repaired (see leaderctl's repair).
type RecordError struct {
	Container string
	Blob      string
	Key       string // the metadata key
	Value     string // its value as stored
	Rule      string // what is wrong with it
}

func (e *RecordError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	return fmt.Sprintf("leaderelection: record on %s/%s: %s=%q %s", e.Container, e.Blob, e.Key, v, e.Rule)
}

// Is makes a RecordError match [ErrMalformedRecord].
func (e *RecordError) Is(target error) bool { return target == ErrMalformedRecord }

// record is a blob's record as read (wire.ParseRecord), with its Problem,
// the first value that does not read, as the *RecordError (problem) that
// names the blob.
type record struct {
	wire.Record
	problem *RecordError
}

// term is the term r names (with no lease ID: a record carries none).
func (r record) term() Term {
	return Term{Number: r.Term.Number, Identity: r.Term.Identity, Since: r.Term.Since}
}

// fill puts what r says into info.
func (r record) fill(info *LeaseInfo) {
	info.Leader = r.term()
	info.LeaderEnded, info.DeclaredDuration, info.Role, info.RecordError = r.Ended, r.Declared, BlobRole(r.Role), r.problem
	info.Recreated = r.Recreated
	info.seedLongest = r.seedLongest()
	info.Priority, info.Prioritized, info.HandedTo = r.Priority, r.Prioritized, r.Next
}

// seedLongest is the longest lease duration the seed of a blob created
// again says a holder of it declared: the longest declarable if that does
// not read, as another writer must have put it there (0 on a blob not
// created again).
func (r record) seedLongest() time.Duration {
	switch {
	case r.Recreated.IsZero():
		return 0
	case r.LongestBad != "":
		return wire.MaxDeclarable
	}
	return r.Longest
}

// readRecord reads the record in md, the metadata of blob.
func readRecord(container, blob string, md map[string]*string) record {
	r := record{Record: wire.ParseRecord(md)}
	if p := r.Problem; p != nil {
		r.problem = &RecordError{Container: container, Blob: blob, Key: p.Key, Value: p.Value, Rule: p.Rule}
	}
	return r
}

// wireTerm is t as a record names it: without its lease ID.
func wireTerm(t Term) wire.Term {
	return wire.Term{Number: t.Number, Identity: t.Identity, Since: t.Since}
}

// blocks reports whether no term may be recorded over the record e reports:
// its term number, or its role, is wrong (a lease duration that does not
// read only changes how a holder's silence is timed, and a longest lease
// on a blob created again how long it stands before it is taken).
func (e *RecordError) blocks() bool {
	return e != nil && e.Key != wire.MetaLeaseDuration && e.Key != wire.MetaLongest
}

// termCannotGrow is the RecordError for a term number that no term can follow.
func termCannotGrow(container, blob string, n int64) *RecordError {
	return &RecordError{Container: container, Blob: blob, Key: wire.MetaTerm, Value: strconv.FormatInt(n, 10),
		Rule: "is the largest term number: no term can follow it, and a fencing token must never repeat or go down"}
}

// foreignRole is the RecordError for a blob of another role than want.
func foreignRole(container, blob string, got, want BlobRole) *RecordError {
	return &RecordError{Container: container, Blob: blob, Key: wire.MetaRole, Value: string(got),
		Rule: fmt.Sprintf("says the blob is not a %s's: two owners were given one blob name; it is neither taken nor broken", want)}
}

// termFloor is the highest term number an instance has seen on one blob:
// while it runs, no term it records there goes below it, even if the blob,
// or its container, is deleted and created again. It also keeps the highest
// this instance proposed there (a record it sent, whose answer it may never
// have had: the server may have stored it), which a blob created again is
// seeded and raised with (seed), so that such a record's number does not go
// to another holder either.
//
// proposed is never above the floor + 1 (a record proposes the next term
// above the floor). NextTerm, and the alarm at a term on the blob below the
// floor, use the floor alone: a write that was not stored neither skips a
// number nor raises a false alarm.
//
// It also keeps what a blob created again must be waited for (recreated.go):
// the lease duration its own holder would declare (own), and the one the
// record of the highest term this instance read there declares (last), or,
// for a blob created again, its seed says its seeders knew a holder of that
// term to declare. Only the holder of the highest term may still hold the
// lease when the blob is deleted: each earlier one's lease had passed
// before the next term was recorded.
//
// And, for a quorum's contender that proposes a term again (quorum.go's
// Q3), the last term this instance proposed (mine) and the highest term it
// read in a record that is not that one (foreign): a term of another's, or
// of an earlier process's with the same lease ID file.
type termFloor struct {
	n, proposed atomic.Int64
	mu          sync.Mutex
	own         time.Duration
	last        declaredAt
	mine        wire.Term
	foreign     int64 // of records with an identity: a seed carries no term
}

// declaredAt is a lease duration declared for term n.
type declaredAt struct {
	n int64
	d time.Duration
}

// see raises the floor to n. The largest number is not taken as a floor:
// no term can follow it, so it is reported as a record that cannot be built
// on, and once repaired (lowered, by an operator who chose to) the fleet
// goes on from the repaired number without a restart.
func (f *termFloor) see(n int64) {
	if n != math.MaxInt64 {
		raiseTo(&f.n, n)
	}
}

// remember raises the floor to r's term, if it reads, and notes the lease
// duration r declares (noteLease).
func (f *termFloor) remember(r record) {
	if !r.TermBad {
		f.see(r.Term.Number)
		if t := r.Term; t.Identity != "" {
			f.mu.Lock()
			if t.Number > f.foreign && !sameProposal(t, f.mine) {
				f.foreign = t.Number
			}
			f.mu.Unlock()
		}
	}
	f.noteLease(r)
}

// sameProposal reports whether a and b are one proposal's record: the
// same number, identity and since (a quorum's accounts each carry their
// own lease ID).
func sameProposal(a, b wire.Term) bool {
	return a.Number == b.Number && a.Identity == b.Identity && a.Since.Equal(b.Since)
}

// noteLease notes the lease duration r declares, or, on a blob created
// again, its seed says a holder of its term declared: the holder of a
// higher term than any noted replaces what was noted (each earlier
// holder's lease had passed before that term was recorded); the same term,
// or a lower one (a record repaired lower, then a term recorded above it),
// keeps the longer. A declared duration that does not read is another
// writer's (ours always reads) and lowers nothing; the largest term number
// is not noted, as the floor does not take it (see).
func (f *termFloor) noteLease(r record) {
	if r.TermBad || r.Term.Number == math.MaxInt64 {
		return
	}
	d := r.Longest
	if !r.DeclaredBad {
		d = max(d, r.Declared)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Term.Number > f.last.n && !r.DeclaredBad:
		f.last = declaredAt{n: r.Term.Number, d: d}
	case r.Term.Number > f.last.n:
		f.last = declaredAt{n: r.Term.Number, d: max(f.last.d, d)}
	default:
		f.last.d = max(f.last.d, d)
	}
}

// ownLease notes d as the lease duration this instance's holder declares.
func (f *termFloor) ownLease(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.own = d
}

// longestDeclared is the longest lease a holder of the blob's last term
// known to this instance may have declared: its own, or the last noted.
func (f *termFloor) longestDeclared() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(f.own, f.last.d)
}

// propose notes t as a term this instance sent a record of.
func (f *termFloor) propose(t Term) {
	raiseTo(&f.proposed, t.Number)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mine = wire.Term{Number: t.Number, Identity: t.Identity, Since: t.Since}
}

// onlyMine reports whether no record read by this instance carries p's
// number, or a higher one, but p itself (foreign).
func (f *termFloor) onlyMine(p Term) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.foreign < p.Number
}

func (f *termFloor) get() int64 { return f.n.Load() }

// seed is what a blob created again is seeded, or raised, with: the floor,
// or a term proposed above it.
func (f *termFloor) seed() int64 { return max(f.n.Load(), f.proposed.Load()) }

// raiseTo raises a to v, if lower.
func raiseTo(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
