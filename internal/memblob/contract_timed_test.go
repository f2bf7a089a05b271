package memblob

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

func init() { contractCases = append(contractCases, timedCases...) }

// timedCases wait for time to pass: real time on Azurite, in parallel with
// each other (the longest, a 15 s lease expiring, sets the package's wall
// time), virtual time on the fake. The margins around each instant are a
// second or more, so that Azurite's answers do not depend on scheduling.
var timedCases = []contractCase{
	{name: "lease-expiry", timed: true, run: func(t *testing.T, e *env) {
		blobs := []string{"a", "renewed", "reacquired", "inf", "holder-renews", "other-renews", "write", "upload",
			"other-acquires", "release", "change-break", "read", "taken"}
		for _, n := range blobs {
			e.put(t, n, nil)
		}
		for _, n := range blobs {
			secs := int32(15)
			if n == "inf" {
				secs = -1
			}
			e.acquire(t, n, idA, secs)
		}
		time.Sleep(3 * time.Second)
		_, err := e.lease(t, "renewed", idA).RenewLease(e.ctx, nil)
		noErr(t, err, "renew at 3 s")
		// An acquire with the same ID extends the lease as a renew does.
		_, err = e.lease(t, "reacquired", idA).AcquireLease(e.ctx, 15, nil)
		noErr(t, err, "acquire again at 3 s")
		time.Sleep(11 * time.Second)
		e.leaseState(t, "a", leased, locked, fixed) // 14 s
		time.Sleep(2 * time.Second)
		// 16 s: the 15 s leases expired, exactly on time (Azurite shows
		// no grace period).
		e.leaseState(t, "a", expired, unlocked, noDur)
		e.leaseState(t, "renewed", leased, locked, fixed)
		e.leaseState(t, "reacquired", leased, locked, fixed)
		e.leaseState(t, "inf", leased, locked, infinite)
		p := listAll(t, e, &container.ListBlobsFlatOptions{Include: withMetadata})[0]
		for _, b := range p.Segment.BlobItems {
			if *b.Name == "a" {
				equal(t, "listed state", deref(b.Properties.LeaseState), expired)
				equal(t, "listed status", deref(b.Properties.LeaseStatus), unlocked)
				equal(t, "listed duration", deref(b.Properties.LeaseDuration), noDur)
			}
		}

		// The holder renews an expired lease nobody took.
		resp, err := e.lease(t, "holder-renews", idA).RenewLease(e.ctx, nil)
		noErr(t, err, "the holder renews")
		equal(t, "lease ID", deref(resp.LeaseID), idA)
		e.leaseState(t, "holder-renews", leased, locked, fixed)

		// Azurite divergence: another's renew of an expired lease
		// succeeds there, and revives the original lease (Azure: 409
		// LeaseIdMismatchWithLeaseOperation). The answer shows the ID.
		resp, err = e.lease(t, "other-renews", idB).RenewLease(e.ctx, nil)
		noErr(t, err, "another renews")
		equal(t, "the revived lease's ID", deref(resp.LeaseID), idA)
		_, err = e.lease(t, "other-renews", idA).RenewLease(e.ctx, nil)
		noErr(t, err, "the original holder renews the revived lease")

		// Writes: the expired lease's ID is refused (Azure: 412
		// LeaseLost), none is needed, and a write makes the blob forget
		// the lease: it shows available, and the old holder's renew
		// fails, as Azure documents ("the lease ID is maintained until
		// the blob is modified or leased again").
		_, err = e.blob("write").SetMetadata(e.ctx, nil, &blob.SetMetadataOptions{AccessConditions: withLease(idA)})
		wantErr(t, err, 412, "LeaseNotPresentWithBlobOperation")
		e.leaseState(t, "write", expired, unlocked, noDur)
		_, err = e.blob("write").SetMetadata(e.ctx, nil, nil)
		noErr(t, err, "write without a lease")
		e.leaseState(t, "write", available, unlocked, noDur)
		_, err = e.lease(t, "write", idA).RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		_, err = e.blob("upload").Upload(e.ctx, body("y"), &blockblob.UploadOptions{AccessConditions: withLease(idA)})
		wantErr(t, err, 412, "LeaseNotPresentWithBlobOperation")
		e.put(t, "upload", nil)
		e.leaseState(t, "upload", available, unlocked, noDur)

		// Anyone may acquire an expired lease; then the old holder's
		// renew fails.
		e.acquire(t, "other-acquires", idB, 15)
		_, err = e.lease(t, "other-acquires", idA).RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		e.acquire(t, "taken", idB, -1)
		_, err = e.lease(t, "taken", idB).RenewLease(e.ctx, nil)
		noErr(t, err, "the new holder renews")

		// The holder may release an expired lease; another may not.
		_, err = e.lease(t, "release", idB).ReleaseLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		_, err = e.lease(t, "release", idA).ReleaseLease(e.ctx, nil)
		noErr(t, err, "release an expired lease")
		e.leaseState(t, "release", available, unlocked, noDur)

		// An expired lease cannot be changed; a break (whatever its
		// period) makes it broken at once.
		_, err = e.lease(t, "change-break", idA).ChangeLease(e.ctx, idB, nil)
		wantErr(t, err, 409, "LeaseNotPresentWithLeaseOperation")
		br, err := e.lease(t, "change-break", idB).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](10)})
		noErr(t, err, "break an expired lease")
		equal(t, "lease time", deref(br.LeaseTime), int32(0))
		e.leaseState(t, "change-break", broken, unlocked, noDur)

		// Reads presenting the expired lease's ID are refused; the
		// holder may acquire again.
		_, err = e.blob("read").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: withLease(idA)})
		wantErr(t, err, 412, "LeaseNotPresentWithBlobOperation")
		e.acquire(t, "read", idA, 15)

		time.Sleep(3500 * time.Millisecond) // 19.5 s: the lease renewed at 3 s expired at 18 s
		e.leaseState(t, "renewed", expired, unlocked, noDur)
		e.leaseState(t, "reacquired", expired, unlocked, noDur)
		e.leaseState(t, "inf", leased, locked, infinite)
	}},
	{name: "break-period-elapses", timed: true, run: func(t *testing.T, e *env) {
		for _, n := range []string{"x", "y", "z"} {
			e.put(t, n, nil)
		}
		lx := e.acquire(t, "x", idA, 60)
		resp, err := lx.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](3)})
		noErr(t, err, "break x, period 3")
		equal(t, "x's lease time", deref(resp.LeaseTime), int32(3))
		ly := e.acquire(t, "y", idA, 15)
		resp, err = ly.BreakLease(e.ctx, nil)
		noErr(t, err, "break y, no period")
		equal(t, "y's lease time", deref(resp.LeaseTime), int32(15))
		lz := e.acquire(t, "z", idA, -1)
		resp, err = lz.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](6)})
		noErr(t, err, "break z, period 6")
		equal(t, "z's lease time", deref(resp.LeaseTime), int32(6))
		time.Sleep(1200 * time.Millisecond)
		e.leaseState(t, "x", breaking, locked, noDur)
		_, err = e.lease(t, "x", idB).AcquireLease(e.ctx, 15, nil)
		wantErr(t, err, 409, "LeaseAlreadyPresent")
		resp, err = lx.BreakLease(e.ctx, nil)
		noErr(t, err, "break x again")
		equal(t, "x's lease time left", deref(resp.LeaseTime), int32(2)) // 1.8 s left, rounded
		time.Sleep(2800 * time.Millisecond)                              // 4 s
		e.leaseState(t, "x", broken, unlocked, noDur)
		_, err = lx.RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIsBrokenAndCannotBeRenewed")
		e.acquire(t, "x", idB, 15)
		e.leaseState(t, "z", breaking, locked, noDur)
		time.Sleep(3 * time.Second) // 7 s
		e.leaseState(t, "z", broken, unlocked, noDur)
		e.leaseState(t, "y", breaking, locked, noDur)
		time.Sleep(9 * time.Second) // 16 s: y's lease would have expired at 15 s
		e.leaseState(t, "y", broken, unlocked, noDur)
		_, err = ly.AcquireLease(e.ctx, 15, nil)
		noErr(t, err, "the old holder acquires a broken lease")
	}},
	{name: "last-modified", timed: true, run: func(t *testing.T, e *env) {
		e.put(t, "b", nil)
		lm := *e.props(t, "b").LastModified
		time.Sleep(1100 * time.Millisecond)
		lc := e.acquire(t, "b", idA, 15)
		_, err := lc.RenewLease(e.ctx, nil)
		noErr(t, err, "renew")
		_, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		noErr(t, err, "break")
		lc = e.acquire(t, "b", idB, -1)
		_, err = lc.ChangeLease(e.ctx, idC, nil)
		noErr(t, err, "change")
		_, err = lc.ReleaseLease(e.ctx, nil)
		noErr(t, err, "release")
		equal(t, "Last-Modified after lease actions", e.props(t, "b").LastModified.Equal(lm), true)
		resp, err := e.blob("b").SetMetadata(e.ctx, meta(map[string]string{"k": "v"}), nil)
		noErr(t, err, "set metadata")
		equal(t, "Last-Modified after a write", resp.LastModified.After(lm), true)
		lm = *resp.LastModified
		equal(t, "as read", e.props(t, "b").LastModified.Equal(lm), true)
		time.Sleep(1100 * time.Millisecond)
		up, err := e.blob("b").Upload(e.ctx, body("z"), nil)
		noErr(t, err, "upload")
		equal(t, "Last-Modified after an upload", up.LastModified.After(lm), true)
		// If-Unmodified-Since the old time now fails.
		_, err = e.blob("b").SetMetadata(e.ctx, nil, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfUnmodifiedSince: &lm}}})
		wantErr(t, err, 412, "ConditionNotMet")
	}},
}
