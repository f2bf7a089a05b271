package leaderelection

import (
	"errors"
	"fmt"
	"net/http"
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

// Healthy reports nil while this instance is a healthy leader or follower,
// and an error saying why otherwise:
//   - its leader func is still running StopMargin after its lease context
//     was cancelled (see [LeaseContext]): the lease may have passed to
//     another instance while it still acts;
//   - its func has stalled (see [WithStallTimeout]) and not yet returned;
//   - it leads and its renewals have been failing for longer than
//     (LeaseDuration - StopMargin)/2 (6 s by default);
//   - it follows, and the lease blob's record, last read, does not read
//     (a [*RecordError]: a value another writer put there, or a blob of
//     another role): no term can be recorded over it until it is repaired,
//     and the error names the blob, the key and the value.
//
// A func winding down after the caller cancelled its context, however long,
// is healthy while the lease is renewed: it is shutting down as designed. It
// makes no network call. A follower that cannot reach storage is healthy:
// restarting it would not help.
func (m *BlobDistributedMutex) Healthy() error {
	s := m.lease.settings
	h, record := m.health.snapshot()
	if !h.leading {
		if record != nil {
			return fmt.Errorf("leaderelection: the lease blob's record does not read, and is not trusted (repair it: leaderctl repair): %w", record)
		}
		return nil
	}
	if !h.leaseEndedAt.IsZero() {
		if late := time.Since(h.leaseEndedAt); late > s.StopMargin {
			return fmt.Errorf("leaderelection: leader func still running %v after its lease context was cancelled (%v): another instance may lead", late.Round(time.Millisecond), h.leaseCause)
		}
	}
	if errors.Is(h.cause, ErrStalled) {
		return fmt.Errorf("leaderelection: leader func stalled: %v", h.cause)
	}
	if !h.renewFailures.IsZero() {
		if failing := time.Since(h.renewFailures); failing > (s.LeaseDuration-s.StopMargin)/2 {
			return fmt.Errorf("leaderelection: lease renewals failing for %v", failing.Round(time.Millisecond))
		}
	}
	return nil
}

// HealthHandler serves [BlobDistributedMutex.Healthy] over HTTP, for a
// Kubernetes liveness probe: 200 "ok", or 503 with the reason.
func (m *BlobDistributedMutex) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := m.Healthy(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
