package blobstore

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/assert"
)

// The package's lease values convert to the SDK's, which the root's public
// LeaseInfo keeps: same strings.
func TestLeaseValuesAreTheSDKs(t *testing.T) {
	for ours, sdk := range map[LeaseState]lease.StateType{
		StateAvailable: lease.StateTypeAvailable, StateLeased: lease.StateTypeLeased, StateExpired: lease.StateTypeExpired,
		StateBreaking: lease.StateTypeBreaking, StateBroken: lease.StateTypeBroken,
	} {
		assert.Equal(t, sdk, lease.StateType(ours))
	}
	assert.Equal(t, lease.StatusTypeLocked, lease.StatusType(StatusLocked))
	assert.Equal(t, lease.StatusTypeUnlocked, lease.StatusType(StatusUnlocked))
	assert.Equal(t, lease.DurationTypeFixed, lease.DurationType(DurationFixed))
	assert.Equal(t, lease.DurationTypeInfinite, lease.DurationType(DurationInfinite))
}

// The package's error codes are the SDK's, spelt alike.
func TestErrorCodesAreTheSDKs(t *testing.T) {
	for ours, sdk := range map[string]bloberror.Code{
		BlobAlreadyExists: bloberror.BlobAlreadyExists, BlobNotFound: bloberror.BlobNotFound, ConditionNotMet: bloberror.ConditionNotMet,
		ContainerAlreadyExists: bloberror.ContainerAlreadyExists, ContainerBeingDeleted: bloberror.ContainerBeingDeleted,
		ContainerNotFound: bloberror.ContainerNotFound, InvalidHeaderValue: bloberror.InvalidHeaderValue,
		LeaseAlreadyBroken: bloberror.LeaseAlreadyBroken, LeaseAlreadyPresent: bloberror.LeaseAlreadyPresent,
		LeaseIDMismatchWithBlobOperation: bloberror.LeaseIDMismatchWithBlobOperation, LeaseIDMismatchWithLeaseOperation: bloberror.LeaseIDMismatchWithLeaseOperation,
		LeaseIDMissing: bloberror.LeaseIDMissing, LeaseIsBreakingAndCannotBeAcquired: bloberror.LeaseIsBreakingAndCannotBeAcquired,
		LeaseIsBreakingAndCannotBeChanged: bloberror.LeaseIsBreakingAndCannotBeChanged, LeaseIsBrokenAndCannotBeRenewed: bloberror.LeaseIsBrokenAndCannotBeRenewed,
		LeaseLost: bloberror.LeaseLost, LeaseNotPresentWithBlobOperation: bloberror.LeaseNotPresentWithBlobOperation,
		LeaseNotPresentWithLeaseOperation: bloberror.LeaseNotPresentWithLeaseOperation,
	} {
		assert.Equal(t, string(sdk), ours)
	}
}

// Names that may hold secrets are shown as REDACTED, others quoted.
func TestNamesThatMayHoldSecretsAreNotShown(t *testing.T) {
	for _, secret := range []string{
		"AccountName=a;AccountKey=" + fakeKey,
		"BlobEndpoint=x;SharedAccessSignature=sv=1",
		"sv=2023-01-01&sig=abc",
		"sig%3Dabc",
		"https://acct.blob.core.windows.net/leases?sv=1",
		fakeKey,
		"c2lnbmF0dXJlc2VjcmV0c2lnbmF0dXJlc2VjcmV0c2ln=",
	} {
		assert.Equal(t, "REDACTED", Shown(secret), secret)
		assert.Equal(t, "REDACTED", UnlessSecret(secret), secret)
	}
	assert.True(t, CarriesSecret("https://a/b?c"))
	assert.False(t, CarriesSecret(fakeKey), "a bare key is caught by UnlessSecret, not by its marks")
	assert.Equal(t, `"leases"`, Shown("leases"))
	assert.Equal(t, "host-1", UnlessSecret("host-1"))
}

// Every kind has a name, as errors print it.
func TestKindsPrintTheirNames(t *testing.T) {
	for k, name := range map[Kind]string{Permanent: "permanent", Transient: "transient", Held: "held", Lost: "lost", 0: "Kind(0)"} {
		assert.Equal(t, name, k.String())
	}
	e := &Error{Op: "write term", Container: "c", Blob: "b", Status: 503, Kind: Transient}
	assert.Equal(t, "blobstore: write term on c/b: HTTP 503 (transient)", e.Error())
	e = &Error{Op: "write term", Container: "c", Blob: "b", Code: "X", Kind: Permanent}
	assert.Equal(t, "blobstore: write term on c/b: X (permanent)", e.Error())
}
