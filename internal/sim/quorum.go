package sim

import "time"

// A quorum's election (the root's NewQuorumMutex): its funcs run under
// the lease on a majority of K accounts' blobs, not on one blob. The rules
// overlap and term judge it as any election; record judges each account's
// blob on its own (each is an election of the checker that no func runs
// under); and lease becomes the quorum's (see Quorum).

// quorum is a quorum's election: its accounts' blobs, and how many of
// them its funcs need.
type quorum struct {
	accounts []string
	need     int
}

// Quorum makes election a quorum's, over the accounts' blobs (each
// "container/name"), of which its funcs need need: from its start until
// it returns, a func acts while, of the accounts, at least need hold a
// lease under an ID of its instance's (owns) that stands, counting as held
// an account whose blob was deleted while it acted or within DeleteGrace
// before its start (the library cannot prevent that end: its renewal
// there fails, and it stops if fewer than need are left). This is the
// argument of quorum.go's Q1: until the need-th latest confirmation's
// lease ends, need accounts are the leader's. Call it before the first
// step.
func (c *Checker) Quorum(election string, accounts []string, need int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quorums == nil {
		c.quorums, c.accountOf = map[string]*quorum{}, map[string]string{}
	}
	c.quorums[election] = &quorum{accounts: accounts, need: need}
	for _, a := range accounts {
		c.accountOf[a] = election
	}
}

// judgeQuorum checks, at t, that f (a quorum's func) holds a majority of
// its accounts, and says so once if not.
func (c *Checker) judgeQuorum(q *quorum, f *Func, t time.Time, what string) {
	if f.Exempt {
		return
	}
	held := 0
	for _, a := range q.accounts {
		e := c.election(a)
		deleted := !e.deleted.IsZero() && !e.deleted.Before(f.Start.Add(-c.DeleteGrace))
		if deleted || e.lease.held(e.lease.ID, t) && f.owns != nil && f.owns(e.lease.ID) {
			held++
		}
	}
	if held < q.need {
		c.violate(t, "lease", "%s: %s's func (term %d) %s at %s holding the lease on %d of its %d accounts, not a majority (%d)",
			f.Election, f.Instance, f.Term, what, t.Format("15:04:05.000"), held, len(q.accounts), q.need)
		f.Exempt = true // said once
	}
}

// judgeAccount judges the funcs acting on the quorum whose account blob
// is, if any.
func (c *Checker) judgeAccount(blob string, t time.Time) {
	name, ok := c.accountOf[blob]
	if !ok {
		return
	}
	q := c.quorums[name]
	for _, f := range c.election(name).acting {
		c.judgeQuorum(q, f, t, "acted")
	}
}
