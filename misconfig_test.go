package leaderelection

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runUntilItGivesUp runs a mutex on s until RunTaskWhenMutexAcquired returns
// (within 30 s at most), and says how long that took and what it logged.
func runUntilItGivesUp(t *testing.T, s BlobSettings) (took time.Duration, logs string, err error) {
	t.Helper()
	var buf syncBuffer
	m, err := NewBlobDistributedMutex(s, untilCancelled, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = m.RunTaskWhenMutexAcquired(ctx)
	took = time.Since(start)
	t.Logf("returned after %v: %v", took, err)
	return took, buf.String(), err
}

// An https URL to an endpoint that speaks plain http is a misconfiguration:
// it fails at once, like a wrong key, rather than being retried forever.
func TestHTTPSURLToAPlainHTTPEndpointFailsPromptly(t *testing.T) {
	t.Parallel()
	key := testSettings(t)
	viaSAS := sasSettings(t, key)
	sig := func() string {
		u, err := url.Parse(viaSAS.SASURL)
		require.NoError(t, err)
		return u.Query().Get("sig")
	}()
	viaSAS.SASURL = strings.Replace(viaSAS.SASURL, "http://", "https://", 1)
	viaKey := key
	viaKey.ConnectionString = strings.Replace(key.ConnectionString, "BlobEndpoint=http://", "BlobEndpoint=https://", 1)
	require.Contains(t, viaKey.ConnectionString, "BlobEndpoint=https://127.0.0.1:")

	for name, s := range map[string]BlobSettings{"SAS URL": viaSAS, "connection string": viaKey} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s.Blob += strings.ReplaceAll(name, " ", "-")
			took, logs, err := runUntilItGivesUp(t, s)
			require.ErrorIs(t, err, ErrPermanent)
			assert.Less(t, took, 5*time.Second)
			assert.ErrorContains(t, err, "answered https with plain http")
			for _, secret := range []string{sig, azurite.AccountKey} {
				assert.NotContains(t, err.Error(), secret)
				assert.NotContains(t, logs, secret)
			}
		})
	}
}

// tlsEndpoint serves TLS on a loopback port of its own, with cfg, and
// returns a SAS URL for it.
func tlsEndpoint(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = cfg
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError) // handshake errors are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL + "/devstoreaccount1?sv=2023-01-01&ss=b&srt=sco&sp=rwc&se=2030-01-01T00:00:00Z&sig=c2lnbmF0dXJlc2VjcmV0"
}

// rawEndpoint accepts connections on a loopback port and hands each to
// serve, until the test ends.
func rawEndpoint(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serve(c) })
		}
	})
	return "https://" + l.Addr().String() + "/devstoreaccount1?sv=2023-01-01&ss=b&srt=sco&sp=rwc&se=2030-01-01T00:00:00Z&sig=c2lnbmF0dXJlc2VjcmV0"
}

// A TLS handshake that cannot succeed (an endpoint that shares no TLS version
// with us, or does not speak TLS at all) fails at once too.
func TestTLSHandshakeThatCannotSucceedFailsPromptly(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		url  string
		want string
	}{
		"no common TLS version": {tlsEndpoint(t, &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}),
			"TLS handshake refused by the endpoint: remote error: tls: protocol version not supported"},
		"not TLS": {rawEndpoint(t, func(c net.Conn) {
			defer c.Close()
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			_, _ = c.Read(make([]byte, 1))
		}), "the endpoint does not speak TLS"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := BlobSettings{SASURL: tc.url, Container: "leases", Blob: "b", RetryInterval: 500 * time.Millisecond}
			took, logs, err := runUntilItGivesUp(t, s)
			require.ErrorIs(t, err, ErrPermanent)
			assert.Less(t, took, 5*time.Second)
			assert.ErrorContains(t, err, tc.want)
			assert.NotContains(t, err.Error(), "c2lnbmF0dXJlc2VjcmV0")
			assert.NotContains(t, logs, "c2lnbmF0dXJlc2VjcmV0")
		})
	}
}

// What may pass stays transient: a TLS handshake that times out, a
// connection reset during the handshake, and, once the endpoint has
// answered, even a handshake that fails.
func TestTransientTLSFailuresStayTransient(t *testing.T) {
	t.Parallel()
	// An endpoint that accepts and never answers: the handshake times out.
	silent := rawEndpoint(t, func(c net.Conn) {
		defer c.Close()
		_, _ = c.Read(make([]byte, 1<<16))
		time.Sleep(2 * time.Second)
	})
	// One that resets every connection as the handshake begins.
	resetting := rawEndpoint(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 1))
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSHandshakeTimeout = 200 * time.Millisecond
	t.Cleanup(tr.CloseIdleConnections)
	inspect := func(m *BlobLeaseManager) error {
		_, err := m.Inspect(context.Background())
		return err
	}
	manager := func(raw string) *BlobLeaseManager {
		m, err := NewBlobLeaseManager(BlobSettings{SASURL: raw, Container: "leases", Blob: "b",
			ClientOptions: &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}})
		require.NoError(t, err)
		return m
	}
	for name, raw := range map[string]string{"handshake timeout": silent, "reset": resetting} {
		err := inspect(manager(raw))
		require.Error(t, err, name)
		assert.ErrorIs(t, err, ErrTransient, name)
	}

	refused := manager(tlsEndpoint(t, &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}))
	err := inspect(refused)
	assert.ErrorIs(t, err, ErrPermanent, "never answered")
	refused.containerClient.MarkReached()
	err = inspect(refused)
	assert.ErrorIs(t, err, ErrTransient, "answered before: a fault on the way")
	assert.False(t, errors.Is(err, context.DeadlineExceeded))
}

// Azurite on a port of its own, named beside UseDevelopmentStorage=true, is
// refused, not silently replaced by 127.0.0.1:10000; the form the error
// suggests instead (the development account at that endpoint) reaches it.
func TestDevelopmentStorageOnAnotherPortIsRefusedAndTheSuggestedFormWorks(t *testing.T) {
	t.Parallel()
	s := testSettings(t)
	_, rest, ok := strings.Cut(s.ConnectionString, "BlobEndpoint=")
	require.True(t, ok, "the test's connection string names its endpoint")
	endpoint, _, _ := strings.Cut(rest, ";")
	require.NotContains(t, endpoint, ":10000/", "an Azurite of the test's own, on another port")

	refused := s
	refused.ConnectionString = "UseDevelopmentStorage=true;BlobEndpoint=" + endpoint
	_, err := NewBlobDistributedMutex(refused, untilCancelled)
	require.ErrorContains(t, err, "BlobSettings.ConnectionString: UseDevelopmentStorage=true names Azurite's endpoint")
	require.ErrorContains(t, err, "found BlobEndpoint.")

	suggested := s
	suggested.ConnectionString = "AccountName=devstoreaccount1;AccountKey=" + azurite.AccountKey + ";BlobEndpoint=" + endpoint
	m, err := NewBlobLeaseManager(suggested)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = m.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Release(ctx))
	m.CloseIdleConnections()
}
