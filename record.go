package leaderelection

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// What a blob's record says. A record is data another writer may have put
// there (an operator's tool, a script, a bug): it is read, checked and
// reported, never trusted. A value that does not read is a *RecordError, and
// nothing is built on it: no term continues a term number that does not read
// or cannot grow, and a lease duration that does not read counts as the
// longest any setting can declare, so that no follower breaks a lease sooner
// than its holder could have stopped.

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
	// holds, for the others to take them if it dies (see held.go).
	RoleHeld BlobRole = "held"
)

// metaRole is the record's key for its blob's role; metaRecreated marks a
// blob created again, under a fleet that had recorded terms on it.
const (
	metaRole      = "leaderkind"
	metaRecreated = "leaderrecreated"
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

// The lease durations any valid setting can declare: the shortest ETag lease
// and the longest.
const (
	minDeclarable = minETagLeaseDuration
	maxDeclarable = maxETagLeaseDuration
)

// record is a blob's metadata, read.
type record struct {
	term  Term      // the last leader's term; Number 0 when it does not read
	ended time.Time // when that term ended by a release; zero otherwise
	// endMark: the record carries an end mark at all (leaderended), read or
	// not. On a session's blob it means the session is over for good,
	// whatever its lease (see the top of session.go).
	endMark bool
	// recreated is when the blob was created again (seeded with its
	// creator's floor); zero if it was not.
	recreated time.Time
	// declared is the lease duration its writer declared: 0 if none, the
	// longest declarable if it does not read or lies outside what any
	// setting can declare.
	declared time.Duration
	role     BlobRole
	// problem is the first value that does not read; termBad is set when
	// it is the term number, which no new term may then continue.
	problem *RecordError
	termBad bool
	// priority is what its holder declared (prioritized: it declared
	// one), and next the contender an ended term handed the lease to
	// (see WithPriority).
	priority    int
	prioritized bool
	next        string
}

// fill puts what r says into info.
func (r record) fill(info *LeaseInfo) {
	info.Leader, info.LeaderEnded, info.DeclaredDuration, info.Role, info.RecordError = r.term, r.ended, r.declared, r.role, r.problem
	info.Recreated = r.recreated
	info.Priority, info.Prioritized, info.HandedTo = r.priority, r.prioritized, r.next
}

// readRecord reads the record in md, the metadata of blob.
func readRecord(container, blob string, md map[string]*string) record {
	var r record
	bad := func(key, value, rule string) {
		if r.problem == nil {
			r.problem = &RecordError{Container: container, Blob: blob, Key: key, Value: value, Rule: rule}
		}
	}
	r.role = BlobRole(metaValue(md, metaRole))
	if n := metaValue(md, metaTerm); n != "" {
		num, err := strconv.ParseInt(n, 10, 64)
		if err != nil || num < 0 {
			r.termBad = true
			bad(metaTerm, n, "is not a term number (0 to 9223372036854775807): no term can follow it until it is repaired")
		} else {
			r.term.Number = num
		}
	}
	r.term.Identity = metaValue(md, metaIdentity)
	readTime := func(key string) time.Time {
		v, _ := time.Parse(time.RFC3339Nano, metaValue(md, key))
		return v
	}
	r.term.Since = readTime(metaSince)
	r.ended = readTime(metaEnded)
	r.endMark = metaValue(md, metaEnded) != ""
	r.recreated = readTime(metaRecreated)
	// A priority that does not read is no priority: its holder is taken
	// for one that does not watch for candidates.
	if p, err := strconv.Atoi(metaValue(md, metaPriority)); err == nil {
		r.priority, r.prioritized = p, true
	}
	r.next = metaValue(md, metaNext)
	if v := metaValue(md, metaLeaseDuration); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil || d < minDeclarable:
			r.declared = maxDeclarable
			bad(metaLeaseDuration, v, fmt.Sprintf("is not a lease duration any setting declares (%v to %v): timed as %v", minDeclarable, maxDeclarable, maxDeclarable))
		case d > maxDeclarable:
			r.declared = maxDeclarable
			bad(metaLeaseDuration, v, fmt.Sprintf("is longer than any setting declares: timed as %v", maxDeclarable))
		default:
			r.declared = d
		}
	}
	return r
}

// nextTerm is the number of the term after prev, for an instance that has
// seen floor on the same blob: above both, or false if no number is.
func nextTerm(prev, floor int64) (int64, bool) {
	p := max(prev, floor)
	if p == math.MaxInt64 {
		return 0, false
	}
	return p + 1, true
}

// blocks reports whether no term may be recorded over the record e reports:
// its term number, or its role, is wrong (a lease duration that does not
// read only changes how a holder's silence is timed).
func (e *RecordError) blocks() bool { return e != nil && e.Key != metaLeaseDuration }

// termCannotGrow is the RecordError for a term number that no term can follow.
func termCannotGrow(container, blob string, n int64) *RecordError {
	return &RecordError{Container: container, Blob: blob, Key: metaTerm, Value: strconv.FormatInt(n, 10),
		Rule: "is the largest term number: no term can follow it, and a fencing token must never repeat or go down"}
}

// foreignRole is the RecordError for a blob of another role than want.
func foreignRole(container, blob string, got, want BlobRole) *RecordError {
	return &RecordError{Container: container, Blob: blob, Key: metaRole, Value: string(got),
		Rule: fmt.Sprintf("says the blob is not a %s's: two owners were given one blob name; it is neither taken nor broken", want)}
}

// termFloor is the highest term number an instance has seen on one blob:
// while it runs, no term it records there goes below it, even if the blob,
// or its container, is deleted and created again.
type termFloor struct{ n atomic.Int64 }

// see raises the floor to n. The largest number is not taken as a floor:
// no term can follow it, so it is reported as a record that cannot be built
// on, and once repaired (lowered, by an operator who chose to) the fleet
// goes on from the repaired number without a restart.
func (f *termFloor) see(n int64) {
	if n == math.MaxInt64 {
		return
	}
	for {
		cur := f.n.Load()
		if n <= cur || f.n.CompareAndSwap(cur, n) {
			return
		}
	}
}

func (f *termFloor) get() int64 { return f.n.Load() }

// createMetadata is the metadata a blob is created with: its role and, if
// terms were seen on a blob of that name before (it was deleted since), the
// highest of them, as an ended term that the next one continues, marked as
// a blob created again.
func createMetadata(role BlobRole, floor int64) map[string]*string {
	md := endedMetadata(role, floor)
	if floor > 0 {
		md[metaRecreated] = md[metaEnded]
	}
	return md
}

// endedMetadata is a record of role (none if "") that says only that term
// number n has ended (none if n is 0).
func endedMetadata(role BlobRole, n int64) map[string]*string {
	md := map[string]*string{}
	if role != "" {
		r := string(role)
		md[metaRole] = &r
	}
	if n > 0 {
		num, ended := strconv.FormatInt(n, 10), time.Now().UTC().Format(time.RFC3339Nano)
		md[metaTerm], md[metaEnded] = &num, &ended
	}
	return md
}

// metaValue reads a metadata key case-insensitively ("" if missing).
func metaValue(md map[string]*string, key string) string {
	for k, v := range md {
		if strings.EqualFold(k, key) && v != nil {
			return *v
		}
	}
	return ""
}
