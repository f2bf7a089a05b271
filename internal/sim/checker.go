// Package sim holds the pure parts of the fault simulator (the root's
// sim_test.go drives it): the checker, which judges a recorded history of
// func starts and ends, their terms and the fake service's lease events;
// the fault plan drawn from a seed; and the report. It imports nothing of
// the library, so that each part is tested on its own.
package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Lease states as the fake reports them (Azure's x-ms-lease-state), and
// Gone for a blob that does not exist.
const (
	Available = "available"
	Leased    = "leased"
	Expired   = "expired"
	Breaking  = "breaking"
	Broken    = "broken"
	Gone      = ""
)

// LeaseEvent is what the fake service says about a blob after it applied
// (or refused) a request, or after an admin change: the blob's lease as it
// then stands. Every request on a blob reports its state, so a lease's
// lazy expiry shows at the next request that touches it.
type LeaseEvent struct {
	Time   time.Time
	Blob   string // "container/name"; for a container's deletion, "container/"
	Op     string // what the request was: acquire, renew, delete, ...
	Admin  bool   // a change made by hand (a fault), not by a request
	State  string // one of the states above; Gone when the blob does not exist
	ID     string // the lease's ID in every state but Available and Gone
	Expiry time.Time
	// Expiry is when a fixed lease expires, or a breaking lease is broken;
	// zero for an infinite lease and for a blob not locked.
}

// held reports whether the lease stands at t under id.
func (e LeaseEvent) held(id string, t time.Time) bool {
	switch {
	case e.ID != id:
		return false
	case e.State == Leased || e.State == Breaking:
		return e.Expiry.IsZero() || !t.After(e.Expiry)
	}
	return false
}

// Func is one run of a leader func (a mutex's, or a shard's), as the
// checker knows it.
type Func struct {
	ID       int
	Election string // the blob it runs under, "container/name"
	Instance string
	Term     int64
	Start    time.Time
	End      time.Time // zero while it acts
	LeaseID  string    // the lease it started under, on the fake
	// Exempt is set when its blob was deleted under it: a lease's end that
	// the library cannot prevent (renew.go), after which the func runs on
	// until its fuse; only the overlap rule judges it from then on.
	Exempt bool
	owns   func(leaseID string) bool // its instance's lease IDs (a quorum's func: see Quorum)
}

// Violation is a broken promise, with what the checker saw.
type Violation struct {
	Time time.Time
	Rule string // "overlap", "term", "lease", "recovery"
	Text string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s at %s: %s", v.Rule, v.Time.Format("15:04:05.000"), v.Text)
}

// Checker judges a history as it is recorded, one step at a time: every
// call is a step, and the history's order (each call under one lock) is
// the order in which things happened, consistent with the fake's clock
// (the bubble's time.Now). Its rules, per election (a mutex's blob, a
// shard's blob):
//
//   - overlap: no func starts while another func of its election acts; a
//     func acts from its start until it returns (a crashed instance's
//     funcs too: the conservative count).
//   - term: each func's term is above every term seen before on its
//     election, across the whole run.
//   - lease: a func starts while the fake holds a lease on its blob under
//     an ID of its instance's, and that lease stands (not released,
//     broken, changed, expired) for as long as the func acts; a lease
//     ended by a deletion of the blob or its container exempts the func
//     (the library cannot prevent that end, and its fuse stops the func).
//   - record: each term record the fake stores on an election's blob (a
//     record that names a holder and carries no end mark) names a term
//     above every term recorded there before, or the very term last
//     recorded, for the same holder (a renewal): a term's number never
//     goes to two holders, even one that never ran (see Record).
//   - recovery: each election the driver expects to run has a func acting
//     within its bound of a moment the driver names (see CheckRecovery).
type Checker struct {
	mu         sync.Mutex
	elections  map[string]*election
	funcs      []*Func
	violations []Violation
	limit      int // violations kept (the first ones)
	dropped    int

	// DeleteGrace is how long after a deletion of its blob (or container)
	// a func may still start without a lease of its own on the fake (none,
	// or another's on the blob created again: another writer's, say): one
	// whose term was recorded before the deletion (Record), which the
	// library cannot know of (its fuse bounds it, as for a func running at
	// the deletion; a func of another instance's beside it is still an
	// overlap); a func of any other term is judged by the lease rule.
	// Set it before the first step: the longest LeaseDuration.
	DeleteGrace time.Duration

	quorums   map[string]*quorum // a quorum's election -> its accounts (see Quorum)
	accountOf map[string]string  // an account's blob -> its quorum's election
}

type election struct {
	acting  []*Func
	maxTerm int64
	maxBy   string // the instance that ran it
	lease   LeaseEvent
	deleted time.Time // the blob's last deletion, by itself or with its container
	// lastActive is when a func of the election last acted: now, if one
	// acts (see active), else the end of the last one.
	lastActive time.Time
	recTerm    int64     // the highest term recorded on its blob
	recBy      string    // for whom
	taken      [2]string // the lease IDs another writer last changed its lease from and to (see Taken)
	// recorded is when each term was first recorded on its blob (see
	// DeleteGrace).
	recorded map[int64]time.Time
}

// NewChecker returns an empty checker that keeps the first 100
// violations (and counts the rest).
func NewChecker() *Checker {
	return &Checker{elections: map[string]*election{}, limit: 100}
}

func (c *Checker) election(name string) *election {
	e := c.elections[name]
	if e == nil {
		e = &election{lease: LeaseEvent{Blob: name, State: Gone}}
		c.elections[name] = e
	}
	return e
}

func (c *Checker) violate(t time.Time, rule, format string, args ...any) {
	if len(c.violations) >= c.limit {
		c.dropped++
		return
	}
	c.violations = append(c.violations, Violation{Time: t, Rule: rule, Text: fmt.Sprintf(format, args...)})
}

// Start records that instance's func for election started at t under
// term, and judges it; owns says which lease IDs are its instance's. It
// returns the func's ID for End.
func (c *Checker) Start(t time.Time, election, instance string, term int64, owns func(leaseID string) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.election(election)
	f := &Func{ID: len(c.funcs), Election: election, Instance: instance, Term: term, Start: t, LeaseID: e.lease.ID, owns: owns}
	c.funcs = append(c.funcs, f)
	for _, o := range e.acting {
		c.violate(t, "overlap", "%s: %s's func (term %d) started while %s's (term %d, since %s) acts",
			election, instance, term, o.Instance, o.Term, o.Start.Format("15:04:05.000"))
	}
	if term <= e.maxTerm {
		c.violate(t, "term", "%s: %s's func started under term %d, not above term %d (%s's)",
			election, instance, term, e.maxTerm, e.maxBy)
	} else {
		e.maxTerm, e.maxBy = term, instance
	}
	if q, ok := c.quorums[election]; ok {
		c.judgeQuorum(q, f, t, "started")
	} else if rec, ok := e.recorded[term]; ok && !e.deleted.IsZero() && !rec.After(e.deleted) && t.Sub(e.deleted) <= c.DeleteGrace && !(e.lease.held(e.lease.ID, t) && owns(e.lease.ID)) || e.takenFrom(owns) {
		f.Exempt = true
	} else if !e.lease.held(e.lease.ID, t) || !owns(e.lease.ID) {
		c.violate(t, "lease", "%s: %s's func (term %d) started while the fake's lease is %s under %q (expiry %s), not a lease of its own",
			election, instance, term, stateName(e.lease.State), e.lease.ID, fmtTime(e.lease.Expiry))
	}
	e.acting = append(e.acting, f)
	e.lastActive = t
	return f.ID
}

// End records that func id returned at t.
func (c *Checker) End(t time.Time, id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.funcs[id]
	f.End = t
	e := c.election(f.Election)
	if q, ok := c.quorums[f.Election]; ok {
		c.judgeQuorum(q, f, t, "returned")
	} else {
		c.judgeLease(e, f, t, "returned")
	}
	e.acting = slices.DeleteFunc(e.acting, func(o *Func) bool { return o == f })
	e.lastActive = t
}

// judgeLease checks that f's lease stood until t.
func (c *Checker) judgeLease(e *election, f *Func, t time.Time, what string) {
	if f.Exempt || e.lease.held(f.LeaseID, t) {
		return
	}
	if e.lease.ID == f.LeaseID && (e.lease.State == Leased || e.lease.State == Breaking) {
		c.violate(t, "lease", "%s: %s's func (term %d) %s at %s, after its lease expired at %s",
			f.Election, f.Instance, f.Term, what, t.Format("15:04:05.000"), fmtTime(e.lease.Expiry))
		f.Exempt = true // said once
		return
	}
	c.violate(t, "lease", "%s: %s's func (term %d) %s at %s while the fake's lease is %s under %q, not the %q it started under",
		f.Election, f.Instance, f.Term, what, t.Format("15:04:05.000"), stateName(e.lease.State), e.lease.ID, f.LeaseID)
	f.Exempt = true
}

// Lease records what the fake says of a blob after a request or an admin
// change, and judges the funcs acting on it.
func (c *Checker) Lease(ev LeaseEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if container, ok := containerOf(ev.Blob); ok {
		// A container's deletion: every blob in it is gone.
		if ev.State != Gone {
			return
		}
		for name, e := range c.elections {
			if inContainer(name, container) && e.lease.State != Gone {
				c.gone(e, ev)
				c.judgeAccount(name, ev.Time)
			}
		}
		return
	}
	e := c.election(ev.Blob)
	if ev.State == Gone {
		if e.lease.State != Gone {
			c.gone(e, ev)
			c.judgeAccount(ev.Blob, ev.Time)
		}
		return
	}
	c.judgeAccount(ev.Blob, ev.Time) // the lease as last seen, perhaps expired since
	for _, f := range e.acting {
		// Before this request, the lease stood (or not) as last seen; a
		// fixed lease may have expired since, unseen.
		c.judgeLease(e, f, ev.Time, "acted")
	}
	e.lease = ev
	for _, f := range e.acting {
		c.judgeLease(e, f, ev.Time, "acted")
	}
	c.judgeAccount(ev.Blob, ev.Time)
}

// gone records a blob's deletion: the funcs acting on it are exempt from
// the lease rule from now on.
func (c *Checker) gone(e *election, ev LeaseEvent) {
	for _, f := range e.acting {
		c.judgeLease(e, f, ev.Time, "acted")
		f.Exempt = true
	}
	e.deleted = ev.Time
	e.lease = LeaseEvent{Time: ev.Time, Blob: e.lease.Blob, State: Gone}
}

// Record records that the fake stored, at t, a term record on election's
// blob: term number for holder (who the record names: its identity, and
// for a shard the session), and judges it (the rule "record"). The driver
// calls it for records that name a holder and carry no end mark: seeds,
// end marks and repairs name no new term.
func (c *Checker) Record(t time.Time, election string, term int64, holder string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.election(election)
	if _, ok := e.recorded[term]; !ok {
		if e.recorded == nil {
			e.recorded = map[int64]time.Time{}
		}
		e.recorded[term] = t
	}
	switch {
	case term > e.recTerm:
		e.recTerm, e.recBy = term, holder
	case term == e.recTerm && holder == e.recBy:
	default:
		c.violate(t, "record", "%s: term %d recorded for %s, not above term %d recorded for %s",
			election, term, holder, e.recTerm, e.recBy)
	}
}

// Acting reports whether a func of election acts now.
func (c *Checker) Acting(election string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.elections[election]
	return e != nil && len(e.acting) > 0
}

// ActedSince reports whether a func of election acted at some moment from
// since on (one acts now, or one ended at since or later).
func (c *Checker) ActedSince(election string, since time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.elections[election]
	return e != nil && (len(e.acting) > 0 || !e.lastActive.Before(since))
}

// Recovery is the rule that an election runs again after faults: checked
// at now, a func of Election must have acted since From + Bound, or
// rather at some moment in [From, From+Bound]: the driver calls
// CheckRecovery at From + Bound.
type Recovery struct {
	Election string
	From     time.Time
	Bound    time.Duration
	Why      string // what the bound is made of, for the violation's text
}

// CheckRecovery judges r at now (From + Bound, or later): a violation if
// no func of its election acted from r.From to now.
func (c *Checker) CheckRecovery(now time.Time, r Recovery) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.elections[r.Election]
	if e != nil && (len(e.acting) > 0 || !e.lastActive.Before(r.From)) {
		return true
	}
	c.violate(now, "recovery", "%s: no func ran within %v of %s (%s)", r.Election, r.Bound, r.From.Format("15:04:05.000"), r.Why)
	return false
}

// Violations returns the violations so far (the first ones kept), and how
// many more there were.
func (c *Checker) Violations() ([]Violation, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations), c.dropped
}

// Funcs returns a copy of every func recorded.
func (c *Checker) Funcs() []Func {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Func, len(c.funcs))
	for i, f := range c.funcs {
		out[i] = *f
	}
	return out
}

// MaxTerm is the highest term of election the fleet saw (0: none): the
// highest a func ran under, or that a record on its blob named, whether
// its func ran or not (a term recorded, whose answer was lost, then made
// malformed, has a holder that saw it).
func (c *Checker) MaxTerm(election string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.elections[election]; e != nil {
		return max(e.maxTerm, e.recTerm)
	}
	return 0
}

// containerOf says whether blob names a container ("container/").
func containerOf(blob string) (string, bool) {
	if n := len(blob); n > 0 && blob[n-1] == '/' {
		return blob[:n-1], true
	}
	return "", false
}

func inContainer(blob, container string) bool {
	return len(blob) > len(container) && blob[:len(container)] == container && blob[len(container)] == '/'
}

func stateName(s string) string {
	if s == Gone {
		return "gone"
	}
	return s
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.Format("15:04:05.000")
}

// FirstActing is the first moment from from on at which a func of election
// acted (from itself, if one acted then), and false if none has.
func (c *Checker) FirstActing(election string, from time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, f := range c.funcs {
		if f.Election != election || (!f.End.IsZero() && f.End.Before(from)) {
			continue
		}
		at := f.Start
		if at.Before(from) {
			at = from
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}
