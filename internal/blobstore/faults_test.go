package blobstore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// A request the server never answers gives up at the client's
// RequestTimeout, or at the call's own timeout, or at the context's
// deadline, whichever comes first; it is sent once (the SDK's retries are
// off) and is a transient timeout, not an unsent request.
func TestASilentServerCostsEachCallItsTimeoutAndNoMore(t *testing.T) {
	t.Parallel()
	type bound struct {
		name            string
		request, call   time.Duration // the client's RequestTimeout, the call's Timeout
		context         time.Duration // the context's own deadline, 0 for none
		least, notAfter time.Duration
	}
	for _, bd := range []bound{
		{"the client's RequestTimeout", 150 * time.Millisecond, 0, 0, 150 * time.Millisecond, 1500 * time.Millisecond},
		{"the call's own timeout", 10 * time.Second, 150 * time.Millisecond, 0, 150 * time.Millisecond, 1500 * time.Millisecond},
		{"an earlier deadline on the context", 10 * time.Second, 5 * time.Second, 150 * time.Millisecond, 150 * time.Millisecond, 1500 * time.Millisecond},
	} {
		t.Run(bd.name, func(t *testing.T) {
			t.Parallel()
			srv := &silent{}
			cl := clientOn(t, srv, func(c *Config) { c.RequestTimeout = bd.request })
			ops := everyOperation(cl.Blob("b"))
			var wg sync.WaitGroup
			for name, op := range ops {
				wg.Go(func() {
					// Timed from before the context's deadline is set: the
					// deadline counts from there, and a start taken after it
					// made a call look 0.5 ms short of the deadline under load.
					start := time.Now()
					ctx := context.Background()
					if bd.context > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, bd.context)
						defer cancel()
					}
					err := op(ctx, Call{Timeout: bd.call})
					took := time.Since(start)
					var e *Error
					if !assert.ErrorAs(t, err, &e, name) {
						return
					}
					assert.GreaterOrEqual(t, took, bd.least, name)
					assert.Less(t, took, bd.notAfter, name)
					assert.Equal(t, Transient, e.Kind, name)
					assert.Equal(t, "request timed out", e.Detail, name)
					assert.Zero(t, e.Status, name)
					assert.False(t, e.Unsent, "%s: a request that timed out may have reached the server", name)
					assert.ErrorIs(t, err, context.DeadlineExceeded, name)
				})
			}
			wg.Wait()
			assert.Equal(t, int64(len(ops)), srv.requests.Load(), "one request per call: no retry")
		})
	}
}

// A request cancelled by its caller is transient, and says so.
func TestACancelledCallIsTransient(t *testing.T) {
	t.Parallel()
	cl := blocked(t, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := cl.Blob("b").RenewLease(ctx, idA, Call{})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, Transient, e.Kind)
	assert.Equal(t, "request cancelled", e.Detail)
	assert.ErrorIs(t, err, context.Canceled)
}

// A download's content is read within the call's timeout too: a server
// that sends the headers and then stalls costs no more.
func TestADownloadThatStallsMidBodyGivesUpAtItsTimeout(t *testing.T) {
	t.Parallel()
	stall := transporterFunc(func(req *http.Request) (*http.Response, error) {
		h := http.Header{}
		h.Set("Content-Length", "10")
		return &http.Response{StatusCode: 200, Header: h, Request: req, Body: stalledBody{req.Context()}}, nil
	})
	cl := clientOn(t, stall, nil)
	start := time.Now()
	_, err := cl.Blob("b").Download(context.Background(), DownloadOptions{Call: Call{Timeout: 100 * time.Millisecond}})
	assert.Less(t, time.Since(start), 2*time.Second)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, Transient, e.Kind)
	assert.Equal(t, "request timed out", e.Detail)
}

// stalledBody is a response body whose read blocks until ctx ends.
type stalledBody struct{ ctx context.Context }

func (b stalledBody) Read([]byte) (int, error) {
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}
func (stalledBody) Close() error { return nil }

// canned answers every request with status and code, and counts them.
type canned struct {
	status   int
	code     string
	err      error // returned instead of an answer if set
	requests atomic.Int64
}

func (c *canned) Do(req *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	if req.Body != nil {
		_ = req.Body.Close()
	}
	if c.err != nil {
		return nil, &url.Error{Op: "Put", URL: req.URL.String(), Err: c.err}
	}
	h := http.Header{}
	if c.code != "" {
		h.Set("x-ms-error-code", c.code)
	}
	return &http.Response{StatusCode: c.status, Status: http.StatusText(c.status), Header: h, Request: req, Body: http.NoBody}, nil
}

// The SDK's retries are off for every operation: an answer or a failure
// that its default policy would retry three times is returned at once,
// classified by its status when no list names its code.
func TestEveryCallIsSentOnceAndClassifiedByStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
		err    error
		kind   Kind
		detail string
	}{
		{status: 503, code: "ServerBusy", kind: Transient},
		{status: 500, code: "InternalError", kind: Transient},
		{status: 502, kind: Transient},
		{status: 408, code: "OperationTimedOut", kind: Transient},
		{status: 429, code: "TooManyRequests", kind: Transient},
		{status: 409, code: ContainerBeingDeleted, kind: Transient},
		{status: 403, code: "AuthorizationPermissionMismatch", kind: Permanent},
		{status: 401, code: "InvalidAuthenticationInfo", kind: Permanent},
		{status: 400, code: InvalidHeaderValue, kind: Permanent},
		{err: io.ErrUnexpectedEOF, kind: Transient, detail: "connection error: Put \"http://127.0.0.1:10000/devstoreaccount1/c?REDACTED\": unexpected EOF"},
		{err: syscall.ECONNRESET, kind: Transient},
	} {
		t.Run(fmt.Sprintf("%d %s %v", tc.status, tc.code, tc.err), func(t *testing.T) {
			t.Parallel()
			srv := &canned{status: tc.status, code: tc.code, err: tc.err}
			cl := clientOn(t, srv, nil)
			ops := everyOperation(cl.Blob("b"))
			for name, op := range ops {
				err := op(context.Background(), Call{})
				var e *Error
				require.ErrorAs(t, err, &e, name)
				assert.Equal(t, tc.kind, e.Kind, "%s: %v", name, e)
				assert.Equal(t, tc.status, e.Status, name)
				assert.Equal(t, tc.code, e.Code, name)
				if tc.detail != "" && name == "create container" {
					assert.Equal(t, tc.detail, e.Detail)
				}
				if tc.err != nil {
					assert.ErrorIs(t, err, tc.err, name)
					assert.False(t, e.Unsent, name)
				}
			}
			assert.Equal(t, int64(len(ops)), srv.requests.Load(), "one request per call")
		})
	}
}

// A code in the call's Held list wins over Lost, and both over the status.
func TestCodeListsDecideTheKind(t *testing.T) {
	t.Parallel()
	cl := clientOn(t, &canned{status: 409, code: LeaseIsBreakingAndCannotBeAcquired}, nil)
	_, err := cl.Blob("b").AcquireLease(context.Background(), AcquireOptions{ID: idA, Duration: 15 * time.Second, Call: Call{Held: HeldCodes, Lost: LostCodes}})
	wantErr(t, err, 409, LeaseIsBreakingAndCannotBeAcquired, Held)
	_, err = cl.Blob("b").RenewLease(context.Background(), idA, Call{Lost: LostCodes})
	wantErr(t, err, 409, LeaseIsBreakingAndCannotBeAcquired, Lost)
	cl = clientOn(t, &canned{status: 503, code: "ServerBusy"}, nil)
	_, err = cl.Blob("b").RenewLease(context.Background(), idA, Call{Lost: []string{"ServerBusy"}})
	wantErr(t, err, 503, "ServerBusy", Lost)
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// A refused connection never carried the request: it is unsent, and
// transient.
func TestARefusedConnectionIsUnsent(t *testing.T) {
	t.Parallel()
	port := closedPort(t)
	cl, err := New(Config{Container: "c", ConnectionString: fmt.Sprintf(
		"AccountName=devstoreaccount1;AccountKey=%s;BlobEndpoint=http://127.0.0.1:%d/devstoreaccount1", devAccountKey, port)})
	require.NoError(t, err)
	defer cl.CloseIdleConnections()
	_, err = cl.Blob("b").AcquireLease(context.Background(), AcquireOptions{ID: idA, Duration: 15 * time.Second})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.True(t, e.Unsent)
	assert.True(t, IsUnsent(err))
	assert.Equal(t, Transient, e.Kind)
	assert.True(t, strings.HasPrefix(e.Detail, "connection error: "), e.Detail)
	var op *net.OpError
	assert.ErrorAs(t, err, &op, "the cause still matches errors.As")
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.False(t, IsUnsent(blockedErr(t)), "a timeout is not unsent")
}

func blockedErr(t *testing.T) error {
	_, err := blocked(t, 10*time.Millisecond).Blob("b").Properties(context.Background(), Call{})
	return err
}

// showsNoSecret checks every way err may be printed for the secrets.
func showsNoSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e)
	texts := []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), e.Detail}
	if e.Err != nil {
		texts = append(texts, e.Err.Error())
	}
	for _, text := range texts {
		for _, s := range secrets {
			assert.NotContains(t, text, s)
		}
	}
}

// A SAS token, in a SAS URL or a connection string, never shows in an
// error: the URL the request failed on is printed without its query, and
// the cause is unwrapped from the *url.Error that holds it.
func TestASASTokenNeverShowsInAnError(t *testing.T) {
	t.Parallel()
	const sig = "c2lnbmF0dXJlc2VjcmV0"
	port := closedPort(t)
	for name, cfg := range map[string]Config{
		"SAS URL":           {SASURL: fmt.Sprintf("http://127.0.0.1:%d/devstoreaccount1?sv=2023-01-01&sp=rwc&sig=%s", port, sig)},
		"connection string": {ConnectionString: fmt.Sprintf("BlobEndpoint=http://127.0.0.1:%d/devstoreaccount1;SharedAccessSignature=sv=2023-01-01&sp=rwc&sig=%s", port, sig)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg.Container = "leases"
			cl, err := New(cfg)
			require.NoError(t, err)
			defer cl.CloseIdleConnections()
			_, err = cl.Blob("b").Create(context.Background(), WriteOptions{})
			showsNoSecret(t, err, sig, "sp=rwc")
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Contains(t, e.Detail, "/devstoreaccount1/leases/b?REDACTED")
			assert.True(t, e.Unsent)
		})
	}
}

// An account key that a failure's text would carry is removed from it,
// and so is any URL's query.
func TestAnAccountKeyNeverShowsInAnError(t *testing.T) {
	t.Parallel()
	echo := &canned{err: fmt.Errorf("proxy refused https://127.0.0.1:1/x?sig=abc with key %s", fakeKey)}
	cl := clientOn(t, echo, func(c *Config) {
		c.ConnectionString = "AccountName=acct;AccountKey=" + fakeKey + ";BlobEndpoint=http://127.0.0.1:1/acct"
	})
	_, err := cl.Blob("b").Properties(context.Background(), Call{})
	showsNoSecret(t, err, fakeKey, "sig=abc")
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "connection error: Put \"http://127.0.0.1:1/acct/c/b\": proxy refused https://127.0.0.1:1/x?REDACTED with key REDACTED", e.Detail)
	assert.Equal(t, "proxy refused https://127.0.0.1:1/x?REDACTED with key REDACTED", e.Err.Error())

	_, err = New(Config{Container: "c", ConnectionString: "AccountName=acct;AccountKey=not*base64" + fakeKey})
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "ConnectionString", ce.Field)
	assert.True(t, strings.HasPrefix(ce.Rule, "AccountKey is not valid base64: "), ce.Rule)
	assert.NotContains(t, err.Error(), fakeKey)
}

// switchable answers as its current mode says: a DNS failure, or 404.
type switchable struct{ answer atomic.Bool }

func (s *switchable) Do(req *http.Request) (*http.Response, error) {
	if s.answer.Load() {
		return (&canned{status: 404, code: BlobNotFound}).Do(req)
	}
	return nil, &url.Error{Op: "Get", URL: req.URL.String(), Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &net.DNSError{Err: "no such host", Name: "acct.blob.core.windows.net", IsNotFound: true}}}
}

// A host that has never resolved is a misspelt account name: permanent.
// Once the account has answered, the same failure is an outage.
func TestAHostThatNeverResolvedIsPermanentUntilTheAccountAnswers(t *testing.T) {
	t.Parallel()
	srv := &switchable{}
	cl := clientOn(t, srv, nil)
	b := cl.Blob("b")
	_, err := b.Properties(context.Background(), Call{})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, Permanent, e.Kind)
	assert.Equal(t, `no such host "acct.blob.core.windows.net": check the account name or endpoint`, e.Detail)
	assert.True(t, e.Unsent)
	assert.False(t, cl.Reached())

	srv.answer.Store(true)
	_, err = b.Properties(context.Background(), Call{})
	wantErr(t, err, 404, BlobNotFound, Permanent)
	assert.True(t, cl.Reached(), "an error answer is an answer")
	srv.answer.Store(false)
	_, err = b.Properties(context.Background(), Call{})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, Transient, e.Kind)
	assert.True(t, strings.HasPrefix(e.Detail, "connection error: "), e.Detail)

	other := clientOn(t, srv, nil)
	other.MarkReached()
	_, err = other.Blob("b").Properties(context.Background(), Call{})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, Transient, e.Kind, "a client told the account answered another")
}

// endpoint returns a connection string naming, over https, a loopback
// endpoint that serves plain http or TLS with a certificate nobody trusts.
func endpoint(t *testing.T, useTLS bool) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError) // handshake errors are the point
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(strings.TrimPrefix(srv.URL, "http://"), "https://")
	return "AccountName=devstoreaccount1;AccountKey=" + devAccountKey + ";BlobEndpoint=https://" + host + "/devstoreaccount1"
}

// TLS that cannot succeed with an endpoint that never answered is a
// misconfiguration, said in words an operator can act on; an untrusted
// certificate is always one.
func TestTLSFailuresAreNamed(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		conn   string
		detail string
	}{
		"https to a plain http endpoint": {endpoint(t, false), "the endpoint answered https with plain http: check the URL's scheme and port"},
		"an untrusted certificate":       {endpoint(t, true), "TLS certificate not trusted: "},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cl, err := New(Config{ConnectionString: tc.conn, Container: "c"})
			require.NoError(t, err)
			defer cl.CloseIdleConnections()
			_, err = cl.Blob("b").Properties(context.Background(), Call{})
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, Permanent, e.Kind)
			assert.True(t, strings.HasPrefix(e.Detail, tc.detail), e.Detail)
		})
	}
	var unknownCA x509.UnknownAuthorityError
	cl, err := New(Config{ConnectionString: endpoint(t, true), Container: "c"})
	require.NoError(t, err)
	defer cl.CloseIdleConnections()
	_, err = cl.Blob("b").Properties(context.Background(), Call{})
	assert.ErrorAs(t, err, &unknownCA, "the cause still matches errors.As")
}

// A credential that cannot get a token is named in the error; whether that
// passes is judged by why it failed.
func TestACredentialThatGetsNoTokenIsNamed(t *testing.T) {
	t.Parallel()
	for why, tc := range map[string]struct {
		err    error
		kind   Kind
		detail string
	}{
		"refused":   {errors.New("no managed identity is assigned to this VM"), Permanent, "credential blobstore.tokenFunc could not get a token: no managed identity is assigned to this VM"},
		"timed out": {fmt.Errorf("token: %w", context.DeadlineExceeded), Transient, "credential blobstore.tokenFunc could not get a token: request timed out"},
	} {
		cl, err := New(Config{ServiceURL: "https://127.0.0.1:1/devstoreaccount1", Container: "c",
			Credential: tokenFunc(func() (string, error) { return "", tc.err })})
		require.NoError(t, err)
		_, err = cl.Blob("b").Properties(context.Background(), Call{})
		var e *Error
		require.ErrorAs(t, err, &e, why)
		assert.Equal(t, tc.kind, e.Kind, why)
		assert.Equal(t, tc.detail, e.Detail, why)
		assert.ErrorIs(t, err, tc.err, why)
		cl.CloseIdleConnections()
	}
}

// No goroutine outlives a call: once a client's idle connections are
// closed, nothing of its requests is left running, whether they were
// answered (Azurite, on the package's own transport) or timed out. Not
// parallel: it counts the process's goroutines.
func TestNoGoroutineOutlivesACall(t *testing.T) {
	e := newEnv(t, "azurite")
	e.cl.CloseIdleConnections()
	before := goleak.IgnoreCurrent()
	b := e.cl.Blob("leak")
	ctx := context.Background()
	_, err := b.Create(ctx, WriteOptions{Content: []byte("x")})
	require.NoError(t, err)
	for _, op := range everyOperation(b) {
		_ = op(ctx, Call{})
	}
	for range e.cl.List(ctx, ListOptions{Metadata: true}) {
	}
	_ = blockedErr(t)
	e.cl.CloseIdleConnections()
	goleak.VerifyNone(t, before)
}
