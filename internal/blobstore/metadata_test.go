package blobstore

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Metadata storage refuses is reported as it is refused, and is Permanent:
// sending it again cannot help. A value the server would not read as signed
// (spaces at an end, non-ASCII) is answered 403; a value net/http will not
// send (a newline) never leaves the client, and says so, without the value.
func TestMetadataStorageRefusesIsPermanent(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		b := e.cl.Blob("b")
		_, err := b.Put(t.Context(), WriteOptions{})
		require.NoError(t, err)
		for _, v := range []string{"x ", " x", "caf\u00e9"} {
			_, err = b.SetMetadata(t.Context(), SetMetadataOptions{Metadata: map[string]*string{"k": to.Ptr(v)}})
			wantErr(t, err, 403, "AuthorizationFailure", Permanent)
		}
		const secret = "s3cr3t\nvalue"
		_, err = b.SetMetadata(t.Context(), SetMetadataOptions{Metadata: map[string]*string{"k": to.Ptr(secret)}})
		var se *Error
		require.ErrorAs(t, err, &se)
		assert.Equal(t, Permanent, se.Kind, "%v", se)
		assert.True(t, se.Unsent, "never sent: %v", se)
		assert.Equal(t, `request not sent: net/http: invalid header field value for "x-ms-meta-k"`, se.Detail)
		assert.NotContains(t, err.Error(), "s3cr3t")
		_, err = b.Create(t.Context(), WriteOptions{Metadata: map[string]*string{"a b": to.Ptr("v")}})
		require.ErrorAs(t, err, &se)
		assert.Equal(t, Permanent, se.Kind, "%v", se)
		assert.Equal(t, `request not sent: net/http: invalid header field name "x-ms-meta-a b"`, se.Detail)
	})
}
