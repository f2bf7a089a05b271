package leaderelection

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// LeaseKind says who keeps a lease's time: the server, or the followers.
type LeaseKind string

const (
	// NativeLease is Azure's own fixed-duration blob lease, of 15 to 60
	// whole seconds: the server expires it LeaseDuration after the
	// holder's last acquire or renew. Followers never break it.
	NativeLease LeaseKind = "native"

	// ETagLease is a lease of any length from 3 s to 24 h, timed by the
	// followers. The holder takes an infinite blob lease and renews it by
	// rewriting the blob's metadata under its lease ID (its term record
	// and its LeaseDuration), which changes the blob's ETag every time. A
	// follower that has seen the same ETag for the lease duration the
	// holder declared in that record, on its own monotonic clock, breaks
	// the lease on condition that the ETag is still the one it timed, and
	// takes it. (Amazon's Kinesis Client Library times its leases the same
	// way.)
	ETagLease LeaseKind = "etag"
)

// kind is the kind of lease that settings with defaults applied take.
func (s BlobSettings) kind() LeaseKind {
	if s.LeaseDuration >= minLeaseDuration && s.LeaseDuration <= maxLeaseDuration {
		return NativeLease
	}
	return ETagLease
}

// Kind is the kind of lease this manager takes: [NativeLease] for a
// LeaseDuration of 15 to 60 s, [ETagLease] otherwise.
func (m *BlobLeaseManager) Kind() LeaseKind {
	if m.alwaysETag {
		return ETagLease
	}
	return m.settings.kind()
}

// kindReason says why the manager takes an ETag lease, for the lines that
// name the kind: a LeaseDuration just outside Azure's native range (10 s)
// otherwise takes one silently. "" for a native lease, which needs no
// reason.
func (m *BlobLeaseManager) kindReason() string {
	switch {
	case m.Kind() == NativeLease:
		return ""
	case m.alwaysETag:
		return "a ShardOwner's session lease is always an ETag lease"
	}
	return fmt.Sprintf("LeaseDuration %v is outside Azure's native lease range, whole seconds from %d s to %d s",
		m.settings.LeaseDuration, minLeaseDuration/time.Second, maxLeaseDuration/time.Second)
}

// kindAttrs are the log attributes that name the lease's kind, and why an
// ETag lease is one (kindReason).
func (m *BlobLeaseManager) kindAttrs() []any {
	if why := m.kindReason(); why != "" {
		return []any{"lease", m.Kind(), "leaseReason", why}
	}
	return []any{"lease", m.Kind()}
}

// leaseSeconds is the duration to ask the server for: an ETag lease is an
// infinite one (-1), which only a break ends.
func (m *BlobLeaseManager) leaseSeconds() int32 {
	if m.alwaysETag {
		return -1
	}
	return m.settings.leaseSeconds()
}

// leaseSeconds is the duration a manager of settings s (with defaults
// applied) asks the server for, but a ShardOwner session's, always
// infinite: whole seconds for a native lease, -1 (infinite) for an ETag
// lease.
func (s BlobSettings) leaseSeconds() int32 {
	if s.kind() == ETagLease {
		return -1
	}
	return int32(s.LeaseDuration / time.Second)
}

// termRecord is the record a holder wrote under its lease ID: what every
// renewal of an ETag lease writes again, in full, because a metadata write
// replaces all of the blob's metadata.
type termRecord struct {
	leaseID string // the lease ID it was written under
	term    Term
	etag    azcore.ETag // the blob's ETag after our last confirmed write of it
}

// metadataOf is the metadata a holder writes for term t: its record, and
// what the lease's user adds to it (a session: how many shards it holds; a
// mutex with a priority: that priority).
func (m *BlobLeaseManager) metadataOf(t Term) map[string]*string {
	md := wire.RecordMetadata(wireTerm(t), m.settings.LeaseDuration, string(m.role))
	if m.extraMetadata != nil {
		m.extraMetadata(md)
	}
	return md
}

// forgetRecord drops the record before each acquire, so that a renewal never
// rewrites a record from an earlier acquisition: the blob may carry a newer
// leader's term since. (After a release the record stays: a renewal then
// fails on the lease, as it should, and reports the lease lost.)
func (m *BlobLeaseManager) forgetRecord() { m.record.Store(nil) }

// renewByWrite renews an ETag lease: it writes the holder's term record
// again, under its lease ID. The server accepts the write only while the
// lease is ours, and every write changes the ETag, which is what followers
// time. The record replaces all the metadata, so it is written in full.
//
// The write is also conditional on the ETag our last confirmed write left.
// A write of ours that the server processes late (its sender gave up on it,
// or died: see WithLeaseIDFile) then fails, instead of putting back an
// older record over a newer term written under the same lease ID since.
func (m *BlobLeaseManager) renewByWrite(ctx context.Context) (Grant, error) {
	h := m.id.Load()
	r := m.record.Load()
	if r == nil || r.leaseID != h.id {
		// Until the term is recorded there is nothing to write: rewriting
		// an older record could lower the term on the blob. The mutex
		// records the term right after acquiring; a renewal due before
		// that has succeeded is retried.
		return Grant{}, &StorageError{Op: "renew lease", Container: m.container, Blob: m.blob,
			detail: "the term is not recorded yet under this lease", kind: ErrTransient}
	}
	ctx, cancel := m.call(ctx) // see grant
	defer cancel()
	id, etag := h.id, r.etag
	sent, bootSent := time.Now(), m.boot()
	written, err := m.blobClient.SetMetadata(ctx, blobstore.SetMetadataOptions{
		Call:     blobstore.Call{Op: "renew lease (write record)", Lost: lostCodes},
		Metadata: m.metadataOf(r.term), LeaseID: id, IfMatch: etag,
	})
	if blobstore.HasCode(err, blobstore.ConditionNotMet) {
		return Grant{}, m.writtenSince(ctx, r, err)
	}
	if err != nil {
		// 412 LeaseIdMismatchWithBlobOperation (another holds it), LeaseLost
		// (Azure) or LeaseNotPresentWithBlobOperation (Azurite: broken or
		// released): all in lostCodes.
		return Grant{}, m.wrap(err)
	}
	if written != "" {
		m.record.CompareAndSwap(r, &termRecord{leaseID: r.leaseID, term: r.term, etag: written})
	}
	return m.grant(id, sent, bootSent), nil
}

// writtenSince sorts out a renewal refused because the blob changed since
// our last confirmed write r. If it still carries our term, the change was
// a write of ours answered too late: adopt its ETag and retry (transient).
// If it carries another term, a newer holder recorded it, or the term's end
// mark: the lease is lost.
func (m *BlobLeaseManager) writtenSince(ctx context.Context, r *termRecord, refused error) error {
	props, err := m.blobClient.Properties(ctx, blobstore.Call{Op: "renew lease (read record)", Lost: lostCodes})
	if err != nil {
		return m.wrap(err)
	}
	rec := readRecord(m.container, m.blob, props.Metadata)
	cur := rec.Term
	se := &StorageError{Op: "renew lease (write record)", Container: m.container, Blob: m.blob,
		StatusCode: statusCode(refused), ErrorCode: errorCode(refused), kind: ErrTransient, err: sdkError(refused)}
	// An end mark is never a renewal's: it was written as the term ended,
	// by its holder or, on a session's blob, by another once its lease had
	// ended (session.go).
	if cur.Number != r.term.Number || cur.Identity != r.term.Identity || rec.EndMark || props.ETag == "" {
		se.kind = ErrLeaseLost
		return se
	}
	m.record.CompareAndSwap(r, &termRecord{leaseID: r.leaseID, term: r.term, etag: props.ETag})
	return se
}

// observed fills in what an answer to a read of the blob's properties says
// about the lease's kind and its holder's liveness.
func observed(info *LeaseInfo, props blobstore.Props, received time.Time) {
	info.Received = received
	info.ETag = props.ETag
	info.LastModified = props.LastModified
	switch info.Duration {
	case durationFixed:
		info.Kind = NativeLease
	case durationInfinite:
		info.Kind = ETagLease
	}
}
