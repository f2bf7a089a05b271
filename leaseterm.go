package leaderelection

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// The term's record on a lease's blob: written under the lease, If-Match the
// ETag read (RecordTerm), marked ended before a release (endTerm), repaired
// by an operator (RepairRecord); and what keeps a record from being built on.

// RecordTerm writes a new term into the blob's metadata, under the lease this
// manager must hold: the previous term's number plus one, identity, and now.
// Only the lease holder can write the metadata, and the write is conditional
// on the blob being unchanged since it was read, so no two terms get the same
// number and numbers only grow. The record also declares this manager's
// LeaseDuration. An error matching [ErrLeaseLost] means the lease is no
// longer ours.
//
// For an [ETagLease], this write is the first that secures the lease (see
// [Grant]), and later renewals write the same record again.
func (m *BlobLeaseManager) RecordTerm(ctx context.Context, identity string) (Term, error) {
	t, _, err := m.recordTerm(ctx, identity)
	return t, err
}

// recordTerm is RecordTerm, also returning the grant of its write: for an
// ETag lease, the first that extends the term.
func (m *BlobLeaseManager) recordTerm(ctx context.Context, identity string) (Term, Grant, error) {
	if err := checkIdentity(identity); err != nil {
		return Term{}, Grant{}, err
	}
	prev, etag, floor, err := m.readForTerm(ctx)
	if err != nil {
		return Term{}, Grant{}, err
	}
	n, ok := wire.NextTerm(prev.Term.Number, floor)
	if !ok {
		return Term{}, Grant{}, termCannotGrow(m.container, m.blob, max(prev.Term.Number, floor))
	}
	if prev.Term.Number < floor {
		m.logger.Error("leaderelection: the term on the blob is lower than one this instance saw there: the blob was deleted or rewritten; the new term continues from the higher",
			"container", m.container, "blob", m.blob, "onBlob", prev.Term.Number, "seen", floor, "term", n)
	}
	t := Term{Number: n, Identity: identity, LeaseID: m.LeaseID(), Since: time.Now().UTC()}
	g, err := m.writeTerm(ctx, t, etag)
	return t, g, err
}

// readForTerm reads, under the lease this manager holds, the record a new
// term is to follow, with the ETag a write of it is conditional on, and
// the floor it read it against (the highest term this instance saw there
// before). It refuses a record that must not be built on, a session's
// ended record, and a blob that must settle first (errNotSettled).
func (m *BlobLeaseManager) readForTerm(ctx context.Context) (prev record, etag azcore.ETag, floor int64, err error) {
	prev, etag, floor, err = m.readUnderLease(ctx)
	if err != nil {
		return record{}, "", 0, err
	}
	if m.role == RoleSession && prev.EndMark {
		// A session's end is final (session.go): a lease on its blob
		// under its ID (an acquire that reached the server late, or one
		// by hand) is no session to run.
		return record{}, "", 0, &StorageError{Op: "write term", Container: m.container, Blob: m.blob,
			detail: "the session's record says it has ended: a session is never taken up again", kind: ErrLeaseLost}
	}
	// A blob with no term's record, created again or below this
	// instance's floor, must have stood (recreated.go), however this
	// contender came to hold its lease: after a read, or at once after a
	// failure (the mutex's loop).
	recreated := !prev.Recreated.IsZero() || !prev.TermBad && prev.Term.Number < floor
	if prev.Term.Identity == "" && etag != "" && !m.fresh.stood(etag, m.settleFor(recreated, prev.seedLongest())) {
		if err := m.raiseHeld(ctx, prev, etag); err != nil {
			return record{}, "", 0, err
		}
		return record{}, "", 0, errNotSettled
	}
	return prev, etag, floor, nil
}

// readUnderLease reads the blob's record under the lease this manager
// holds, with its ETag and the floor it was read against, notes it
// (termFloor), and refuses one that must not be built on.
func (m *BlobLeaseManager) readUnderLease(ctx context.Context) (prev record, etag azcore.ETag, floor int64, err error) {
	props, err := m.blobClient.Properties(ctx, blobstore.Call{Op: "read term", Lost: lostCodes})
	if err != nil {
		return record{}, "", 0, m.wrap(err)
	}
	prev = readRecord(m.container, m.blob, props.Metadata)
	// Seen, whatever comes of this attempt: a blob created again is
	// seeded and raised with it, and taken above it (the simulator found
	// a contender that read a term here, gave the blob back to let it
	// settle, then created it again after a deletion below that term).
	floor = m.floor.get()
	m.floor.remember(prev)
	if err := m.mayRecord(prev); err != nil {
		return record{}, "", 0, err
	}
	return prev, props.ETag, floor, nil
}

// writeTerm writes t's record under the lease, on condition (If-Match)
// that the blob's ETag is still etag, as read for it, and returns the grant
// of the write.
func (m *BlobLeaseManager) writeTerm(ctx context.Context, t Term, etag azcore.ETag) (Grant, error) {
	m.floor.propose(t)         // the server may store it, answered or not
	ctx, cancel := m.call(ctx) // see grant
	defer cancel()
	sent, bootSent := time.Now(), m.boot()
	written, err := m.blobClient.SetMetadata(ctx, blobstore.SetMetadataOptions{Call: blobstore.Call{Op: "write term", Lost: lostCodes},
		Metadata: m.metadataOf(t), LeaseID: t.LeaseID, IfMatch: etag})
	if err != nil {
		// ConditionNotMet: the blob changed since we read it. Only a lease
		// holder can write it, so that was our own earlier attempt, answered
		// too late: read again and retry. (Had the lease passed to another,
		// the write would fail on our lease ID.)
		if blobstore.HasCode(err, blobstore.ConditionNotMet) {
			return Grant{}, &StorageError{Op: "write term", Container: m.container, Blob: m.blob,
				StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: sdkError(err)}
		}
		return Grant{}, m.wrap(err)
	}
	m.floor.see(t.Number)
	m.record.Store(&termRecord{leaseID: t.LeaseID, term: t, etag: written})
	return m.grant(t.LeaseID, sent, bootSent), nil
}

// RepairRecord is an operator's repair of a record that does not read (see
// [RecordError]): on a blob that nobody holds a lease on, it writes a clean
// record of an ended term numbered term, keeping the blob's role (none if it
// says none) and its mark of a blob created again (if it has one: its next
// holder waits for it to stand, repaired or not), so that the next holder
// records term + 1. Its
// write is conditional on the blob being unchanged since it was read: an
// error matching [ErrLeaseHeld] means someone holds the lease, or wrote it
// meanwhile. Choose term at least as high as any term the fleet, or any
// system downstream that fences on it, has seen: the fleet's instances
// continue from the higher of it and the highest they saw themselves (one
// below that is raised, marked as created again, and waited for as long as
// the lease its last holder declared: recreated.go), but an instance that
// never saw the blob trusts it. Two requests.
func (m *BlobLeaseManager) RepairRecord(ctx context.Context, term int64) (LeaseInfo, error) {
	if term < 0 {
		return LeaseInfo{}, fmt.Errorf("leaderelection: a term number is 0 or more, got %d", term)
	}
	info, stored, err := m.inspect(ctx)
	switch {
	case err != nil:
		return info, err
	case !info.Exists:
		return info, &StorageError{Op: "repair record", Container: m.container, Blob: m.blob, detail: "the blob does not exist", kind: ErrPermanent}
	case info.Held():
		return info, &StorageError{Op: "repair record", Container: m.container, Blob: m.blob,
			detail: "the blob's lease is held: its holder's record is its own (repair a record only while nobody holds the lease)", kind: ErrLeaseHeld}
	}
	md := wire.EndedMetadata(string(info.Role), term, time.Now())
	if !info.Recreated.IsZero() {
		// Still a blob created again: whoever takes it waits as long as
		// for one that was not repaired (recreated.go, shardfloors.go),
		// and at least as long as the longest lease its seed names, if
		// that reads (one that does not is what the repair is for).
		at := info.Recreated.UTC().Format(time.RFC3339Nano)
		md[wire.MetaRecreated] = &at
		if longest := readRecord(m.container, m.blob, stored).Longest; longest > 0 {
			v := longest.String()
			md[wire.MetaLongest] = &v
		}
	}
	if _, err := m.blobClient.SetMetadata(ctx, blobstore.SetMetadataOptions{
		Call:     blobstore.Call{Op: "repair record", Held: append([]string{blobstore.ConditionNotMet, blobstore.LeaseIDMissing}, heldCodes...)},
		Metadata: md, IfMatch: info.ETag}); err != nil {
		return info, m.wrap(err)
	}
	m.floor.see(term)
	return info, nil
}

// endTerm marks t, our term, as ended in the blob's metadata, under the
// lease we still hold, just before we release it: a reader who then finds
// the lease held, and t still the last record, knows that the new holder
// has not recorded its term yet. Best effort: one request, no retry. Like
// every write of a record, it is conditional on the ETag our last confirmed
// write left, so that, arriving late, it cannot put t back over a newer term.
func (m *BlobLeaseManager) endTerm(ctx context.Context, t Term) error {
	r := m.record.Load()
	if r == nil || r.term.Number != t.Number || r.leaseID != m.LeaseID() {
		return nil // not recorded under this lease: nothing to mark
	}
	md := m.metadataOf(t)
	ended := time.Now().UTC().Format(time.RFC3339Nano)
	md[wire.MetaEnded] = &ended
	_, err := m.blobClient.SetMetadata(ctx, blobstore.SetMetadataOptions{Call: blobstore.Call{Op: "end term", Lost: lostCodes},
		Metadata: md, LeaseID: r.leaseID, IfMatch: r.etag})
	if err != nil {
		return m.wrap(err)
	}
	return nil
}

// recordProblem is what keeps info's record from being built on by this
// manager, or what does not read in it; nil if nothing.
func (m *BlobLeaseManager) recordProblem(info LeaseInfo) *RecordError {
	switch {
	case info.Role != "" && info.Role != m.role:
		return foreignRole(m.container, m.blob, info.Role, m.role)
	case info.RecordError != nil:
		return info.RecordError
	case info.Leader.Number == math.MaxInt64:
		return termCannotGrow(m.container, m.blob, info.Leader.Number)
	}
	return nil
}

// mayRecord refuses to record a term over prev, a record this manager must
// not build on: the blob is another role's, or its term number does not read.
func (m *BlobLeaseManager) mayRecord(prev record) error {
	switch {
	case prev.Role != "" && BlobRole(prev.Role) != m.role:
		return foreignRole(m.container, m.blob, BlobRole(prev.Role), m.role)
	case prev.TermBad:
		return prev.problem
	}
	return nil
}
