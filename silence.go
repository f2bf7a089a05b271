package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/clock"
)

// How a follower ends an ETag lease whose holder has fallen silent: the
// other half of the argument at the top of renew.go.
//
// A follower remembers the ETag of an infinite lease and the moment it
// received the first answer that showed it. That answer came after the
// server processed the write that made the ETag, which came after the
// holder sent it. Once the ETag has stood, on the follower's monotonic
// clock, for the lease duration the writer declared in that same answer's
// metadata, the follower breaks the lease at once, on condition that the
// ETag is still the one it timed. A holder that wrote since has changed it,
// and the break fails (412 ConditionNotMet) without changing anything.

// silenceWatch is a follower's clock on the ETag of an infinite lease.
type silenceWatch struct {
	etag     azcore.ETag
	since    time.Time     // when the first answer that showed etag arrived
	declared time.Duration // the lease duration its writer declared
	leader   Term          // the record that etag carries
}

// observe updates the watch with an answer, and returns the moment from
// which the lease may be broken: zero when it may not be, because it is not
// an infinite lease that is leased (a native lease is the server's to
// expire; a breaking one ends by itself).
//
// The duration is the one the writer of that ETag declared, never ours:
// holders and followers may have different settings. A blob whose record
// declares none (its holder died between acquiring and its first write, on
// a blob nobody recorded a term on before) gets own, the follower's
// LeaseDuration, so that no lease blocks the blob forever. Breaking such a
// holder early is safe whatever the duration: it has not written under its
// lease, so its func has not started.
func (w *silenceWatch) observe(info LeaseInfo, own time.Duration) time.Time {
	if info.State != stateLeased || info.Kind != ETagLease || info.ETag == "" {
		*w = silenceWatch{}
		return time.Time{}
	}
	if info.ETag != w.etag {
		d := info.DeclaredDuration
		if d <= 0 {
			d = own
		}
		*w = silenceWatch{etag: info.ETag, since: info.Received, declared: d, leader: info.Leader}
	}
	return w.since.Add(w.declared)
}

// breakOutcome is what a conditional break found.
type breakOutcome int

const (
	breakFailed breakOutcome = iota // the request failed: see the error
	breakDone                       // the lease is broken: any instance can acquire it
	etagChanged                     // the blob was written since: its holder is alive
	noLease                         // the lease had ended already: acquire it
)

// breakIfUnchanged breaks the lease at once (period 0) if the blob's ETag is
// still etag.
func (m *BlobLeaseManager) breakIfUnchanged(ctx context.Context, etag azcore.ETag) (breakOutcome, error) {
	return m.breakIfUnchangedWithin(ctx, etag, m.settings.RequestTimeout)
}

// breakIfUnchangedWithin is breakIfUnchanged with a bound of its own (a
// claim's: see claimTimeout).
func (m *BlobLeaseManager) breakIfUnchangedWithin(ctx context.Context, etag azcore.ETag, d time.Duration) (breakOutcome, error) {
	_, err := m.blobClient.BreakLease(ctx, blobstore.BreakOptions{
		Call:    blobstore.Call{Op: "break silent lease", Timeout: d},
		Period:  0,
		IfMatch: etag,
	})
	switch {
	case err == nil:
		return breakDone, nil
	case blobstore.HasCode(err, blobstore.ConditionNotMet):
		return etagChanged, nil
	case blobstore.HasCode(err, blobstore.LeaseNotPresentWithLeaseOperation, blobstore.BlobNotFound, blobstore.ContainerNotFound):
		// Released (which leaves the ETag as it was) or deleted.
		return noLease, nil
	}
	return breakFailed, m.wrap(err)
}

// BreakWhenSilent is the safe way to break an [ETagLease]: the rule every
// follower applies. A break period cannot exceed 60 s, so no period covers a
// longer lease whose holder is cut off from storage; instead it reads the
// lease every RetryInterval, and once the blob's ETag has stood unchanged,
// on this machine's clock, from the first answer that showed it, for the
// lease duration its holder declared (this manager's LeaseDuration if it
// declared none), it breaks the lease at once, on condition that the ETag
// is still that one. The holder, which stops at the send time of its last
// renewal + LeaseDuration - StopMargin, has then stopped.
//
// A blob that says it is another role's (a ShardOwner's session or shard,
// whose leases are timed by other rules: see the top of renew.go) is never
// broken: it returns a [*RecordError] naming the role.
//
// It returns the last answer read, and whether it broke the lease. It
// breaks nothing, and returns no error, when nobody holds the lease or the
// lease ends while it waits. It returns an error matching [ErrLeaseHeld]
// when the ETag changes: the holder is alive and renewing, and only a
// forced [BlobLeaseManager.Break] ends its lease (then a connected holder
// stops at its next renewal, within RenewInterval, while another instance
// may already lead). A native lease is the server's to expire: for one it
// returns an error without breaking it (use Break with SafeBreakPeriod).
// It waits at most until ctx is done.
func (m *BlobLeaseManager) BreakWhenSilent(ctx context.Context) (LeaseInfo, bool, error) {
	var (
		w     silenceWatch
		first azcore.ETag
	)
	for {
		info, err := m.Inspect(ctx)
		switch {
		case err != nil:
			return info, false, err
		case !info.Held():
			return info, false, nil
		case info.Role != "" && info.Role != m.role:
			return info, false, foreignRole(m.container, m.blob, info.Role, m.role)
		case info.Kind == NativeLease:
			return info, false, fmt.Errorf("leaderelection: the lease on %s/%s is a native lease, which the server expires: "+
				"break it with Break and SafeBreakPeriod", m.container, m.blob)
		case first != "" && info.ETag != first:
			return info, false, m.holderAlive()
		}
		first = info.ETag
		wait := clock.Jitter(m.settings.RetryInterval)
		if due := w.observe(info, m.settings.LeaseDuration); !due.IsZero() {
			if left := time.Until(due); left > 0 {
				wait = min(wait, left)
			} else {
				outcome, err := m.breakIfUnchanged(ctx, w.etag)
				switch outcome {
				case breakDone:
					return info, true, nil
				case noLease:
					return info, false, nil
				case etagChanged:
					return info, false, m.holderAlive()
				}
				if errors.Is(err, ErrPermanent) {
					return info, false, err
				}
				// A transient failure: read again, and break if still due.
				wait = min(wait, time.Second)
			}
		}
		if !clock.Sleep(ctx, wait) {
			return info, false, ctx.Err()
		}
	}
}

// holderAlive is BreakWhenSilent's answer when the ETag changed.
func (m *BlobLeaseManager) holderAlive() error {
	return &StorageError{Op: "break silent lease", Container: m.container, Blob: m.blob,
		detail: "the lease's ETag changed while it was watched: its holder is alive", kind: ErrLeaseHeld}
}
