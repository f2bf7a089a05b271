package wire

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The lease durations any valid setting can declare: the shortest ETag
// lease and the longest (the library's settings keep to these).
const (
	MinDeclarable = 3 * time.Second
	MaxDeclarable = 24 * time.Hour
)

// Term is the term a record names: its number, its leader's identity, and
// when the leader took the lease. A record never carries a lease ID.
type Term struct {
	Number   int64
	Identity string
	Since    time.Time
}

// Problem is a value of a record that does not read: the key, its value as
// stored, and what is wrong with it. The library reports it as its
// RecordError, with the blob's name.
type Problem struct {
	Key   string
	Value string
	Rule  string
}

// Record is a blob's metadata, read.
type Record struct {
	Term  Term      // the last leader's term; Number 0 when it does not read
	Ended time.Time // when that term ended by a release; zero otherwise
	// EndMark: the record carries an end mark at all (leaderended), read or
	// not. On a session's blob it means the session is over for good,
	// whatever its lease (see the top of the library's session.go).
	EndMark bool
	// Recreated is when the blob was created again (seeded with its
	// creator's floor); zero if it was not.
	Recreated time.Time
	// Declared is the lease duration its writer declared: 0 if none, the
	// longest declarable if it does not read or lies outside what any
	// setting can declare.
	Declared time.Duration
	// DeclaredBad: the declared duration does not read (Declared is then
	// the longest declarable).
	DeclaredBad bool
	// Longest, on a blob created again, is the longest lease duration its
	// seeders knew a holder of the blob to have declared (see
	// SeedMetadata); LongestBad is its value as stored when that does not
	// read as one any setting declares (Longest is then 0).
	Longest    time.Duration
	LongestBad string
	Role       string
	// Problem is the first value that does not read; TermBad is set when
	// it is the term number, which no new term may then continue.
	Problem *Problem
	TermBad bool
	// Priority is what its holder declared (Prioritized: it declared
	// one), and Next the contender an ended term handed the lease to
	// (see the library's WithPriority).
	Priority    int
	Prioritized bool
	Next        string
}

// ParseRecord reads the record in md, a blob's metadata.
func ParseRecord(md map[string]*string) Record {
	var r Record
	bad := func(key, value, rule string) {
		if r.Problem == nil {
			r.Problem = &Problem{Key: key, Value: value, Rule: rule}
		}
	}
	r.Role = Value(md, MetaRole)
	if n := Value(md, MetaTerm); n != "" {
		num, err := strconv.ParseInt(n, 10, 64)
		if err != nil || num < 0 {
			r.TermBad = true
			bad(MetaTerm, n, "is not a term number (0 to 9223372036854775807): no term can follow it until it is repaired")
		} else {
			r.Term.Number = num
		}
	}
	r.Term.Identity = Value(md, MetaIdentity)
	readTime := func(key string) time.Time {
		v, _ := time.Parse(time.RFC3339Nano, Value(md, key))
		return v
	}
	r.Term.Since = readTime(MetaSince)
	r.Ended = readTime(MetaEnded)
	r.EndMark = Value(md, MetaEnded) != ""
	r.Recreated = readTime(MetaRecreated)
	// A priority that does not read is no priority: its holder is taken
	// for one that does not watch for candidates.
	if p, err := strconv.Atoi(Value(md, MetaPriority)); err == nil {
		r.Priority, r.Prioritized = p, true
	}
	r.Next = Value(md, MetaNext)
	if v := Value(md, MetaLeaseDuration); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil || d < MinDeclarable:
			r.Declared, r.DeclaredBad = MaxDeclarable, true
			bad(MetaLeaseDuration, v, fmt.Sprintf("is not a lease duration any setting declares (%v to %v): timed as %v", MinDeclarable, MaxDeclarable, MaxDeclarable))
		case d > MaxDeclarable:
			r.Declared, r.DeclaredBad = MaxDeclarable, true
			bad(MetaLeaseDuration, v, fmt.Sprintf("is longer than any setting declares: timed as %v", MaxDeclarable))
		default:
			r.Declared = d
		}
	}
	r.Longest, r.LongestBad = readDeclarable(md, MetaLongest)
	// A mutex's seed's (a shard's blob carries none of ours, and its
	// claims wait by other rules).
	if r.LongestBad != "" && !r.Recreated.IsZero() && r.Role != RoleShard {
		bad(MetaLongest, r.LongestBad, fmt.Sprintf("is not a lease duration any setting declares (%v to %v): the blob created again is waited for as if a holder had declared %v, until it is repaired or raised by an instance that saw a higher term", MinDeclarable, MaxDeclarable, MaxDeclarable))
	}
	return r
}

// readDeclarable reads key's value in md as a lease duration some setting
// can declare: 0 and "" if there is none, 0 and the value as stored if it
// does not read as one.
func readDeclarable(md map[string]*string, key string) (time.Duration, string) {
	v := Value(md, key)
	if v == "" {
		return 0, ""
	}
	if d, err := time.ParseDuration(v); err == nil && d >= MinDeclarable && d <= MaxDeclarable {
		return d, ""
	}
	return 0, v
}

// NextTerm is the number of the term after prev, for an instance that has
// seen floor on the same blob: above both, or false if no number is.
func NextTerm(prev, floor int64) (int64, bool) {
	p := max(prev, floor)
	if p == math.MaxInt64 {
		return 0, false
	}
	return p + 1, true
}

// RecordMetadata is the blob metadata of term t, written by a holder whose
// LeaseDuration is d, on a blob of the given role.
func RecordMetadata(t Term, d time.Duration, role string) map[string]*string {
	number, since, declared := strconv.FormatInt(t.Number, 10), t.Since.Format(time.RFC3339Nano), d.String()
	identity, r := t.Identity, role
	return map[string]*string{MetaIdentity: &identity, MetaTerm: &number, MetaSince: &since, MetaLeaseDuration: &declared, MetaRole: &r}
}

// CreateMetadata is the metadata a blob is created with at time at: its
// role and, if terms were seen on a blob of that name before (it was
// deleted since), the highest of them, floor, as an ended term that the next
// one continues, marked as a blob created again.
func CreateMetadata(role string, floor int64, at time.Time) map[string]*string {
	md := EndedMetadata(role, floor, at)
	if floor > 0 {
		md[MetaRecreated] = md[MetaEnded]
	}
	return md
}

// SeedMetadata is the metadata of a blob created again, at time at, under
// a fleet whose highest term seen was floor (an ended term that the next
// one continues; none if 0), marked as created again, and naming longest
// (if not 0), the longest lease its seeders knew a holder of that term to
// declare: a contender that takes it waits at least that long, so that a
// holder of the deleted lease cut off from storage has stopped (see the
// library's recreated.go).
func SeedMetadata(role string, floor int64, longest time.Duration, at time.Time) map[string]*string {
	md := EndedMetadata(role, floor, at)
	mark := at.UTC().Format(time.RFC3339Nano)
	md[MetaRecreated] = &mark
	if longest > 0 {
		v := longest.String()
		md[MetaLongest] = &v
	}
	return md
}

// EndedMetadata is a record of role (none if "") that says only that term
// number n has ended, at time at (none if n is 0).
func EndedMetadata(role string, n int64, at time.Time) map[string]*string {
	md := map[string]*string{}
	if role != "" {
		r := role
		md[MetaRole] = &r
	}
	if n > 0 {
		num, ended := strconv.FormatInt(n, 10), at.UTC().Format(time.RFC3339Nano)
		md[MetaTerm], md[MetaEnded] = &num, &ended
	}
	return md
}

// Value reads a metadata key case-insensitively ("" if missing).
func Value(md map[string]*string, key string) string {
	for k, v := range md {
		if strings.EqualFold(k, key) && v != nil {
			return *v
		}
	}
	return ""
}
