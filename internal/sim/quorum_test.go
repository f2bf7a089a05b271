package sim

import (
	"slices"
	"testing"
)

// A quorum's func acts while a majority of its accounts' leases are its
// instance's: one account lost is nothing, a second is a violation; an
// account whose container was deleted under it counts as held.
func TestAQuorumFuncNeedsAMajorityOfItsAccounts(t *testing.T) {
	accounts := []string{"a0/b", "a1/b", "a2/b"}
	owns := func(id string) bool { return slices.Contains([]string{"x0", "x1", "x2"}, id) }
	start := func(c *Checker, ids ...string) int {
		c.Quorum("q/b", accounts, 2)
		for i, id := range ids {
			c.Lease(leased(0, accounts[i], id, 15))
		}
		return c.Start(at(1), "q/b", "A", 1, owns)
	}

	c := NewChecker()
	f := start(c, "x0", "x1", "y2") // a2 another's: 2 of 3
	c.Lease(leased(5, "a0/b", "x0", 20))
	c.End(at(10), f)
	if r := rules(c); len(r) != 0 {
		t.Fatalf("2 of 3 held: violations %v", r)
	}

	c = NewChecker()
	f = start(c, "x0", "x1", "x2")
	c.Lease(leased(5, "a1/b", "y1", 25)) // taken by another
	c.Lease(leased(6, "a2/b", "y2", 25))
	c.End(at(7), f)
	if r := rules(c); !slices.Equal(r, []string{"lease"}) {
		t.Fatalf("1 of 3 held: violations %v, want one lease", r)
	}

	c = NewChecker()
	f = start(c, "x0", "x1", "y2")
	c.End(at(16), f) // both leases expired at 15
	if r := rules(c); !slices.Equal(r, []string{"lease"}) {
		t.Fatalf("returned after its majority expired: violations %v, want one lease", r)
	}

	c = NewChecker()
	f = start(c, "x0", "x1", "y2")
	c.Lease(LeaseEvent{Time: at(5), Blob: "a1/", Op: "delete", State: Gone}) // a1's container deleted
	c.Lease(leased(6, "a0/b", "x0", 21))
	c.End(at(10), f)
	if r := rules(c); len(r) != 0 {
		t.Fatalf("an account deleted under it: violations %v", r)
	}
}
