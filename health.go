package leaderelection

import (
	"sync"
	"time"
)

// health is what Healthy reads: the state of the current term, if any.
type health struct {
	mu sync.Mutex
	termHealth
	record *RecordError // the lease blob's record, last read, does not read; nil if it does
}

// setRecord notes what the last read of the lease blob's record found
// wrong; nil: nothing.
func (h *health) setRecord(problem *RecordError) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record = problem
}

type termHealth struct {
	leading       bool      // a term's leader func is running
	cancelledAt   time.Time // when that func's context was cancelled; zero if it was not
	cause         error
	leaseEndedAt  time.Time // when its lease context was cancelled: the lease may pass on
	leaseCause    error
	renewFailures time.Time // since when renewals have been failing; zero while they succeed
}

// beginTerm starts a term's record when the lease is taken, before the term
// is written: what happens from then on counts once the func runs.
func (h *health) beginTerm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.termHealth = termHealth{}
}

// funcStarted marks the term's func as running.
func (h *health) funcStarted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leading = true
}

func (h *health) endTerm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.termHealth = termHealth{}
}

func (h *health) snapshot() (termHealth, *RecordError) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.termHealth, h.record
}

func (h *health) cancelled(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancelledAt.IsZero() {
		h.cancelledAt, h.cause = time.Now(), cause
	}
}

func (h *health) leaseEnded(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leaseEndedAt.IsZero() {
		h.leaseEndedAt, h.leaseCause = time.Now(), cause
	}
}

func (h *health) renewResult(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.renewFailures = time.Time{}
	case h.renewFailures.IsZero():
		h.renewFailures = time.Now()
	}
}
