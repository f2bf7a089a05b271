package leaderelection

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Go's HTTP client trims leading and trailing spaces from header values, and
// metadata travels in headers: with an account key the term write was then
// refused (403 AuthorizationFailure: the SDK signs the untrimmed value), with
// a SAS the stored identity silently lost its spaces. Such identities are
// refused before anything is sent.
func TestIdentityWithOuterSpacesIsRefusedAtConstruction(t *testing.T) {
	for _, id := range []string{" pod-7", "pod-7 ", " ", "  pod  "} {
		_, err := NewBlobDistributedMutex(validSettings(), untilCancelled, WithIdentity(id))
		require.Error(t, err, "identity %q", id)
		assert.ErrorContains(t, err, "identity must not begin or end with a space")
		assert.ErrorContains(t, err, fmt.Sprintf("%q", id), "quoted, so that the spaces show")

		m, err := NewBlobLeaseManager(validSettings())
		require.NoError(t, err)
		_, err = m.RecordTerm(context.Background(), id)
		assert.ErrorContains(t, err, "identity must not begin or end with a space", "nothing is sent")
	}
}

// Inner runs of spaces are kept as they are, with an account key and with a
// SAS, so they are accepted.
func TestIdentityWithInnerSpacesIsStoredAsIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const id = "pod  7   west"
	key := testSettings(t)
	for name, s := range map[string]BlobSettings{"account key": key, "SAS": sasSettings(t, key)} {
		t.Run(name, func(t *testing.T) {
			s.Blob += strings.ReplaceAll(name, " ", "-")
			m := newManager(t, s)
			_, err := m.Acquire(ctx)
			require.NoError(t, err)
			_, err = m.RecordTerm(ctx, id)
			require.NoError(t, err)
			info, err := m.Inspect(ctx)
			require.NoError(t, err)
			assert.Equal(t, id, info.Leader.Identity)
		})
	}
}

// sasSettings turns settings for the test Azurite's account key into the same
// lease reached through an account SAS URL (read, write, create).
func sasSettings(t *testing.T, s BlobSettings) BlobSettings {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(azurite.AccountName, azurite.AccountKey)
	require.NoError(t, err)
	q, err := sas.AccountSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().Add(time.Hour).UTC(),
		Permissions:   (&sas.AccountPermissions{Read: true, Write: true, Create: true}).String(),
		ResourceTypes: (&sas.AccountResourceTypes{Service: true, Container: true, Object: true}).String(),
	}.SignWithSharedKey(cred)
	require.NoError(t, err)
	s.SASURL = connectionStringURL(t, s.ConnectionString) + "?" + q.Encode()
	s.ConnectionString = ""
	return s
}
