package leaderelection

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// Term is one period of leadership.
type Term struct {
	// Number is the fencing token: strictly greater than every earlier
	// term's on the same blob, across all instances, restarts and lease
	// breaks, and across the blob's deletion while an instance that saw its
	// terms runs (see the README on what survives the loss of the blob). A
	// downstream system that
	// remembers the highest number it has seen, and rejects writes carrying
	// a lower one, cannot be written to by a leader that was superseded.
	Number int64
	// Identity is the leader's identity (see [WithIdentity]).
	Identity string
	// LeaseID is the lease ID the leader holds.
	LeaseID string
	// Since is when the leader took the lease, by its wall clock, in UTC.
	Since time.Time
}

// String describes t for a log line, without its lease ID: whoever holds a
// lease's ID can renew, release or write under it as if it were the holder.
func (t Term) String() string {
	s := fmt.Sprintf("Term{%d Identity:%q", t.Number, t.Identity)
	if !t.Since.IsZero() {
		s += " Since:" + formatEventTime(t.Since)
	}
	return s + "}"
}

// GoString, Format and LogValue print String, so that no verb and no
// log/slog handler prints the lease ID.
func (t Term) GoString() string              { return t.String() }
func (t Term) Format(f fmt.State, verb rune) { printRedacted(f, verb, t.String()) }
func (t Term) LogValue() slog.Value          { return slog.StringValue(t.String()) }

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

// defaultIdentity is readable and unique per process: host name, process ID
// and a short random suffix (two processes may share a host name and a PID,
// in containers).
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// checkIdentity keeps identities to what blob metadata values carry
// unchanged. Metadata travels in HTTP headers, whose values lose leading and
// trailing spaces on the way (Go's client trims them): with an account key
// the write is then refused (the SDK signed the untrimmed value), with a SAS
// the stored identity silently differs from ours. Inner runs of spaces are
// kept as they are (measured on Azurite, with a key and with a SAS).
func checkIdentity(id string) error {
	if carriesSecret(id) {
		// Identities go into every log line and record.
		return errors.New("leaderelection: identity looks like a connection string or a SAS URL " + secretUnshown)
	}
	if id == "" || len(id) > 256 {
		return fmt.Errorf("leaderelection: identity must be 1 to 256 characters, got %d", len(id))
	}
	for _, r := range id {
		if r < 0x20 || r > 0x7e {
			return fmt.Errorf("leaderelection: identity must be printable ASCII (it is stored in blob metadata), got %s", shown(id))
		}
	}
	if id[0] == ' ' || id[len(id)-1] == ' ' {
		return fmt.Errorf("leaderelection: identity must not begin or end with a space (HTTP trims it from the blob metadata, so the stored identity would not be ours), got %s", shown(id))
	}
	return nil
}
