package leaderelection

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// A blob created again under a running fleet is seeded with its creator's
// floor, which may be lower than another instance's: the leader's, which
// has not noticed the deletion yet, or one that saw a later term. So a blob
// whose seed says it was created again is not taken at once: every
// contender that reads it, or takes its lease, raises the seed to its own
// floor, if higher (a write on condition that its ETag is unchanged, which
// a blob nobody leases accepts without a lease ID, and one whose lease it
// took under that lease: raiseHeld), and records a term on it only once it
// has watched its ETag stand unchanged for settleFor: by then the leader has
// noticed (its next renewal fails, within RenewInterval + RequestTimeout),
// stopped (StopMargin) and read it, and so has every instance polling it
// (RetryInterval). Each raise changes the ETag, and only raises it, so the
// seed ends at the fleet's highest floor, and the next term above it. The
// wait is a time: a leader that gets no raise onto the blob before it is
// over (its requests failing, or cut off from storage; one whose renewals
// only fail transiently runs on to its deadline meanwhile) is, for this,
// one that does not run (renew.go's "What cannot be kept"). One that takes
// its lease without reading it first (the mutex's loop, after a failed
// read or acquire) raises it under that lease before it gives it back
// (raiseHeld), if that read and write get through. Any
// other blob that carries no term's record (a first start, a repaired
// record, one a script created again empty) is not waited for, unless a
// contender reads it, or takes its lease, below a term it saw recorded
// there (belowFloor): then it was created again, or rewritten lower, under
// a running fleet, and the contender waits for it and raises it marked as
// created again, so that every other contender waits for it too. A
// contender that finds the blob or its container gone, or the container
// being deleted (Azure refuses to create it again for about 30 s), polls
// it every RetryInterval, not with a backoff, whatever earlier failures
// built (goneOrGoing), so that its raise lands within the wait.
//
// The wait also keeps the funcs apart. A leader cut off from storage as its
// blob (or container) is deleted learns nothing of it: it acts on until its
// deadline, S + D - StopMargin for the send time S of its last confirmed
// renewal (renew.go), and S came before the deletion, which the server
// processed after that renewal. A contender times the blob created again
// from an answer received after its creation, so after the deletion, on its
// own monotonic clock; waiting at least D from then, it starts no func
// until the old leader's context has ended StopMargin before: the
// followers' rule for an ETag lease (renew.go), with the deletion in place
// of the holder's last write. D is the holder's, never the contender's
// own. Only the holder of the blob's last term can still hold its lease
// (each earlier holder's lease had passed before the next term was
// recorded), so every instance remembers the lease duration that the
// record of the highest term it read declares, and its own (termFloor),
// seeds a blob it creates again with the longer (leaderlongest), raises a
// seed that names a shorter one, and waits the longest of its memory and
// the seed's (settleFor). So an instance that read the last term's record,
// and any that takes a blob one of those seeded or raised, waits out that
// term's holder, whatever lease it declared. (A leased blob cannot be
// deleted without its lease ID: deleting it alone takes a break first,
// which is the operator's break of renew.go's "What this does not cover";
// its container can be deleted at once.) What cannot be kept: a blob
// created again first by an instance that saw no term of it carries no
// mark and is taken at once, as at a fleet's first start (a first start
// and a deletion look alike to it, and it knows no other instance's
// lease); a deletion whose last term no running instance read is waited
// out only as long as the leases they did read; and the instances that
// read it may get no raise onto the blob before the wait of a creator that
// did not is over. Then a cut-off holder of the deleted lease may act
// beside the new leader until its own deadline, at most its LeaseDuration
// after the deletion. These are the deletions under which the term may
// repeat (above, and renew.go's "What cannot be kept"). So is a blob
// restored with its record (an undelete, a container restored, a copy of
// an earlier version): another writer's, taken as a lease released.

// waitForBlobsCreatedAgain makes m wait for a blob created again before it
// records a term on it, as a mutex's manager does (see above): 2 R beyond
// what a leader needs to notice the deletion, long enough for every
// contender polling the blob, every RetryInterval, to have read it and
// raised its seed; and at least m's own lease duration, as a holder of the
// deleted lease may be one like m.
func (m *BlobLeaseManager) waitForBlobsCreatedAgain() {
	m.settle = 2 * m.settings.RetryInterval
	m.floor.ownLease(m.settings.LeaseDuration)
}

// goneOrGoing reports whether err says that the blob or its container is
// gone, or being deleted (Azure refuses to create a container again for
// about 30 s after its deletion). A contender keeps polling such a blob
// every RetryInterval, not with a backoff that may grow to a lease
// duration: it may be a witness of the last term, whose raise onto the
// blob created again must land within the creator's wait (settleFor).
func goneOrGoing(err error) bool {
	var se *StorageError
	return errors.As(err, &se) && slices.Contains([]string{blobstore.BlobNotFound, blobstore.ContainerNotFound, blobstore.ContainerBeingDeleted}, se.ErrorCode)
}

// errNotSettled refuses a term on a fresh blob whose ETag this manager has
// not watched stand for its settle time: the contender gives the lease back
// and watches it (seedFresh).
var errNotSettled = errors.New("leaderelection: the blob has no term recorded yet and has not stood unchanged long enough for every instance to seed its term")

// freshWatch is a contender's clock on a fresh blob's ETag.
type freshWatch struct {
	mu    sync.Mutex
	etag  azcore.ETag
	since time.Time
}

// watch times etag, first seen in an answer received at received.
func (w *freshWatch) watch(etag azcore.ETag, received time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.etag != etag {
		w.etag, w.since = etag, received
	}
	return w.since
}

// stood reports whether etag has been watched for d.
func (w *freshWatch) stood(etag azcore.ETag, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.etag == etag && time.Since(w.since) >= d
}

// isFresh reports whether info shows a blob nobody leases that carries no
// term's record: created, created again, or repaired.
func isFresh(info LeaseInfo) bool {
	return info.Exists && !info.Held() && info.Leader.Identity == "" && !info.RecordError.blocks()
}

// seedFresh is a contender's part before it takes a fresh blob (see above):
// it raises the blob's seed to this manager's floor if that is higher, and
// returns how long the blob must still stand before it may be taken (0: take
// it now, or it is not fresh).
func (m *BlobLeaseManager) seedFresh(ctx context.Context, info LeaseInfo) time.Duration {
	if m.settle <= 0 || !isFresh(info) || info.Role != "" && info.Role != m.role {
		return 0
	}
	if md := m.raisedSeed(info.Leader.Number, !info.Recreated.IsZero(), info.seedLongest); md != nil {
		_, err := m.writeSeed(ctx, info.ETag, md)
		if err == nil {
			m.logRaise(info.Leader.Number)
			return max(m.settings.RetryInterval/4, 100*time.Millisecond) // read it again: a new ETag to watch
		}
		// Written meanwhile (a raise, or a holder), or refused: the next
		// read tells; a refusal does not hold this contender back (its own
		// term record, if it leads, continues above its floor all the same).
		m.logger.Debug("leaderelection: could not raise the term on a blob without a term's record", "container", m.container, "blob", m.blob,
			"error", err)
	}
	return max(0, m.settleFor(!info.Recreated.IsZero() || m.belowFloor(info.Leader.Number), info.seedLongest)-time.Since(m.fresh.watch(info.ETag, info.Received)))
}

// raisedSeed is the seed that raises a blob without a term's record,
// numbered number, to this manager's floor (or a term it proposed above
// it), and, if the blob is marked created again (its seed saying that a
// holder declared a lease as long as longest), to the longest lease this
// manager knows a holder declared: nil if neither is higher. The raise
// marks the blob created again if it was, or if it is below a term this
// instance saw recorded (belowFloor): such a blob was created again, or
// rewritten lower, under a running fleet (by an instance that never saw
// its terms, or by another writer), so whoever takes it waits for it. One
// below a term only proposed (a record whose answer was lost: no func ran
// under it) is raised unmarked.
func (m *BlobLeaseManager) raisedSeed(number int64, recreated bool, longest time.Duration) map[string]*string {
	floor := m.floor.seed()
	mark := recreated || m.belowFloor(number)
	if floor <= number && (!recreated || m.floor.longestDeclared() <= longest) {
		return nil
	}
	return m.seedMetadata(max(floor, number), mark)
}

// belowFloor reports whether a blob whose record carries no term, numbered
// number, is below a term this instance saw recorded there: created again,
// or rewritten lower, under a running fleet, and to be waited for as a
// blob created again is (see above).
func (m *BlobLeaseManager) belowFloor(number int64) bool { return number < m.floor.get() }

// seedMetadata is the metadata a blob is created with, or a blob without a
// term's record raised to, by this manager: its role and the term floor
// and, if marked created again by a manager that waits for such a blob (a
// mutex's), the longest lease this manager knows a holder of it declared.
// (Another's marks it if floor is above 0, as wire.CreateMetadata does.)
// Unmarked, it is an ended term's record that the next term continues.
func (m *BlobLeaseManager) seedMetadata(floor int64, recreated bool) map[string]*string {
	switch {
	case !recreated:
		return wire.EndedMetadata(string(m.role), floor, time.Now())
	case m.settle <= 0:
		return wire.CreateMetadata(string(m.role), floor, time.Now())
	}
	return wire.SeedMetadata(string(m.role), floor, m.floor.longestDeclared(), time.Now())
}

func (m *BlobLeaseManager) logRaise(was int64) {
	m.logger.Warn("leaderelection: raised the term on the blob to the highest this instance saw there (the blob was created again, or its record rewritten)",
		"container", m.container, "blob", m.blob, "was", was, "term", m.floor.seed())
}

// raiseHeld is seedFresh's raise by a contender that took a fresh blob's
// lease without reading it first (the mutex's loop acquires at once a blob
// it saw free, or after a failed read or acquire) and must give it back
// unsettled (errNotSettled): the same raise, written under the lease it
// holds, on condition that the ETag is still etag. Without it a leader that
// missed the deletion, whose reads keep failing but whose acquire gets
// through, gives the blob back with its seed still below its own term, and
// a contender that watched that seed stand records that term's number
// again (a simulator's finding). A failure is returned, transient if it
// may be: recordTerm's caller reads again and retries under the lease (a
// raise that landed reads as raised), until the lease's deadline.
func (m *BlobLeaseManager) raiseHeld(ctx context.Context, prev record, etag azcore.ETag) error {
	md := m.raisedSeed(prev.Term.Number, !prev.Recreated.IsZero(), prev.seedLongest())
	if md == nil {
		return nil
	}
	ctx, cancel := m.call(ctx)
	defer cancel()
	_, err := m.blobClient.SetMetadata(ctx, blobstore.SetMetadataOptions{Call: blobstore.Call{Op: "raise term", Lost: lostCodes},
		Metadata: md, LeaseID: m.LeaseID(), IfMatch: etag})
	if blobstore.HasCode(err, blobstore.ConditionNotMet) {
		// Only the lease holder writes the blob: our own earlier raise,
		// answered too late. Read again.
		err = &StorageError{Op: "raise term", Container: m.container, Blob: m.blob,
			StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: sdkError(err)}
	}
	if err != nil {
		err = m.wrap(err)
		m.logger.Warn("leaderelection: could not raise the term on a blob created again, under its lease; reading it again", "container", m.container, "blob", m.blob,
			"error", err)
		return err
	}
	m.logRaise(prev.Term.Number)
	return nil
}

// writeSeed writes md, a record that carries no term (a seed), on the blob
// nobody leases, on condition that its ETag is still etag, and returns the
// ETag it made. A refusal is classified: written meanwhile, or leased.
func (m *BlobLeaseManager) writeSeed(ctx context.Context, etag azcore.ETag, md map[string]*string) (azcore.ETag, error) {
	return m.writeUnleased(ctx, "raise term", etag, md)
}

// writeUnleased writes md on the blob with no lease ID, so on a blob nobody
// leases, on condition that its ETag is still etag, and returns the ETag it
// made. A refusal matches ErrLeaseHeld: written meanwhile, or leased.
func (m *BlobLeaseManager) writeUnleased(ctx context.Context, op string, etag azcore.ETag, md map[string]*string) (azcore.ETag, error) {
	written, err := m.blobClient.SetMetadata(ctx, blobstore.SetMetadataOptions{
		Call:     blobstore.Call{Op: op, Held: []string{blobstore.ConditionNotMet, blobstore.LeaseIDMissing}},
		Metadata: md, IfMatch: etag})
	if err != nil {
		return "", m.wrap(err)
	}
	if written == "" {
		return "", &StorageError{Op: op, Container: m.container, Blob: m.blob, detail: "the answer carried no ETag", kind: ErrTransient}
	}
	return written, nil
}

// settleFor is how long a blob that carries no term's record must stand
// before a term is recorded on it: none unless it was created again; then
// long enough for the leader that missed the deletion to notice it and
// raise the seed (see above), and at least the longest lease duration this
// manager knows a holder of the blob declared, or the blob's seed says its
// seeders knew (seedLongest), for a holder of the deleted lease cut off
// from storage to have stopped (see above).
func (m *BlobLeaseManager) settleFor(recreated bool, seedLongest time.Duration) time.Duration {
	if m.settle <= 0 || !recreated {
		return 0
	}
	s := m.settings
	return max(s.RenewInterval+s.RequestTimeout+s.StopMargin+m.settle, m.floor.longestDeclared(), seedLongest)
}
