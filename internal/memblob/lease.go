package memblob

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The lease states, as the x-ms-lease-state header and listings spell them.
const (
	stateAvailable = "available"
	stateLeased    = "leased"
	stateExpired   = "expired"
	stateBreaking  = "breaking"
	stateBroken    = "broken"
)

// leaseInfo is a blob's lease, as Azurite keeps it. The state is stored as
// of the last request that looked at it; at reads the state is brought up
// to date first (at), which is how expiry and the end of a break period
// happen: lazily, from the clock, with nothing running in the background.
type leaseInfo struct {
	state    string
	id       string        // kept through expired, breaking and broken
	infinite bool          // a leased lease of duration -1
	duration time.Duration // of a fixed lease, kept when it expires (for renew)
	expiry   time.Time     // of a leased fixed lease
	breakAt  time.Time     // of a breaking lease
}

// at brings the lease up to date at now: a fixed lease expires at its
// expiry instant exactly (Azurite shows no grace period, LEASE-FACTS), a
// breaking lease is broken at the end of its break period.
func (l *leaseInfo) at(now time.Time) {
	switch l.state {
	case "":
		l.state = stateAvailable
	case stateLeased:
		if !l.infinite && !now.Before(l.expiry) {
			*l = leaseInfo{state: stateExpired, id: l.id, duration: l.duration}
		}
	case stateBreaking:
		if !now.Before(l.breakAt) {
			*l = leaseInfo{state: stateBroken, id: l.id}
		}
	}
}

// locked reports the lease status: locked while leased or breaking.
func (l *leaseInfo) locked() bool {
	return l.state == stateLeased || l.state == stateBreaking
}

// status is the x-ms-lease-status of the lease.
func (l *leaseInfo) status() string {
	if l.locked() {
		return "locked"
	}
	return "unlocked"
}

// durationType is the x-ms-lease-duration of the lease: shown only while
// leased, as Azure and Azurite do.
func (l *leaseInfo) durationType() string {
	if l.state != stateLeased {
		return ""
	}
	if l.infinite {
		return "infinite"
	}
	return "fixed"
}

// until is when the lease stops locking the blob if nothing more happens
// (zero when infinite or not locked).
func (l *leaseInfo) until() time.Time {
	switch {
	case l.state == stateLeased && !l.infinite:
		return l.expiry
	case l.state == stateBreaking:
		return l.breakAt
	}
	return time.Time{}
}

// afterWrite is what a successful write (Put Blob, Set Blob Metadata) does
// to the lease: an expired or broken lease is forgotten, and the blob shows
// an available lease, as on Azurite (its BlobWriteLeaseSyncer).
//
// Azure documents the effect for an expired lease: its ID "is maintained
// by the Blob service until the blob is modified or leased again", so that
// a renew with it fails once the blob was written. Whether Azure then
// reports the state as available, as Azurite does, or still as expired or
// broken, is not documented and could not be measured here (no Azure
// account); the contract tests pin Azurite's answer
// ("write-resets-broken-lease", "lease-expiry").
func (l *leaseInfo) afterWrite() {
	if l.state == stateExpired || l.state == stateBroken {
		*l = leaseInfo{state: stateAvailable}
	}
}

// checkWrite applies the lease condition of a write (Put Blob, Set Blob
// Metadata, Delete Blob) presenting the lease ID id ("" for none), as
// Azurite's BlobWriteLeaseValidator does. It reports false after failing
// the call.
//
// Azurite divergence: a lease ID presented to a blob whose lease expired or
// was broken gets 412 LeaseNotPresentWithBlobOperation; Azure answers 412
// LeaseLost there (LEASE-FACTS). Same status, another code.
func (l *leaseInfo) checkWrite(c *call, id string) bool {
	if l.locked() {
		switch {
		case id == "":
			c.fail(http.StatusPreconditionFailed, "LeaseIdMissing")
			return false
		case !strings.EqualFold(id, l.id):
			c.fail(http.StatusPreconditionFailed, "LeaseIdMismatchWithBlobOperation")
			return false
		}
		return true
	}
	if id != "" {
		c.fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation")
		return false
	}
	return true
}

// checkRead applies the lease condition of a read (Get Blob Properties, Get
// Blob) presenting the lease ID id, as Azurite's BlobReadLeaseValidator
// does: none is needed, but one presented must be the lease's.
func (l *leaseInfo) checkRead(c *call, id string) bool {
	if id == "" {
		return true
	}
	if !l.locked() {
		c.fail(http.StatusPreconditionFailed, "LeaseNotPresentWithBlobOperation")
		return false
	}
	if !strings.EqualFold(id, l.id) {
		c.fail(http.StatusPreconditionFailed, "LeaseIdMismatchWithBlobOperation")
		return false
	}
	return true
}

// validDuration reports whether secs is a lease duration Azure accepts:
// 15 to 60 seconds, or -1 for infinite.
func validDuration(secs int) bool {
	return secs == -1 || secs >= 15 && secs <= 60
}

// newLease returns a lease held by id for secs seconds (-1: infinite) from now.
func newLease(id string, secs int, now time.Time) leaseInfo {
	if secs == -1 {
		return leaseInfo{state: stateLeased, id: id, infinite: true}
	}
	d := time.Duration(secs) * time.Second
	return leaseInfo{state: stateLeased, id: id, duration: d, expiry: now.Add(d)}
}

// acquire is Acquire Lease in each state, as Azurite's lease states answer
// it. secs is x-ms-lease-duration, proposed x-ms-proposed-lease-id. It
// reports false after failing the call.
func (s *Service) acquire(c *call, l *leaseInfo, secs int, proposed string) bool {
	switch l.state {
	case stateLeased:
		// Azurite checks the ID before the duration: another's acquire
		// with a bad duration gets 409, not 400. Azure does not document
		// its order.
		//
		// Azurite compares lease IDs in lease actions exactly, case
		// included, and so does the fake (writes and reads compare them
		// without case, see checkWrite). Azure documents lease IDs as
		// GUIDs, which it presumably compares without case: a client
		// should send its lease ID as it was answered. The contract
		// test "lease-id-case" pins Azurite's answers.
		if proposed != l.id {
			c.fail(http.StatusConflict, "LeaseAlreadyPresent")
			return false
		}
	case stateBreaking:
		if proposed == l.id {
			c.fail(http.StatusConflict, "LeaseIsBreakingAndCannotBeAcquired")
		} else {
			c.fail(http.StatusConflict, "LeaseAlreadyPresent")
		}
		return false
	}
	if !validDuration(secs) {
		c.fail(http.StatusBadRequest, "InvalidHeaderValue")
		return false
	}
	// Azurite divergence: Azure requires the proposed lease ID to be a
	// GUID (400 InvalidHeaderValue otherwise); Azurite takes any string,
	// and so does the fake.
	id := proposed
	if id == "" {
		id = s.newLeaseID()
	}
	*l = newLease(id, secs, c.now)
	return true
}

// renew is Renew Lease in each state, as Azurite answers it.
func renew(c *call, l *leaseInfo, id string) bool {
	switch l.state {
	case stateLeased:
		if id != l.id {
			c.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation")
			return false
		}
		if !l.infinite {
			l.expiry = c.now.Add(l.duration)
		}
		return true
	case stateExpired:
		// Azurite divergence: Azurite renews an expired lease whatever
		// ID the renew presents, and the lease it revives keeps its
		// original ID (the answer's x-ms-lease-id shows it). Azure
		// renews an expired lease only for its holder, and only if
		// nobody leased the blob since (409
		// LeaseIdMismatchWithLeaseOperation otherwise). LEASE-FACTS:
		// check that a renew answers with your lease ID.
		*l = leaseInfo{state: stateLeased, id: l.id, duration: l.duration, expiry: c.now.Add(l.duration)}
		return true
	case stateBreaking, stateBroken:
		if id == l.id {
			c.fail(http.StatusConflict, "LeaseIsBrokenAndCannotBeRenewed")
		} else {
			c.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation")
		}
		return false
	}
	// Available: there is no lease to match.
	c.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation")
	return false
}

// release is Release Lease in each state, as Azurite answers it: the
// holder may release in any state but available, even a broken or expired
// lease.
func release(c *call, l *leaseInfo, id string) bool {
	if l.state == stateAvailable || id != l.id {
		c.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation")
		return false
	}
	*l = leaseInfo{state: stateAvailable}
	return true
}

// change is Change Lease in each state, as Azurite answers it. A change
// keeps the lease's expiry; it does not renew it.
func change(c *call, l *leaseInfo, id, proposed string) bool {
	switch l.state {
	case stateLeased:
		// Retrying a change whose answer was lost succeeds: the
		// proposed ID is already the lease's.
		if id != l.id && proposed != l.id {
			c.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation")
			return false
		}
		l.id = proposed
		return true
	case stateBreaking:
		if id == l.id {
			c.fail(http.StatusConflict, "LeaseIsBreakingAndCannotBeChanged")
		} else {
			c.fail(http.StatusConflict, "LeaseIdMismatchWithLeaseOperation")
		}
		return false
	}
	// Available, expired, broken.
	c.fail(http.StatusConflict, "LeaseNotPresentWithLeaseOperation")
	return false
}

// breakLease is Break Lease in each state, as Azurite answers it. period
// is x-ms-lease-break-period in seconds, or nil when the request has none.
// On success it returns the x-ms-lease-time to answer: the seconds left
// before a breaking lease is broken, rounded as JavaScript's Math.round
// does, 0 otherwise.
func breakLease(c *call, l *leaseInfo, period *int) (int, bool) {
	now := c.now
	broken := func() { *l = leaseInfo{state: stateBroken, id: l.id} }
	breaking := func(at time.Time) { *l = leaseInfo{state: stateBreaking, id: l.id, breakAt: at} }
	switch l.state {
	case stateAvailable:
		c.fail(http.StatusConflict, "LeaseNotPresentWithLeaseOperation")
		return 0, false
	case stateLeased:
		switch {
		case l.infinite && (period == nil || *period == 0):
			broken()
		case l.infinite:
			// Azurite divergence: Azurite takes any break period for
			// an infinite lease, even outside 0..60 (Azure answers
			// 400 InvalidHeaderValue to those, as it does for a
			// fixed lease). The contract test
			// "break-period-out-of-range" pins both answers.
			breaking(now.Add(time.Duration(*period) * time.Second))
		case period == nil:
			// A fixed lease breaks when it would have expired.
			breaking(l.expiry)
		case *period == 0:
			broken()
		case *period < 0 || *period > 60:
			c.fail(http.StatusBadRequest, "InvalidHeaderValue")
			return 0, false
		default:
			// A break never lengthens a lease.
			breaking(minTime(l.expiry, now.Add(time.Duration(*period)*time.Second)))
		}
	case stateBreaking:
		switch {
		case period == nil:
		case *period == 0:
			broken()
		case *period > 0 && *period <= 60:
			// A second break may shorten the break period, never
			// lengthen it.
			breaking(minTime(l.breakAt, now.Add(time.Duration(*period)*time.Second)))
		default:
			c.fail(http.StatusBadRequest, "InvalidHeaderValue")
			return 0, false
		}
	case stateExpired:
		broken()
	case stateBroken:
		// Breaking a broken lease changes nothing and succeeds.
	}
	if l.state != stateBreaking {
		return 0, true
	}
	// The state is as stored, not brought up to date: a break period
	// already over (a negative one, which Azurite takes for an infinite
	// lease) answers a negative time, as Azurite does.
	return int(math.Floor(l.breakAt.Sub(now).Seconds() + 0.5)), true
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// leaseOp serves the five lease actions on a blob (PUT ?comp=lease).
func (s *Service) leaseOp(c *call) {
	_, b, ok := s.locate(c)
	if !ok {
		return
	}
	if !checkWriteConditions(c, b) {
		b.report(c)
		return
	}
	if b == nil {
		c.fail(http.StatusNotFound, "BlobNotFound")
		return
	}
	defer b.report(c)
	id := c.get("x-ms-lease-id")
	proposed := c.get("x-ms-proposed-lease-id")
	l := &b.lease
	switch c.op {
	case OpAcquire:
		secs, ok := intHeader(c, "x-ms-lease-duration", true)
		if !ok || !s.acquire(c, l, secs, proposed) {
			return
		}
		hh := c.ok(http.StatusCreated)
		hh.Set("X-Ms-Lease-Id", l.id)
	case OpRenew:
		if !requireHeader(c, "x-ms-lease-id") || !renew(c, l, id) {
			return
		}
		hh := c.ok(http.StatusOK)
		hh.Set("X-Ms-Lease-Id", l.id)
	case OpRelease:
		if !requireHeader(c, "x-ms-lease-id") || !release(c, l, id) {
			return
		}
		c.ok(http.StatusOK)
	case OpChange:
		if !requireHeader(c, "x-ms-lease-id") || !requireHeader(c, "x-ms-proposed-lease-id") ||
			!change(c, l, id, proposed) {
			return
		}
		hh := c.ok(http.StatusOK)
		hh.Set("X-Ms-Lease-Id", l.id)
	case OpBreak:
		var period *int
		if c.get("x-ms-lease-break-period") != "" {
			p, ok := intHeader(c, "x-ms-lease-break-period", false)
			if !ok {
				return
			}
			period = &p
		}
		left, ok := breakLease(c, l, period)
		if !ok {
			return
		}
		hh := c.ok(http.StatusAccepted)
		hh.Set("X-Ms-Lease-Time", strconv.Itoa(left))
	}
	// Lease operations answer the blob's ETag and Last-Modified, which
	// they do not change (LEASE-FACTS).
	c.header.Set("Etag", quote(b.etag))
	c.header.Set("Last-Modified", httpTime(b.lastModified))
}

// intHeader parses the integer header name. A missing header is 400
// MissingRequiredHeader when required; a value that is not an integer is
// 400 InvalidHeaderValue.
func intHeader(c *call, name string, required bool) (int, bool) {
	v := c.get(name)
	if v == "" && required {
		c.fail(http.StatusBadRequest, "MissingRequiredHeader")
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		c.fail(http.StatusBadRequest, "InvalidHeaderValue")
		return 0, false
	}
	return n, true
}

// requireHeader fails the call with 400 MissingRequiredHeader when the
// header name is missing.
func requireHeader(c *call, name string) bool {
	if c.get(name) == "" {
		c.fail(http.StatusBadRequest, "MissingRequiredHeader")
		return false
	}
	return true
}
