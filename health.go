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
}

type termHealth struct {
	leading       bool      // a term's leader func is running
	cancelledAt   time.Time // when that func's context was cancelled; zero if it was not
	cause         error
	renewFailures time.Time // since when renewals have been failing; zero while they succeed
}

func (h *health) startTerm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.termHealth = termHealth{leading: true}
}

func (h *health) endTerm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.termHealth = termHealth{}
}

func (h *health) snapshot() termHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.termHealth
}

func (h *health) cancelled(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leading && h.cancelledAt.IsZero() {
		h.cancelledAt, h.cause = time.Now(), cause
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
//   - it leads in name but its leader func is still running StopMargin after
//     its context was cancelled (at that point the lease may expire, and
//     another instance lead, while it still acts);
//   - its func has stalled (see [WithStallTimeout]) and not yet returned;
//   - it leads and its renewals have been failing for longer than
//     (LeaseDuration - StopMargin)/2 (6 s by default).
//
// It makes no network call. A follower that cannot reach storage is healthy:
// restarting it would not help.
func (m *BlobDistributedMutex) Healthy() error {
	s := m.lease.settings
	h := m.health.snapshot()
	if !h.leading {
		return nil
	}
	if !h.cancelledAt.IsZero() {
		if late := time.Since(h.cancelledAt); late > s.StopMargin {
			return fmt.Errorf("leaderelection: leader func still running %v after its context was cancelled (%v)", late.Round(time.Millisecond), h.cause)
		}
		if errors.Is(h.cause, ErrStalled) {
			return fmt.Errorf("leaderelection: leader func stalled: %v", h.cause)
		}
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
