package leaderelection

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// EventKind says what happened.
type EventKind int

const (
	// StartedLeading: this instance took the lease and recorded its term;
	// its leader func is about to start.
	StartedLeading EventKind = iota + 1
	// StoppedLeading: this instance's leader func has returned and the
	// lease has been released (or lost). Reported only after StartedLeading.
	StoppedLeading
	// NewLeaderObserved: while following, this instance saw another
	// instance lead with a term it had not seen before.
	NewLeaderObserved
	// SilentLeaseBroken: while following, this instance broke an
	// [ETagLease] whose ETag had stood unchanged for the lease duration its
	// holder declared (see [BlobLeaseManager.BreakWhenSilent]): the holder
	// crashed or was cut off from storage. Term is the record that ETag
	// carried: the silent holder's, or an earlier leader's if the holder
	// died before its first write. This instance tries to take the lease
	// next.
	SilentLeaseBroken
	// SessionStarted: a [ShardOwner] started a session (Session is its ID,
	// Term its record): it may now claim shards.
	SessionStarted
	// SessionEnded: a [ShardOwner]'s session ended, after every shard func
	// it ran had returned; Reason and Err say why. A session never
	// revives: the owner starts a new one unless its caller cancelled.
	SessionEnded
)

func (k EventKind) String() string {
	switch k {
	case StartedLeading:
		return "started leading"
	case StoppedLeading:
		return "stopped leading"
	case NewLeaderObserved:
		return "new leader observed"
	case SilentLeaseBroken:
		return "silent lease broken"
	case SessionStarted:
		return "session started"
	case SessionEnded:
		return "session ended"
	}
	return "unknown event"
}

// StopReason says why a term ended.
type StopReason string

// The ways a term ends.
const (
	ReasonCallerCancelled StopReason = "caller cancelled"                // the context passed to RunTaskWhenMutexAcquired
	ReasonLeaseLost       StopReason = "lease lost"                      // released, broken or taken: see Event.Err
	ReasonDeadline        StopReason = "renewal deadline passed"         // ErrRenewDeadline
	ReasonStalled         StopReason = "stalled"                         // ErrStalled
	ReasonStorageRefused  StopReason = "storage refused"                 // a permanent error while renewing
	ReasonFuncReturned    StopReason = "func returned"                   // Event.Err is what it returned
	ReasonFuncPanicked    StopReason = "func panicked"                   // the panic propagates after the event
	ReasonHandedOver      StopReason = "handed over"                     // a ShardOwner gave the shard up to balance the load
	ReasonShardRemoved    StopReason = "shard removed"                   // the shard left the ShardOwner's set (SetShards)
	ReasonPreferred       StopReason = "handed to a preferred contender" // ErrPreferredCandidate (see WithPriority)
)

// Event is a change of leadership, as this instance saw it.
type Event struct {
	Kind EventKind
	// Term is this instance's term (StartedLeading, StoppedLeading) or the
	// observed leader's (NewLeaderObserved, SilentLeaseBroken; its LeaseID
	// is empty).
	Term Term
	// Reason and Err are set for StoppedLeading: Err is the func's returned
	// error for ReasonFuncReturned, the context's cause otherwise.
	Reason StopReason
	Err    error
	At     time.Time
	// FuncReturned and LeaseExpiry are set for StoppedLeading: when the func
	// returned (or panicked), and the earliest moment the term's
	// lease could have expired on the server, or an ETag lease been broken
	// by a follower (the send time of its last confirmed acquire or renewal,
	// or for an ETag lease its last confirmed write, + LeaseDuration). Both
	// carry monotonic clock readings; LeaseExpiry.Sub(FuncReturned) is the margin by which
	// the leader stopped before another instance could lead. For
	// ReasonLeaseLost the server ended the lease sooner (a break, a
	// release): LeaseExpiry is then when it would have expired.
	FuncReturned time.Time
	LeaseExpiry  time.Time
	// Silence is set for SilentLeaseBroken: how long the lease's ETag had
	// stood unchanged, on this instance's clock, when it broke the lease.
	Silence time.Duration
	// Shard is the shard a [ShardOwner]'s StartedLeading or StoppedLeading
	// is about, and Session the ID of the session it runs (or, for
	// SilentLeaseBroken, the silent session this instance broke); both ""
	// for a [BlobDistributedMutex].
	Shard   string
	Session string
}

// String describes e for a log line: its kind, the term's number and
// identity, and whichever of reason, error, times, silence, shard and
// session are set. It never shows Term.LeaseID: whoever holds a lease's ID
// can renew, release or write under it as if it were the holder. (A
// session's ID is shown: it is its blob's name, public to anyone who can
// list the container.) Times are shown without their monotonic readings;
// LeaseExpiry - FuncReturned is shown as the margin.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Event{%v", e.Kind)
	if e.Term.Number != 0 || e.Term.Identity != "" {
		fmt.Fprintf(&b, " Term:%d Identity:%q", e.Term.Number, e.Term.Identity)
	}
	if !e.Term.Since.IsZero() {
		fmt.Fprintf(&b, " Since:%s", formatEventTime(e.Term.Since))
	}
	if e.Shard != "" {
		fmt.Fprintf(&b, " Shard:%q", e.Shard)
	}
	if e.Session != "" {
		fmt.Fprintf(&b, " Session:%s", e.Session)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, " Reason:%q", string(e.Reason))
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " Err:%q", e.Err.Error())
	}
	if !e.At.IsZero() {
		fmt.Fprintf(&b, " At:%s", formatEventTime(e.At))
	}
	if !e.FuncReturned.IsZero() {
		fmt.Fprintf(&b, " FuncReturned:%s", formatEventTime(e.FuncReturned))
	}
	if !e.LeaseExpiry.IsZero() {
		fmt.Fprintf(&b, " LeaseExpiry:%s", formatEventTime(e.LeaseExpiry))
		if !e.FuncReturned.IsZero() {
			fmt.Fprintf(&b, " Margin:%v", e.LeaseExpiry.Sub(e.FuncReturned))
		}
	}
	if e.Silence != 0 {
		fmt.Fprintf(&b, " Silence:%v", e.Silence)
	}
	b.WriteString("}")
	return b.String()
}

// formatEventTime prints t's wall clock to the nanosecond, without the
// monotonic reading that time.Time's String appends.
func formatEventTime(t time.Time) string { return t.Format(time.RFC3339Nano) }

// GoString is String, so that %#v does not print the lease ID either.
func (e Event) GoString() string { return e.String() }

// Format prints String whatever the verb (see [BlobSettings.Format]): the
// struct's fields, printed raw, would include Term.LeaseID.
func (e Event) Format(f fmt.State, verb rune) { printRedacted(f, verb, e.String()) }

// LogValue lets log/slog print e as String does, without the lease ID.
func (e Event) LogValue() slog.Value { return slog.StringValue(e.String()) }
