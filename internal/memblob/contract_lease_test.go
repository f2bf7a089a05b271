package memblob

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

func init() {
	contractCases = append(contractCases, conditionCases...)
	contractCases = append(contractCases, leaseCases...)
}

// conditionCases are the conditional headers on writes, reads and lease
// actions.
var conditionCases = []contractCase{
	{name: "upload-if-none-match-star", run: func(t *testing.T, e *env) {
		create := &blockblob.UploadOptions{AccessConditions: ifNoneMatch(azcore.ETagAny)}
		_, err := e.blob("b").Upload(e.ctx, body("x"), create)
		noErr(t, err, "create absent blob")
		etag := e.props(t, "b").ETag
		_, err = e.blob("b").Upload(e.ctx, body("y"), create)
		wantErr(t, err, 409, "BlobAlreadyExists")
		equal(t, "unchanged", *e.props(t, "b").ETag, *etag)
		// Even on a leased blob, presenting no lease: the existence check
		// comes before the lease's.
		e.acquire(t, "b", idA, 15)
		_, err = e.blob("b").Upload(e.ctx, body("y"), create)
		wantErr(t, err, 409, "BlobAlreadyExists")
	}},
	{name: "upload-if-match", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		_, err := e.blob("b").Upload(e.ctx, body("y"), &blockblob.UploadOptions{AccessConditions: ifMatch(staleETag)})
		wantErr(t, err, 412, "ConditionNotMet")
		resp, err := e.blob("b").Upload(e.ctx, body("y"), &blockblob.UploadOptions{AccessConditions: ifMatch(etag)})
		noErr(t, err, "upload on the current ETag")
		equal(t, "new ETag", *resp.ETag != etag, true)
		_, err = e.blob("none").Upload(e.ctx, body("y"), &blockblob.UploadOptions{AccessConditions: ifMatch(etag)})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("none").Upload(e.ctx, body("y"), &blockblob.UploadOptions{AccessConditions: ifMatch(azcore.ETagAny)})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("b").Upload(e.ctx, body("z"), &blockblob.UploadOptions{AccessConditions: ifMatch(azcore.ETagAny)})
		noErr(t, err, "If-Match: * on an existing blob")
		_, err = e.blob("b").Upload(e.ctx, body("z"), &blockblob.UploadOptions{AccessConditions: ifNoneMatch(staleETag)})
		noErr(t, err, "If-None-Match on another ETag")
	}},
	{name: "set-metadata-conditions", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		md := meta(map[string]string{"k": "v"})
		_, err := e.blob("b").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: ifMatch(staleETag)})
		wantErr(t, err, 412, "ConditionNotMet")
		equal(t, "unchanged", *e.props(t, "b").ETag, etag)
		_, err = e.blob("b").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: ifNoneMatch(etag)})
		wantErr(t, err, 412, "ConditionNotMet")
		resp, err := e.blob("b").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: ifMatch(etag)})
		noErr(t, err, "set metadata on the current ETag")
		_, err = e.blob("b").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: ifNoneMatch(etag)})
		noErr(t, err, "If-None-Match on an old ETag")
		_, err = e.blob("b").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: ifMatch(*resp.ETag)})
		wantErr(t, err, 412, "ConditionNotMet")
		// On a missing blob the condition is judged first: 412, not 404.
		_, err = e.blob("none").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: ifMatch(etag)})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("none").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: ifNoneMatch(etag)})
		wantErr(t, err, 404, "BlobNotFound")
	}},
	{name: "if-none-match-star-existing", run: func(t *testing.T, e *env) {
		// Azurite divergence: Azure answers 412 ConditionNotMet to
		// If-None-Match: * on an existing blob for every write but Put
		// Blob (409); Azurite lets it pass.
		etag := e.put(t, "b", nil)
		_, err := e.blob("b").SetMetadata(e.ctx, meta(map[string]string{"k": "v"}),
			&blob.SetMetadataOptions{AccessConditions: ifNoneMatch(azcore.ETagAny)})
		noErr(t, err, "set metadata, If-None-Match: *")
		equal(t, "written", *e.props(t, "b").ETag != etag, true)
		lc := e.lease(t, "b", idA)
		_, err = lc.AcquireLease(e.ctx, 15, &lease.BlobAcquireOptions{ModifiedAccessConditions: mac("", azcore.ETagAny)})
		noErr(t, err, "acquire, If-None-Match: *")
		_, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{ModifiedAccessConditions: mac("", azcore.ETagAny)})
		noErr(t, err, "break, If-None-Match: *")
		e.put(t, "c", nil)
		_, err = e.blob("c").Delete(e.ctx, &blob.DeleteOptions{AccessConditions: ifNoneMatch(azcore.ETagAny)})
		noErr(t, err, "delete, If-None-Match: *")
	}},
	{name: "delete-conditions", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		_, err := e.blob("b").Delete(e.ctx, &blob.DeleteOptions{AccessConditions: ifMatch(staleETag)})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("b").Delete(e.ctx, &blob.DeleteOptions{AccessConditions: ifNoneMatch(etag)})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("b").Delete(e.ctx, &blob.DeleteOptions{AccessConditions: ifMatch(etag)})
		noErr(t, err, "delete on the current ETag")
		_, err = e.blob("b").Delete(e.ctx, &blob.DeleteOptions{AccessConditions: ifMatch(etag)})
		wantErr(t, err, 412, "ConditionNotMet")
	}},
	{name: "lease-conditions", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		lc := e.lease(t, "b", idA)
		_, err := lc.AcquireLease(e.ctx, 15, &lease.BlobAcquireOptions{ModifiedAccessConditions: mac(staleETag, "")})
		wantErr(t, err, 412, "ConditionNotMet")
		e.leaseState(t, "b", available, unlocked, noDur)
		_, err = lc.AcquireLease(e.ctx, 15, &lease.BlobAcquireOptions{ModifiedAccessConditions: mac("", etag)})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = lc.AcquireLease(e.ctx, 15, &lease.BlobAcquireOptions{ModifiedAccessConditions: mac(etag, "")})
		noErr(t, err, "acquire on the current ETag")
		_, err = lc.RenewLease(e.ctx, &lease.BlobRenewOptions{ModifiedAccessConditions: mac(staleETag, "")})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = lc.RenewLease(e.ctx, &lease.BlobRenewOptions{ModifiedAccessConditions: mac(etag, "")})
		noErr(t, err, "renew on the current ETag")
		_, err = lc.ChangeLease(e.ctx, idB, &lease.BlobChangeOptions{ModifiedAccessConditions: mac(staleETag, "")})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = lc.ChangeLease(e.ctx, idB, &lease.BlobChangeOptions{ModifiedAccessConditions: mac(etag, "")})
		noErr(t, err, "change on the current ETag")
		_, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0), ModifiedAccessConditions: mac(staleETag, "")})
		wantErr(t, err, 412, "ConditionNotMet")
		e.leaseState(t, "b", leased, locked, fixed)
		_, err = lc.ReleaseLease(e.ctx, &lease.BlobReleaseOptions{ModifiedAccessConditions: mac(staleETag, "")})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0), ModifiedAccessConditions: mac(etag, "")})
		noErr(t, err, "break on the current ETag")
		e.leaseState(t, "b", broken, unlocked, noDur)
	}},
	{name: "multiple-conditions", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		md := meta(map[string]string{"k": "v"})
		two := azcore.ETag(string(etag) + "," + string(staleETag))
		_, err := e.blob("b").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: ifMatch(two)})
		wantErr(t, err, 400, "MultipleConditionHeadersNotSupported")
		both := &blob.AccessConditions{ModifiedAccessConditions: mac(etag, staleETag)}
		_, err = e.blob("b").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: both})
		wantErr(t, err, 400, "MultipleConditionHeadersNotSupported")
		lc := e.lease(t, "b", idA)
		_, err = lc.AcquireLease(e.ctx, 15, &lease.BlobAcquireOptions{ModifiedAccessConditions: mac(etag, staleETag)})
		wantErr(t, err, 400, "MultipleConditionHeadersNotSupported")
		equal(t, "unchanged", *e.props(t, "b").ETag, etag)
	}},
	{name: "date-conditions", run: func(t *testing.T, e *env) {
		e.put(t, "b", nil)
		lm := *e.props(t, "b").LastModified
		md := meta(map[string]string{"k": "v"})
		cond := func(m blob.ModifiedAccessConditions) *blob.SetMetadataOptions {
			return &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &m}}
		}
		before, after := lm.Add(-time1), lm.Add(time1)
		_, err := e.blob("b").SetMetadata(e.ctx, md, cond(blob.ModifiedAccessConditions{IfModifiedSince: &after}))
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("b").SetMetadata(e.ctx, md, cond(blob.ModifiedAccessConditions{IfModifiedSince: &lm}))
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("b").SetMetadata(e.ctx, md, cond(blob.ModifiedAccessConditions{IfUnmodifiedSince: &before}))
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("b").SetMetadata(e.ctx, md, cond(blob.ModifiedAccessConditions{IfModifiedSince: &before}))
		noErr(t, err, "modified since before")
		lm = *e.props(t, "b").LastModified
		_, err = e.blob("b").SetMetadata(e.ctx, md, cond(blob.ModifiedAccessConditions{IfUnmodifiedSince: &lm}))
		noErr(t, err, "unmodified since its Last-Modified")
	}},
	{name: "read-conditions", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		_, err := e.blob("b").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: ifMatch(staleETag)})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("b").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: ifMatch(etag)})
		noErr(t, err, "HEAD on the current ETag")
		_, err = e.blob("b").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: ifNoneMatch(etag)})
		wantErr(t, err, 304, "ConditionNotMet")
		// The SDK takes Get Blob's 304 as a success (with no body); the
		// transcript shows the 304.
		_, err = e.blob("b").DownloadStream(e.ctx, &blob.DownloadStreamOptions{AccessConditions: ifNoneMatch(etag)})
		noErr(t, err, "GET If-None-Match the current ETag")
		_, err = e.blob("b").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: ifNoneMatch(staleETag)})
		noErr(t, err, "HEAD If-None-Match another ETag")
		_, err = e.blob("b").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: ifNoneMatch(azcore.ETagAny)})
		wantErr(t, err, 400, "UnsatisfiableCondition")
		_, err = e.blob("b").DownloadStream(e.ctx, &blob.DownloadStreamOptions{AccessConditions: ifMatch(staleETag)})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("none").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: ifMatch(etag)})
		wantErr(t, err, 412, "ConditionNotMet")
		_, err = e.blob("none").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: ifNoneMatch(azcore.ETagAny)})
		wantErr(t, err, 400, "UnsatisfiableCondition")
		_, err = e.blob("none").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: ifNoneMatch(etag)})
		wantErr(t, err, 404, "BlobNotFound")
	}},
}

// leaseCases are the lease actions in each state, and what a lease does to
// writes and reads. The timed ones are in contract_timed_test.go.
var leaseCases = []contractCase{
	{name: "acquire", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		lm := *e.props(t, "b").LastModified
		resp, err := e.lease(t, "b", idA).AcquireLease(e.ctx, 15, nil)
		noErr(t, err, "acquire")
		equal(t, "answered lease ID", deref(resp.LeaseID), idA)
		equal(t, "answered ETag", deref(resp.ETag), etag)
		e.leaseState(t, "b", leased, locked, fixed)
		p := e.props(t, "b")
		equal(t, "ETag kept", *p.ETag, etag)
		equal(t, "Last-Modified kept", p.LastModified.Equal(lm), true)
		e.put(t, "inf", nil)
		e.acquire(t, "inf", idB, -1)
		e.leaseState(t, "inf", leased, locked, infinite)
		e.put(t, "max", nil)
		e.acquire(t, "max", idB, 60)
		e.leaseState(t, "max", leased, locked, fixed)
	}},
	{name: "acquire-bad-durations", run: func(t *testing.T, e *env) {
		e.put(t, "b", nil)
		for _, d := range []int32{0, 10, 14, 61, -2} {
			_, err := e.lease(t, "b", idA).AcquireLease(e.ctx, d, nil)
			wantErr(t, err, 400, "InvalidHeaderValue")
		}
		e.leaseState(t, "b", available, unlocked, noDur)
		e.acquire(t, "b", idA, 15)
		// The holder's acquire checks the duration...
		_, err := e.lease(t, "b", idA).AcquireLease(e.ctx, 10, nil)
		wantErr(t, err, 400, "InvalidHeaderValue")
		// ...but another's is refused for the lease first (Azurite
		// checks the ID before the duration).
		_, err = e.lease(t, "b", idB).AcquireLease(e.ctx, 10, nil)
		wantErr(t, err, 409, "LeaseAlreadyPresent")
		e.leaseState(t, "b", leased, locked, fixed)
	}},
	{name: "acquire-while-held", run: func(t *testing.T, e *env) {
		e.put(t, "b", nil)
		e.acquire(t, "b", idA, 15)
		_, err := e.lease(t, "b", idB).AcquireLease(e.ctx, 15, nil)
		wantErr(t, err, 409, "LeaseAlreadyPresent")
		// The same ID again: 201, the lease extended (a retry of an
		// acquire whose answer was lost is safe).
		resp, err := e.lease(t, "b", idA).AcquireLease(e.ctx, 30, nil)
		noErr(t, err, "acquire again with the same ID")
		equal(t, "lease ID", deref(resp.LeaseID), idA)
		// ...and may change the duration, to infinite and back.
		e.acquire(t, "b", idA, -1)
		e.leaseState(t, "b", leased, locked, infinite)
		_, err = e.lease(t, "b", idB).AcquireLease(e.ctx, -1, nil)
		wantErr(t, err, 409, "LeaseAlreadyPresent")
		e.acquire(t, "b", idA, 20)
		e.leaseState(t, "b", leased, locked, fixed)
	}},
	{name: "renew", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		_, err := e.lease(t, "b", idA).RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		lc := e.acquire(t, "b", idA, 15)
		resp, err := lc.RenewLease(e.ctx, nil)
		noErr(t, err, "renew")
		equal(t, "answered lease ID", deref(resp.LeaseID), idA)
		equal(t, "answered ETag", deref(resp.ETag), etag)
		_, err = e.lease(t, "b", idB).RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		e.put(t, "inf", nil)
		_, err = e.acquire(t, "inf", idA, -1).RenewLease(e.ctx, nil)
		noErr(t, err, "renew an infinite lease")
		e.leaseState(t, "inf", leased, locked, infinite)
		equal(t, "ETag kept", *e.props(t, "b").ETag, etag)
	}},
	{name: "lease-id-case", run: func(t *testing.T, e *env) {
		// Azurite compares lease IDs exactly in lease actions but without
		// case in writes and reads. Azure treats lease IDs as GUIDs.
		e.put(t, "b", nil)
		e.acquire(t, "b", idA, 15)
		upper := "AAAAAAAA-0000-4000-8000-000000000001"
		_, err := e.lease(t, "b", upper).RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		_, err = e.lease(t, "b", upper).AcquireLease(e.ctx, 15, nil)
		wantErr(t, err, 409, "LeaseAlreadyPresent")
		_, err = e.blob("b").SetMetadata(e.ctx, nil, &blob.SetMetadataOptions{AccessConditions: withLease(upper)})
		noErr(t, err, "write with the ID in upper case")
		_, err = e.blob("b").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: withLease(upper)})
		noErr(t, err, "read with the ID in upper case")
	}},
	{name: "release", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		_, err := e.lease(t, "b", idA).ReleaseLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		lc := e.acquire(t, "b", idA, 15)
		_, err = e.lease(t, "b", idB).ReleaseLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		resp, err := lc.ReleaseLease(e.ctx, nil)
		noErr(t, err, "release")
		equal(t, "answered ETag", deref(resp.ETag), etag)
		e.leaseState(t, "b", available, unlocked, noDur)
		_, err = lc.RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		_, err = lc.ReleaseLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		// Anyone may take it now.
		e.acquire(t, "b", idB, 15)
		equal(t, "ETag kept", *e.props(t, "b").ETag, etag)
	}},
	{name: "change", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		_, err := e.lease(t, "b", idA).ChangeLease(e.ctx, idB, nil)
		wantErr(t, err, 409, "LeaseNotPresentWithLeaseOperation")
		e.acquire(t, "b", idA, 15)
		lc := e.lease(t, "b", idA)
		resp, err := lc.ChangeLease(e.ctx, idB, nil)
		noErr(t, err, "change")
		equal(t, "answered lease ID", deref(resp.LeaseID), idB)
		equal(t, "answered ETag", deref(resp.ETag), etag)
		e.leaseState(t, "b", leased, locked, fixed)
		_, err = e.lease(t, "b", idA).RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		_, err = e.lease(t, "b", idB).RenewLease(e.ctx, nil)
		noErr(t, err, "renew with the new ID")
		// A change retried (its answer lost) succeeds: the proposed ID
		// already holds the lease.
		_, err = e.lease(t, "b", idA).ChangeLease(e.ctx, idB, nil)
		noErr(t, err, "change retried")
		_, err = e.lease(t, "b", idA).ChangeLease(e.ctx, idC, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		_, err = e.lease(t, "b", idB).ChangeLease(e.ctx, idC, nil)
		noErr(t, err, "change again")
		_, err = e.blob("b").SetMetadata(e.ctx, nil, &blob.SetMetadataOptions{AccessConditions: withLease(idB)})
		wantErr(t, err, 412, "LeaseIdMismatchWithBlobOperation")
		_, err = e.lease(t, "b", idC).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		noErr(t, err, "break")
		_, err = e.lease(t, "b", idC).ChangeLease(e.ctx, idA, nil)
		wantErr(t, err, 409, "LeaseNotPresentWithLeaseOperation")
		equal(t, "ETag kept", *e.props(t, "b").ETag, etag)
	}},
	{name: "break-now", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		lc := e.acquire(t, "b", idA, 60)
		resp, err := e.lease(t, "b", idB).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		noErr(t, err, "break, period 0")
		equal(t, "lease time", deref(resp.LeaseTime), int32(0))
		equal(t, "answered ETag", deref(resp.ETag), etag)
		e.leaseState(t, "b", broken, unlocked, noDur)
		_, err = lc.RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIsBrokenAndCannotBeRenewed")
		_, err = e.lease(t, "b", idB).RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		_, err = lc.AcquireLease(e.ctx, 15, &lease.BlobAcquireOptions{})
		noErr(t, err, "the old holder may acquire again")
		_, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		noErr(t, err, "break again")
		resp, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](30)})
		noErr(t, err, "break a broken lease")
		equal(t, "lease time", deref(resp.LeaseTime), int32(0))
		e.leaseState(t, "b", broken, unlocked, noDur)
		_, err = e.lease(t, "b", idB).AcquireLease(e.ctx, 15, nil)
		noErr(t, err, "another may acquire a broken lease")
		// The holder of a broken lease may release it.
		e.put(t, "c", nil)
		lc = e.acquire(t, "c", idA, 15)
		_, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		noErr(t, err, "break c")
		_, err = e.lease(t, "c", idB).ReleaseLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		_, err = lc.ReleaseLease(e.ctx, nil)
		noErr(t, err, "release a broken lease")
		e.leaseState(t, "c", available, unlocked, noDur)
		equal(t, "ETag kept", *e.props(t, "b").ETag, etag)
	}},
	{name: "break-no-lease", run: func(t *testing.T, e *env) {
		e.put(t, "b", nil)
		_, err := e.lease(t, "b", idA).BreakLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseNotPresentWithLeaseOperation")
		_, err = e.lease(t, "b", idA).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		wantErr(t, err, 409, "LeaseNotPresentWithLeaseOperation")
	}},
	{name: "break-infinite", run: func(t *testing.T, e *env) {
		e.put(t, "b", nil)
		e.acquire(t, "b", idA, -1)
		resp, err := e.lease(t, "b", idB).BreakLease(e.ctx, nil)
		noErr(t, err, "break an infinite lease, no period")
		equal(t, "lease time", deref(resp.LeaseTime), int32(0))
		e.leaseState(t, "b", broken, unlocked, noDur)
		e.acquire(t, "b", idC, 15)
		e.put(t, "c", nil)
		e.acquire(t, "c", idA, -1)
		_, err = e.lease(t, "c", idB).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		noErr(t, err, "break an infinite lease, period 0")
		e.leaseState(t, "c", broken, unlocked, noDur)
		e.acquire(t, "c", idC, -1)
		resp, err = e.lease(t, "c", idB).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](20)})
		noErr(t, err, "break an infinite lease, period 20")
		equal(t, "lease time", deref(resp.LeaseTime), int32(20))
		e.leaseState(t, "c", breaking, locked, noDur)
	}},
	{name: "break-period-out-of-range", run: func(t *testing.T, e *env) {
		e.put(t, "b", nil)
		e.acquire(t, "b", idA, 30)
		// (-1 is the SDK's lease.BreakNaturally: it sends no period.)
		for _, p := range []int32{61, -2} {
			_, err := e.lease(t, "b", idB).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr(p)})
			wantErr(t, err, 400, "InvalidHeaderValue")
		}
		e.leaseState(t, "b", leased, locked, fixed)
		// Azurite divergence: an infinite lease takes any period there
		// (Azure: 400 InvalidHeaderValue).
		e.put(t, "inf", nil)
		e.acquire(t, "inf", idA, -1)
		resp, err := e.lease(t, "inf", idB).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](61)})
		noErr(t, err, "break an infinite lease, period 61")
		equal(t, "lease time", deref(resp.LeaseTime), int32(61))
		e.leaseState(t, "inf", breaking, locked, noDur)
		// A breaking lease checks the period again.
		_, err = e.lease(t, "inf", idB).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](61)})
		wantErr(t, err, 400, "InvalidHeaderValue")
	}},
	{name: "breaking", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		lc := e.acquire(t, "b", idA, 60)
		resp, err := e.lease(t, "b", idB).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](40)})
		noErr(t, err, "break, period 40")
		equal(t, "lease time", deref(resp.LeaseTime), int32(40))
		e.leaseState(t, "b", breaking, locked, noDur)
		_, err = e.lease(t, "b", idB).AcquireLease(e.ctx, 15, nil)
		wantErr(t, err, 409, "LeaseAlreadyPresent")
		_, err = lc.AcquireLease(e.ctx, 15, nil)
		wantErr(t, err, 409, "LeaseIsBreakingAndCannotBeAcquired")
		_, err = lc.RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIsBrokenAndCannotBeRenewed")
		_, err = e.lease(t, "b", idB).RenewLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		_, err = lc.ChangeLease(e.ctx, idC, nil)
		wantErr(t, err, 409, "LeaseIsBreakingAndCannotBeChanged")
		_, err = e.lease(t, "b", idB).ChangeLease(e.ctx, idC, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		// A breaking lease still locks the blob: writes need its ID.
		_, err = e.blob("b").SetMetadata(e.ctx, nil, nil)
		wantErr(t, err, 412, "LeaseIdMissing")
		_, err = e.blob("b").SetMetadata(e.ctx, nil, &blob.SetMetadataOptions{AccessConditions: withLease(idB)})
		wantErr(t, err, 412, "LeaseIdMismatchWithBlobOperation")
		_, err = e.blob("b").SetMetadata(e.ctx, meta(map[string]string{"k": "v"}),
			&blob.SetMetadataOptions{AccessConditions: withLease(idA)})
		noErr(t, err, "write with the breaking lease's ID")
		e.leaseState(t, "b", breaking, locked, noDur)
		// A second break may shorten the period, never lengthen it.
		resp, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](50)})
		noErr(t, err, "break again, longer")
		equal(t, "lease time kept", deref(resp.LeaseTime), int32(40))
		resp, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](20)})
		noErr(t, err, "break again, shorter")
		equal(t, "lease time shortened", deref(resp.LeaseTime), int32(20))
		resp, err = lc.BreakLease(e.ctx, nil)
		noErr(t, err, "break again, no period")
		equal(t, "lease time kept", deref(resp.LeaseTime), int32(20))
		_, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		noErr(t, err, "break again, now")
		e.leaseState(t, "b", broken, unlocked, noDur)
		equal(t, "written once", *e.props(t, "b").ETag != etag, true)
		// The holder may release a breaking lease.
		e.put(t, "c", nil)
		lc = e.acquire(t, "c", idA, -1)
		_, err = lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](30)})
		noErr(t, err, "break c")
		_, err = lc.ReleaseLease(e.ctx, nil)
		noErr(t, err, "release a breaking lease")
		e.leaseState(t, "c", available, unlocked, noDur)
	}},
	{name: "break-fixed-lease-periods", run: func(t *testing.T, e *env) {
		e.put(t, "b", nil)
		e.acquire(t, "b", idA, 15)
		// No period: a fixed lease breaks when it would have expired.
		resp, err := e.lease(t, "b", idB).BreakLease(e.ctx, nil)
		noErr(t, err, "break, no period")
		equal(t, "lease time", deref(resp.LeaseTime), int32(15))
		e.leaseState(t, "b", breaking, locked, noDur)
		// A period longer than the lease's remaining time is cut to it.
		e.put(t, "c", nil)
		e.acquire(t, "c", idA, 20)
		resp, err = e.lease(t, "c", idB).BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](60)})
		noErr(t, err, "break, period 60")
		equal(t, "lease time", deref(resp.LeaseTime), int32(20))
	}},
	{name: "write-needs-lease", run: func(t *testing.T, e *env) {
		e.put(t, "b", map[string]string{"k": "0"})
		e.acquire(t, "b", idA, 15)
		md := meta(map[string]string{"k": "1"})
		_, err := e.blob("b").SetMetadata(e.ctx, md, nil)
		wantErr(t, err, 412, "LeaseIdMissing")
		_, err = e.blob("b").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: withLease(idB)})
		wantErr(t, err, 412, "LeaseIdMismatchWithBlobOperation")
		equalMaps(t, "metadata unchanged", flat(e.props(t, "b").Metadata), map[string]string{"K": "0"})
		_, err = e.blob("b").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: withLease(idA)})
		noErr(t, err, "set metadata with the lease")
		_, err = e.blob("b").Upload(e.ctx, body("y"), nil)
		wantErr(t, err, 412, "LeaseIdMissing")
		_, err = e.blob("b").Upload(e.ctx, body("y"), &blockblob.UploadOptions{AccessConditions: withLease(idB)})
		wantErr(t, err, 412, "LeaseIdMismatchWithBlobOperation")
		_, err = e.blob("b").Upload(e.ctx, body("y"), &blockblob.UploadOptions{AccessConditions: withLease(idA)})
		noErr(t, err, "upload with the lease")
		// The blob written over keeps its lease.
		e.leaseState(t, "b", leased, locked, fixed)
		_, err = e.lease(t, "b", idA).RenewLease(e.ctx, nil)
		noErr(t, err, "renew after the upload")
		_, err = e.blob("b").Delete(e.ctx, nil)
		wantErr(t, err, 412, "LeaseIdMissing")
		_, err = e.blob("b").Delete(e.ctx, &blob.DeleteOptions{AccessConditions: withLease(idB)})
		wantErr(t, err, 412, "LeaseIdMismatchWithBlobOperation")
		// Reads need no lease ID, but a wrong one is refused.
		_, err = e.blob("b").GetProperties(e.ctx, nil)
		noErr(t, err, "read without the lease")
		_, err = e.blob("b").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: withLease(idB)})
		wantErr(t, err, 412, "LeaseIdMismatchWithBlobOperation")
		_, err = e.blob("b").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: withLease(idA)})
		noErr(t, err, "read with the lease")
		_, err = e.blob("b").Delete(e.ctx, &blob.DeleteOptions{AccessConditions: withLease(idA)})
		noErr(t, err, "delete with the lease")
		// A lease ID presented to a blob with no lease.
		e.put(t, "c", nil)
		_, err = e.blob("c").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: withLease(idA)})
		wantErr(t, err, 412, "LeaseNotPresentWithBlobOperation")
		_, err = e.blob("c").Upload(e.ctx, body("y"), &blockblob.UploadOptions{AccessConditions: withLease(idA)})
		wantErr(t, err, 412, "LeaseNotPresentWithBlobOperation")
		_, err = e.blob("c").Delete(e.ctx, &blob.DeleteOptions{AccessConditions: withLease(idA)})
		wantErr(t, err, 412, "LeaseNotPresentWithBlobOperation")
		_, err = e.blob("c").GetProperties(e.ctx, &blob.GetPropertiesOptions{AccessConditions: withLease(idA)})
		wantErr(t, err, 412, "LeaseNotPresentWithBlobOperation")
		// Conditions are judged before the lease.
		_, err = e.blob("c").SetMetadata(e.ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: mac(staleETag, ""), LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(idA)}}})
		wantErr(t, err, 412, "ConditionNotMet")
	}},
	{name: "write-resets-broken-lease", run: func(t *testing.T, e *env) {
		// A write that needs no lease (the lease is broken) makes the
		// blob forget the lease: its state turns to available (Azurite;
		// Azure documents that a write makes it forget an expired
		// lease's ID, not which state it then shows).
		e.put(t, "b", nil)
		lc := e.acquire(t, "b", idA, 15)
		_, err := lc.BreakLease(e.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
		noErr(t, err, "break")
		_, err = e.blob("b").SetMetadata(e.ctx, nil, &blob.SetMetadataOptions{AccessConditions: withLease(idA)})
		wantErr(t, err, 412, "LeaseNotPresentWithBlobOperation")
		e.leaseState(t, "b", broken, unlocked, noDur)
		_, err = e.blob("b").SetMetadata(e.ctx, nil, nil)
		noErr(t, err, "write on a broken lease")
		e.leaseState(t, "b", available, unlocked, noDur)
		_, err = lc.ReleaseLease(e.ctx, nil)
		wantErr(t, err, 409, "LeaseIdMismatchWithLeaseOperation")
		// Put Blob likewise.
		e.put(t, "c", nil)
		lc = e.acquire(t, "c", idA, -1)
		_, err = lc.BreakLease(e.ctx, nil)
		noErr(t, err, "break c")
		e.put(t, "c", nil)
		e.leaseState(t, "c", available, unlocked, noDur)
	}},
	{name: "lease-actions-keep-etag", run: func(t *testing.T, e *env) {
		etag := e.put(t, "b", nil)
		lc := e.acquire(t, "b", idA, -1)
		_, err := lc.RenewLease(e.ctx, nil)
		noErr(t, err, "renew")
		_, err = lc.ChangeLease(e.ctx, idB, nil)
		noErr(t, err, "change")
		_, err = lc.BreakLease(e.ctx, nil)
		noErr(t, err, "break")
		e.acquire(t, "b", idC, 15)
		_, err = e.lease(t, "b", idC).ReleaseLease(e.ctx, nil)
		noErr(t, err, "release")
		equal(t, "ETag after the lease actions", *e.props(t, "b").ETag, etag)
		resp, err := e.blob("b").SetMetadata(e.ctx, nil, nil)
		noErr(t, err, "set metadata")
		equal(t, "ETag after a write", *resp.ETag != etag, true)
	}},
}

// time1 is a second, for date conditions (Last-Modified has whole seconds).
const time1 = 1e9

func init() {
	contractCases = append(contractCases, contractCase{name: "proposed-lease-id-not-a-guid", run: func(t *testing.T, e *env) {
		// Azurite divergence: Azure wants a GUID (400
		// InvalidHeaderValue); Azurite, and the fake, take any string.
		e.put(t, "b", nil)
		lc := e.acquire(t, "b", "not-a-guid", 15)
		_, err := lc.RenewLease(e.ctx, nil)
		noErr(t, err, "renew")
		_, err = lc.ChangeLease(e.ctx, "still not one", nil)
		noErr(t, err, "change")
		_, err = e.blob("b").SetMetadata(e.ctx, nil, &blob.SetMetadataOptions{AccessConditions: withLease("still not one")})
		noErr(t, err, "write")
	}})
}
