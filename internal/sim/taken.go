package sim

import "time"

// Taken records that, at t, another writer (not the library) changed the
// lease of blob ("container/name") from ID from to an ID of its own, to:
// the instance that held it no longer does on the fake, which no library
// can prevent (the holder learns of it at its next renewal, or, for a
// shard's lease, which is never renewed, never), and its fuse bounds its
// funcs as for a blob deleted under them. The funcs acting on blob are
// exempt from the lease rule from then on, and so is a func that starts
// while the lease stands under to, if its instance held from (its term
// recorded before the change, the func started after it); every other
// rule (overlap, term, record, recovery) still judges them and the funcs
// after them. Call it before the Lease event of that change. It returns
// how many funcs it exempted.
func (c *Checker) Taken(t time.Time, blob, from, to string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.election(blob)
	if from == e.taken[1] && e.lease.ID == from {
		from = e.taken[0] // changed again: still the first holder's
	}
	e.taken = [2]string{from, to}
	n := 0
	for _, f := range e.acting {
		c.judgeLease(e, f, t, "acted")
		if !f.Exempt {
			f.Exempt = true
			n++
		}
	}
	return n
}

// takenFrom reports whether a func of the instance that owns says starts
// under a lease another writer took from it (see Taken). Under c.mu.
func (e *election) takenFrom(owns func(string) bool) bool {
	return e.taken[1] != "" && e.lease.ID == e.taken[1] && owns(e.taken[0])
}
