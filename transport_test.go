package leaderelection

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// With the default settings (no ClientOptions) the requests go through a
// transport of the library's own, whose pooled connections, and their
// goroutines, are closed when RunTaskWhenMutexAcquired returns. The SDK's
// shared default transport would keep them. Not parallel: it counts
// goroutines.
func TestNoGoroutineOutlivesRunTaskWhenMutexAcquiredWithDefaultSettings(t *testing.T) {
	s := testSettings(t) // starts the shared Azurite before goroutines are counted
	require.Nil(t, s.ClientOptions)
	leadThenStop(t, s, func() {})
}

// A caller who drives the manager directly closes its idle connections with
// CloseIdleConnections. Not parallel: it counts goroutines.
func TestCloseIdleConnectionsLeavesNoGoroutineBehind(t *testing.T) {
	s := testSettings(t)
	before := goleak.IgnoreCurrent()
	m, err := NewBlobLeaseManager(s, WithLogger(testLogger(t, "manager")))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = m.Acquire(ctx)
	require.NoError(t, err)
	_, err = m.Inspect(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Release(ctx))
	m.CloseIdleConnections()
	goleak.VerifyNone(t, before)

	// The manager still works afterwards, on a new connection.
	_, err = m.Inspect(ctx)
	require.NoError(t, err)
	m.CloseIdleConnections()
	goleak.VerifyNone(t, before)
}

// A transport the caller brought stays the caller's: its idle connections
// survive RunTaskWhenMutexAcquired, ready for the caller's next request.
func TestCallersTransportKeepsItsConnections(t *testing.T) {
	t.Parallel()
	s := testSettings(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}
	// The func ends the run as it leads: its term's end and release are
	// answered, not cut off by a deadline in flight (which closes the
	// connection of the request it cuts: once in four full-suite runs
	// on a loaded 2-core machine, when the run ended on a timer).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := NewBlobDistributedMutex(s, func(context.Context) error { cancel(); return nil }, WithLogger(testLogger(t, "a")))
	require.NoError(t, err)
	require.ErrorIs(t, m.RunTaskWhenMutexAcquired(ctx), context.Canceled)

	reused := false
	traced := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	})
	req, err := http.NewRequestWithContext(traced, http.MethodGet, connectionStringURL(t, s.ConnectionString)+"?comp=list", nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.True(t, reused, "the caller's pooled connection was closed")
}
