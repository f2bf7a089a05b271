package blobstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/azuritetest"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Azurite is started by the first test that needs it, and stopped before
// goroutines left by any test are looked for.
func TestMain(m *testing.M) { azuritetest.Main(m) }

// env is what a case gets: a client on a fresh, existing container of one
// backend, Azurite or the in-memory service.
type env struct {
	backend string // "azurite" or "memblob"
	conn    string
	svc     *memblob.Service // nil on Azurite
	name    string           // the container's
	cl      *Client
}

// backends are the two services every case runs against.
var backends = []string{"azurite", "memblob"}

var containerSeq atomic.Int64

// containerName is a name not used before in this test binary, valid on
// Azure.
func containerName() string {
	return fmt.Sprintf("bs%d-%d", time.Now().UnixNano()%1e9, containerSeq.Add(1))
}

// newEnv returns a client on a fresh container of backend, created.
func newEnv(t *testing.T, backend string) *env {
	t.Helper()
	e := &env{backend: backend, name: containerName()}
	switch backend {
	case "azurite":
		e.conn = azuritetest.ConnectionString(t)
	case "memblob":
		e.conn, e.svc = memblob.ConnectionString, memblob.New()
	}
	e.cl = e.client(t, nil)
	require.NoError(t, e.cl.CreateContainer(t.Context(), Call{}))
	return e
}

// config is the Config of the env's client: on Azurite, a transport of the
// package's own; on the fake, the fake as the transport.
func (e *env) config() Config {
	cfg := Config{ConnectionString: e.conn, Container: e.name}
	if e.svc != nil {
		cfg.ClientOptions = &azblob.ClientOptions{ClientOptions: e.svc.ClientOptions()}
	}
	return cfg
}

// client builds a client on the env's account, with cfg changed by mutate,
// and closes its idle connections when the test ends.
func (e *env) client(t *testing.T, mutate func(*Config)) *Client {
	t.Helper()
	cfg := e.config()
	if mutate != nil {
		mutate(&cfg)
	}
	cl, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(cl.CloseIdleConnections)
	return cl
}

// elsewhere is a client for a container of the env's account that does
// not exist.
func (e *env) elsewhere(t *testing.T) *Client {
	return e.client(t, func(c *Config) { c.Container = e.name + "-none" })
}

// via builds a client on the env's account whose requests pass through
// wrap, which gets the transport they would otherwise take.
func (e *env) via(t *testing.T, wrap func(next policy.Transporter) policy.Transporter) *Client {
	t.Helper()
	var next policy.Transporter = e.svc
	if e.svc == nil {
		tr := newTransport()
		t.Cleanup(tr.CloseIdleConnections)
		next = &http.Client{Transport: tr}
	}
	return e.client(t, func(c *Config) {
		c.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: wrap(next)}}
	})
}

// both runs a case against each backend, in parallel.
func both(t *testing.T, run func(t *testing.T, e *env)) {
	t.Helper()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			run(t, newEnv(t, backend))
		})
	}
}

// wantErr checks that err is an *Error with this status, code and kind,
// that still unwraps to the SDK's response error, and returns it.
func wantErr(t *testing.T, err error, status int, code string, kind Kind) *Error {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e, "want %d %s (%v)", status, code, kind)
	assert.Equal(t, status, e.Status, "status of %v", e)
	assert.Equal(t, code, e.Code, "code of %v", e)
	assert.Equal(t, kind, e.Kind, "kind of %v", e)
	assert.False(t, e.Unsent, "an answered request was sent")
	if status != 0 {
		var re *azcore.ResponseError
		assert.True(t, errors.As(err, &re), "unwraps to the SDK's *azcore.ResponseError")
		assert.True(t, HasCode(err, code), "HasCode(err, %s)", code)
		assert.Empty(t, e.Detail)
	}
	return e
}

// with is a Call that classifies by the given lists.
func with(held, lost []string) Call { return Call{Held: held, Lost: lost} }

// md makes SDK metadata from pairs.
func md(kv ...string) map[string]*string {
	out := map[string]*string{}
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1]
		out[kv[i]] = &v
	}
	return out
}

// flat turns metadata into a plain map, keys lowercased (the service's
// spelling varies with the read).
func flat(m map[string]*string) map[string]string {
	if m == nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range m {
		if v != nil {
			out[strings.ToLower(k)] = *v
		}
	}
	return out
}

// staleETag is an ETag no blob has.
var staleETag = azcore.ETag(`"0x8D0000000000001"`)

// Fixed GUIDs for lease IDs: Azure requires GUIDs.
const (
	idA = "11111111-1111-4111-8111-111111111111"
	idB = "22222222-2222-4222-8222-222222222222"
	idC = "33333333-3333-4333-8333-333333333333"
)

// silent is a server that accepts every request and never answers: Do
// returns only when the request's context ends, with the error http.Client
// would give. It counts the requests.
type silent struct{ requests atomic.Int64 }

func (s *silent) Do(req *http.Request) (*http.Response, error) {
	s.requests.Add(1)
	<-req.Context().Done()
	return nil, &url.Error{Op: "Put", URL: req.URL.String(), Err: req.Context().Err()}
}

// clientOn builds a client on the development account whose transport is
// tr, with cfg changed by mutate.
func clientOn(t *testing.T, tr policy.Transporter, mutate func(*Config)) *Client {
	t.Helper()
	cfg := Config{ConnectionString: memblob.ConnectionString, Container: "c",
		ClientOptions: &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}}}
	if mutate != nil {
		mutate(&cfg)
	}
	cl, err := New(cfg)
	require.NoError(t, err)
	return cl
}

// blocked is a client on a silent server, with RequestTimeout d.
func blocked(t *testing.T, d time.Duration) *Client {
	return clientOn(t, &silent{}, func(c *Config) { c.RequestTimeout = d })
}

// fakeKey is an account key of the right shape, and nobody's.
const fakeKey = "c2VjcmV0a2V5c2VjcmV0a2V5c2VjcmV0a2V5c2VjcmV0a2V5cw=="

// tokenFunc is a token credential made of a function.
type tokenFunc func() (string, error)

func (f tokenFunc) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	tok, err := f()
	return azcore.AccessToken{Token: tok, ExpiresOn: time.Now().Add(time.Hour)}, err
}

// transporterFunc is a policy.Transporter made of a function.
type transporterFunc func(*http.Request) (*http.Response, error)

func (f transporterFunc) Do(req *http.Request) (*http.Response, error) { return f(req) }
