package leaderelection

import (
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/blobelect/leaderelection/internal/balance"
)

// membership is what this instance runs and where it stands: the set of
// shards (and the one before the last change), its session, and its share
// among the live sessions by the last balance. Guarded by ownerState.mu:
// its methods are called under it, by ownerState's (ownerstate.go), which
// take it.
type membership struct {
	set      map[string]bool // the shards to run
	digest   string          // set's digest (see balance.SetDigest), which the session's record carries
	previous setID           // the set before the last change (see balance)
	setAt    time.Time       // when the set last changed
	current  *session
	target   int
	live     int
}

// setShards makes set, whose digest is digest, the set to run (SetShards),
// keeping the one before if it differs. Called under ownerState.mu.
func (m *membership) setShards(set map[string]bool, digest string) {
	if digest != m.digest {
		m.previous, m.setAt = setID{m.digest, len(m.set)}, time.Now()
	}
	m.set, m.digest = set, digest
}

// shards is the set, sorted. Called under ownerState.mu.
func (m *membership) shards() []string {
	out := make([]string, 0, len(m.set))
	for n := range m.set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// setCopy is a copy of the set. Called under ownerState.mu.
func (m *membership) setCopy() map[string]bool {
	set := make(map[string]bool, len(m.set))
	for n := range m.set {
		set[n] = true
	}
	return set
}

// setSummary is the set's digest and size, which the session's record
// carries. Called under ownerState.mu.
func (m *membership) setSummary() (digest string, size int) {
	return m.digest, len(m.set)
}

// size is how many shards the set has. Called under ownerState.mu.
func (m *membership) size() int { return len(m.set) }

// names is the shards of the set, in no order. Called under ownerState.mu,
// and ranged over under it.
func (m *membership) names() iter.Seq[string] { return maps.Keys(m.set) }

// inSet reports whether name is in the set. Called under ownerState.mu.
func (m *membership) inSet(name string) bool { return m.set[name] }

// whichInSet is those of names in the set. Called under ownerState.mu.
func (m *membership) whichInSet(names []string) map[string]bool {
	in := map[string]bool{}
	for _, name := range names {
		if m.set[name] {
			in[name] = true
		}
	}
	return in
}

// sessionID is the current session's ID, "" between sessions. Called
// under ownerState.mu.
func (m *membership) sessionID() string {
	if m.current == nil {
		return ""
	}
	return m.current.id
}

// setCurrent makes s the current session, nil for none. Called under
// ownerState.mu.
func (m *membership) setCurrent(s *session) { m.current = s }

// currentSession is the current session, nil between sessions. Called
// under ownerState.mu.
func (m *membership) currentSession() *session { return m.current }

// share is this instance's share by the last tally. Called under
// ownerState.mu.
func (m *membership) share() int { return m.target }

// tallied is what tally reads of the set and of what this instance holds,
// under one lock with the share it sets.
type tallied struct {
	n        int
	digest   string
	sets     []setID     // the sets this session's group runs: its own, and the one before if it changed within the window
	changing bool        // the set changed within the window
	own      int         // shards it holds and keeps, and claims in flight
	mine     sessionView // the session's group: the sessions of view that run one of sets
}

// tally reads the set, and the set before it if it changed within window
// (see shardManager.tally); and sets its share among its group of view
// (the sessions that run one of those sets) and the live sessions' count.
// It leaves own to its caller (ownerState.tally). Called under
// ownerState.mu.
func (m *membership) tally(view sessionView, self string, window time.Duration) tallied {
	t := tallied{n: len(m.set), digest: m.digest}
	t.sets = []setID{{t.digest, t.n}}
	t.changing = time.Since(m.setAt) < window
	if t.changing {
		t.sets = append(t.sets, m.previous)
	}
	t.mine = view.group(self, t.sets...)
	m.target, m.live = balance.FairShare(t.n, t.mine.live, self), len(view.live)
	return t
}

// gauges is what the metrics' callback observes: this instance's share, the
// live sessions, and how many of the ownerless shards (seen) are in the set,
// as of when. Called under ownerState.mu; it takes seen's lock.
func (m *membership) gauges(seen *ownerless) (target, live, unowned int, listed time.Time) {
	unowned, listed = seen.count(m.set)
	return m.target, m.live, unowned, listed
}
