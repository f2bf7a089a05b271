package leaderelection

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/azuritetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// tokenSource is a token credential that hands out what fn returns, and
// counts the calls.
type tokenSource struct {
	fn    func() (string, error)
	calls atomic.Int64
}

func (c *tokenSource) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.calls.Add(1)
	tok, err := c.fn()
	return azcore.AccessToken{Token: tok, ExpiresOn: time.Now().Add(time.Hour)}, err
}

// credentialSettings returns settings for a fresh lease on the https Azurite
// (see azuritetest.HTTPS), reached by its path-style account URL with cred,
// over a transport of the test's own that trusts Azurite's certificate.
func credentialSettings(t *testing.T, cred azcore.TokenCredential) BlobSettings {
	t.Helper()
	srv, pool := azuritetest.HTTPS(t)
	s := testSettings(t)
	s.ConnectionString, s.ServiceURL, s.Credential = "", srv.URL(), cred
	s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: trustingClient(t, pool)}}
	return s
}

// trustingClient is an HTTP client on a transport of the test's own (its
// connections closed when the test ends) that trusts the certificates in
// pool.
func trustingClient(t *testing.T, pool *x509.CertPool) *http.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// The token-credential path (managed identity in production) against the
// emulator: a path-style account URL over https, a bearer token per request.
func TestTokenCredentialAcquiresAndLeads(t *testing.T) {
	t.Parallel()
	tokens := &tokenSource{fn: func() (string, error) { return azurite.Token(azurite.Audience, time.Now().Add(time.Hour)), nil }}
	s := credentialSettings(t, tokens)
	require.True(t, strings.HasPrefix(s.ServiceURL, "https://127.0.0.1:"), s.ServiceURL)
	s.RenewInterval = time.Second
	log := newTermLog()
	a := startContender(t, "a", s, log.leaderFunc("a", untilCancelled), WithIdentity("a"))
	require.Equal(t, "a", log.next(t, 10*time.Second).who)
	time.Sleep(2500 * time.Millisecond) // renewals, with the same token
	info, err := a.mutex.Leader(context.Background())
	require.NoError(t, err)
	assert.True(t, info.Held())
	assert.Equal(t, "a", info.Leader.Identity)

	startContender(t, "b", s, log.leaderFunc("b", untilCancelled), WithIdentity("b"))
	require.ErrorIs(t, a.stop(t), context.Canceled)
	assert.Equal(t, "b", log.next(t, 10*time.Second).who, "b takes over the released lease")
	log.requireNoOverlap(t)
	assert.Positive(t, tokens.calls.Load())
}

// A credential that cannot get a token is named in a prompt, permanent
// error: no retry will give it one.
func TestFailingCredentialFailsPromptlyNamingIt(t *testing.T) {
	t.Parallel()
	s := credentialSettings(t, &tokenSource{fn: func() (string, error) {
		return "", errors.New("no managed identity is assigned to this VM")
	}})
	took, _, err := runUntilItGivesUp(t, s)
	require.ErrorIs(t, err, ErrPermanent)
	assert.Less(t, took, 5*time.Second)
	assert.ErrorContains(t, err, "credential *leaderelection.tokenSource could not get a token: no managed identity is assigned to this VM")
}

// A token the storage service refuses (here, one for another audience)
// fails as promptly, with the service's error code.
func TestTokenRefusedByStorageFailsPromptly(t *testing.T) {
	t.Parallel()
	s := credentialSettings(t, &tokenSource{fn: func() (string, error) {
		return azurite.Token("https://vault.azure.net", time.Now().Add(time.Hour)), nil
	}})
	took, _, err := runUntilItGivesUp(t, s)
	require.ErrorIs(t, err, ErrPermanent)
	assert.Less(t, took, 5*time.Second)
	assert.Regexp(t, `40[13] (AuthenticationFailed|InvalidAuthenticationInfo)`, err.Error())
}

// managedIdentityEndpoint serves App Service's managed identity protocol
// (IDENTITY_ENDPOINT, IDENTITY_HEADER) on a loopback port, handing out
// tokens the https Azurite accepts, and points the environment at it for
// the test, for DefaultAzureCredential to find. clientID makes the identity
// user-assigned: the SDK caches tokens per identity for the whole process,
// and each test must ask for its own.
func managedIdentityEndpoint(t *testing.T, clientID string) (requests *atomic.Int64) {
	t.Helper()
	const header = "identity-header-for-tests"
	requests = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-IDENTITY-HEADER") != header || r.URL.Query().Get("client_id") != clientID {
			http.Error(w, "wrong identity header or client ID", http.StatusBadRequest)
			return
		}
		requests.Add(1)
		expires := time.Now().Add(time.Hour)
		_ = json.NewEncoder(w).Encode(map[string]string{
			"access_token": azurite.Token(azurite.Audience, expires),
			"expires_on":   strconv.FormatInt(expires.Unix(), 10),
			"resource":     r.URL.Query().Get("resource"),
			"token_type":   "Bearer",
			"client_id":    clientID,
		})
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AZURE_TOKEN_CREDENTIALS", "ManagedIdentityCredential")
	t.Setenv("IDENTITY_ENDPOINT", srv.URL)
	t.Setenv("IDENTITY_HEADER", header)
	t.Setenv("AZURE_CLIENT_ID", clientID)
	return requests
}

// recordingTransport passes requests on to next, and remembers their hosts.
type recordingTransport struct {
	next  *http.Client
	mu    sync.Mutex
	hosts map[string]int
}

func (r *recordingTransport) Do(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.hosts[req.URL.Host]++
	r.mu.Unlock()
	return r.next.Do(req)
}

// With Credential nil the library builds a DefaultAzureCredential, which
// gets its token over the transport the caller gave for storage. Not
// parallel: it sets environment variables.
func TestDefaultAzureCredentialUsesTheCallersTransportAndLeads(t *testing.T) {
	requests := managedIdentityEndpoint(t, "11111111-1111-1111-1111-111111111111")
	s := credentialSettings(t, nil)
	_, pool := azuritetest.HTTPS(t)
	rec := &recordingTransport{next: trustingClient(t, pool), hosts: map[string]int{}}
	s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: rec}}
	log := newTermLog()
	c := startContender(t, "a", s, log.leaderFunc("a", untilCancelled))
	log.next(t, 10*time.Second)
	require.ErrorIs(t, c.stop(t), context.Canceled)
	assert.EqualValues(t, 1, requests.Load(), "one token, cached for the term")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	identityHost := strings.TrimPrefix(os.Getenv("IDENTITY_ENDPOINT"), "http://")
	assert.Equal(t, 1, rec.hosts[identityHost], "the token request went through the caller's transport: %v", rec.hosts)
}

// With the default settings the DefaultAzureCredential gets its token over
// the library's own transport, so that its connection too is closed when
// RunTaskWhenMutexAcquired returns. (The https Azurite's certificate is not
// trusted by default settings: the run ends with that error, after the token
// was fetched.) Not parallel: it sets environment variables and counts
// goroutines.
func TestDefaultAzureCredentialLeavesNoGoroutineWithDefaultSettings(t *testing.T) {
	requests := managedIdentityEndpoint(t, "22222222-2222-2222-2222-222222222222")
	srv, _ := azuritetest.HTTPS(t)
	s := testSettings(t)
	s.ConnectionString, s.ServiceURL = "", srv.URL()
	before := goleak.IgnoreCurrent()
	took, _, err := runUntilItGivesUp(t, s)
	require.ErrorIs(t, err, ErrPermanent)
	assert.ErrorContains(t, err, "TLS certificate not trusted")
	assert.Less(t, took, 5*time.Second)
	assert.EqualValues(t, 1, requests.Load(), "the token was fetched")
	goleak.VerifyNone(t, before)
}
