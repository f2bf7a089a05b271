package blobstore

import (
	"context"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/google/uuid"
)

// Infinite, as an [AcquireOptions.Duration], asks for an infinite lease:
// one the server never expires, which only a release or a break ends.
const Infinite time.Duration = -1

// otherLeaseID is the detail of an acquire or a renewal that the server
// answered with another lease ID than the one proposed.
const otherLeaseID = "the server answered with another lease ID"

// Lease is a lease operation's answer.
type Lease struct {
	// ID is the lease's ID as the server answered it: for an acquire or a
	// renewal, always the one proposed (another is an error).
	ID string
	// ETag and LastModified are the blob's, which lease operations leave
	// as they were.
	ETag         azcore.ETag
	LastModified time.Time
}

// AcquireOptions are an acquire's lease ID, duration and condition.
type AcquireOptions struct {
	Call
	// ID is the lease ID to propose: Azure requires a GUID. Acquiring
	// again with the ID of the lease held succeeds and extends it, so an
	// acquire whose answer was lost can be retried. "": a random GUID,
	// which the answer's ID gives back.
	ID string
	// Duration is the lease's length, in whole seconds (rounded down) from
	// 15 s to 60 s, or [Infinite] (any negative value). The server refuses
	// other values (400 InvalidHeaderValue); it is not checked here.
	Duration time.Duration
	// IfMatch makes the acquire conditional on the blob's ETag (412
	// ConditionNotMet otherwise); "" for no condition.
	IfMatch azcore.ETag
}

// leaseClient is the SDK's lease client for this blob, proposing id (which
// only acquire, renew, release and change send).
func (b *Blob) leaseClient(c Call, id string) (*lease.BlobClient, *Error) {
	lc, err := lease.NewBlobClient(b.bb, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		// The SDK fails only for a nil blob client, which a Blob never has.
		return nil, &Error{Op: c.Op, Container: b.cl.container, Blob: b.name, Kind: Permanent,
			Detail: "building the lease client: " + b.cl.red.redact(err.Error()), Err: err}
	}
	return lc, nil
}

// AcquireLease takes the blob's lease. Op default "acquire lease". Another
// holder's lease is an error with Code [LeaseAlreadyPresent] (pass
// [HeldCodes] as Held to read it as [Held]); a missing blob, [BlobNotFound]
// (the blob must exist first: see [Blob.Create]); a missing container,
// [ContainerNotFound]. An answer with another lease ID than the one
// proposed is an error of kind [Held] and no status: Azurite revives an
// expired lease for anyone who renews it, so the lease is someone else's.
func (b *Blob) AcquireLease(ctx context.Context, o AcquireOptions) (Lease, error) {
	c := o.Call.named("acquire lease")
	id := o.ID
	if id == "" {
		id = uuid.NewString()
	}
	lc, e := b.leaseClient(c, id)
	if e != nil {
		return Lease{}, e
	}
	secs := int32(-1)
	if o.Duration >= 0 {
		secs = int32(o.Duration / time.Second)
	}
	var opts *lease.BlobAcquireOptions
	if o.IfMatch != "" {
		etag := o.IfMatch
		opts = &lease.BlobAcquireOptions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}
	}
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	resp, err := lc.AcquireLease(ctx, secs, opts)
	if err != nil {
		return Lease{}, b.fail(c, err)
	}
	b.cl.answered()
	if resp.LeaseID == nil || *resp.LeaseID != id {
		return Lease{}, &Error{Op: c.Op, Container: b.cl.container, Blob: b.name, Detail: otherLeaseID, Kind: Held}
	}
	return Lease{ID: id, ETag: deref(resp.ETag), LastModified: deref(resp.LastModified)}, nil
}

// RenewLease renews the lease id holds, restarting a fixed lease's
// duration; a lease that expired and that nobody took is renewed too. Op
// default "renew lease". A lease that is not id's (released, broken, taken)
// is an error with Code [LeaseIDMismatchWithLeaseOperation] or
// [LeaseIsBrokenAndCannotBeRenewed] (pass [LostCodes] as Lost to read them
// as [Lost]). An answer with another lease ID is an error of kind [Lost]
// and no status (see [Blob.AcquireLease]).
func (b *Blob) RenewLease(ctx context.Context, id string, c Call) (Lease, error) {
	c = c.named("renew lease")
	lc, e := b.leaseClient(c, id)
	if e != nil {
		return Lease{}, e
	}
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	resp, err := lc.RenewLease(ctx, nil)
	if err != nil {
		return Lease{}, b.fail(c, err)
	}
	b.cl.answered()
	if resp.LeaseID == nil || *resp.LeaseID != id {
		return Lease{}, &Error{Op: c.Op, Container: b.cl.container, Blob: b.name, Detail: otherLeaseID, Kind: Lost}
	}
	return Lease{ID: id, ETag: deref(resp.ETag), LastModified: deref(resp.LastModified)}, nil
}

// ReleaseLease ends the lease id holds, so that anyone may acquire it at
// once. Op default "release lease". A lease that is not id's is an error
// with Code [LeaseIDMismatchWithLeaseOperation] (Azure may answer a release
// after expiry with it too).
func (b *Blob) ReleaseLease(ctx context.Context, id string, c Call) error {
	c = c.named("release lease")
	lc, e := b.leaseClient(c, id)
	if e != nil {
		return e
	}
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	if _, err := lc.ReleaseLease(ctx, nil); err != nil {
		return b.fail(c, err)
	}
	b.cl.answered()
	return nil
}

// BreakOptions are a break's period and condition.
type BreakOptions struct {
	Call
	// Period is how long the lease stays breaking (held, its holder's
	// renewals refused) before it is broken, in whole seconds (rounded
	// down) from 0 to 60; 0 breaks it at once. The server uses the lease's
	// remaining time if that is shorter. A negative Period sends none: a
	// fixed lease then breaks when it would expire, an infinite one at
	// once.
	Period time.Duration
	// IfMatch makes the break conditional on the blob's ETag (412
	// ConditionNotMet otherwise, and nothing changes); "" for no
	// condition.
	IfMatch azcore.ETag
}

// BreakLease breaks whoever's lease is on the blob; it needs no lease ID.
// It returns how long until the lease is broken (0: broken now). Op
// default "break lease". A blob with no lease is an error with Code
// [LeaseNotPresentWithLeaseOperation].
func (b *Blob) BreakLease(ctx context.Context, o BreakOptions) (time.Duration, error) {
	c := o.Call.named("break lease")
	lc, e := b.leaseClient(c, "")
	if e != nil {
		return 0, e
	}
	opts := &lease.BlobBreakOptions{}
	if o.Period >= 0 {
		secs := int32(o.Period / time.Second)
		opts.BreakPeriod = &secs
	}
	if o.IfMatch != "" {
		etag := o.IfMatch
		opts.ModifiedAccessConditions = &blob.ModifiedAccessConditions{IfMatch: &etag}
	}
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	resp, err := lc.BreakLease(ctx, opts)
	if err != nil {
		return 0, b.fail(c, err)
	}
	b.cl.answered()
	var remaining time.Duration
	if resp.LeaseTime != nil {
		remaining = time.Duration(*resp.LeaseTime) * time.Second
	}
	return remaining, nil
}

// ChangeOptions are a lease change's IDs and condition.
type ChangeOptions struct {
	Call
	// From is the lease's current ID; To the ID it takes (a GUID, on
	// Azure).
	From, To string
	// IfMatch makes the change conditional on the blob's ETag (412
	// ConditionNotMet otherwise); "" for no condition.
	IfMatch azcore.ETag
}

// ChangeLease gives the lease From holds the ID To, without ending it:
// a handover. It returns the blob's ETag, which a change leaves as it was.
// Op default "change lease". A lease that is not From's is an error with
// Code [LeaseIDMismatchWithLeaseOperation].
func (b *Blob) ChangeLease(ctx context.Context, o ChangeOptions) (Lease, error) {
	c := o.Call.named("change lease")
	lc, e := b.leaseClient(c, o.From)
	if e != nil {
		return Lease{}, e
	}
	var opts *lease.BlobChangeOptions
	if o.IfMatch != "" {
		etag := o.IfMatch
		opts = &lease.BlobChangeOptions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}
	}
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	resp, err := lc.ChangeLease(ctx, o.To, opts)
	if err != nil {
		return Lease{}, b.fail(c, err)
	}
	b.cl.answered()
	return Lease{ID: deref(resp.LeaseID), ETag: deref(resp.ETag), LastModified: deref(resp.LastModified)}, nil
}
