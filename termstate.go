package leaderelection

import (
	"context"
	"sync/atomic"
	"time"
)

// What a term's func finds in its context: the term, its lease context, its
// heartbeat (see the top of renew.go for the two stages of a stop).

// termState is what a leader func's context carries.
type termState struct {
	// term and beatBase are written once, before started is set.
	term     Term
	beatBase time.Time    // when the func started
	lastBeat atomic.Int64 // nanoseconds after beatBase of the last heartbeat
	started  atomic.Bool
	lease    context.Context // see LeaseContext; set before the func starts
	fuse     *safetyFuse     // the term's deadline; set before the func starts
}

// start records the term and marks the func as started: from now on the
// renewal loop checks for stalls.
func (s *termState) start(t Term) {
	s.term, s.beatBase = t, time.Now()
	s.started.Store(true)
}

func (s *termState) sinceBeat() time.Duration {
	return time.Since(s.beatBase) - time.Duration(s.lastBeat.Load())
}

type termKey struct{}

// TermFromContext returns the term of the leader func whose context ctx is
// (or derives from), and false for any other context.
func TermFromContext(ctx context.Context) (Term, bool) {
	s, ok := ctx.Value(termKey{}).(*termState)
	if !ok {
		return Term{}, false
	}
	return s.term, true
}

// LeaseContext returns the context of the lease that the leader func whose
// context ctx is (or derives from) runs under. Unlike ctx, it is not
// cancelled when the caller's context is, or when the func stalls: those
// ask the func to stop while the lease is still ours, and it is renewed
// until the func returns. It is cancelled only when the lease may pass to
// another instance: the lease was lost, it could not be renewed before its
// safety deadline, storage refused a renewal for good, or the func has
// returned. Its [context.Cause] says which. It carries the term too.
//
// A func that returns promptly when ctx is done need not use it. A func that
// winds down after ctx is done (drains a queue, hands work off) must stop
// acting within StopMargin of LeaseContext(ctx) being done: after that
// another instance may lead. For a context that is not a leader func's, it
// returns ctx.
func LeaseContext(ctx context.Context) context.Context {
	if s, ok := ctx.Value(termKey{}).(*termState); ok && s.lease != nil {
		return s.lease
	}
	return ctx
}

// Heartbeat tells the mutex that the leader func whose context ctx is, is
// still making progress. It matters only with [WithStallTimeout]: a leader
// that does not call it within the stall timeout is considered stalled, stops
// renewing, and has its context cancelled with [ErrStalled]. It is cheap (an
// atomic store) and does nothing for a context that is not a leader's.
func Heartbeat(ctx context.Context) {
	if s, ok := ctx.Value(termKey{}).(*termState); ok {
		s.lastBeat.Store(int64(time.Since(s.beatBase)))
	}
}
