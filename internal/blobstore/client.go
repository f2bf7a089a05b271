package blobstore

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Client reaches one container. Build it with [New]; it is safe for
// concurrent use. Its methods and its [Blob] handles' each make one request
// (a listing, one per page), bounded and unretried as [Call] says.
type Client struct {
	cc        *container.Client
	container string
	red       redactor
	transport *http.Transport // built by the package, nil for the caller's; see CloseIdleConnections
	timeout   time.Duration   // Config.RequestTimeout, default applied
	// reached says the account has answered this client at least once:
	// from then on, a host that does not resolve or a TLS handshake that
	// fails is an outage (Transient), not a misconfiguration (Permanent).
	reached atomic.Bool
}

// Call says how to make one request and how to read its failure. The zero
// value is a request bounded by the client's RequestTimeout, named by its
// operation's default, whose error codes classify by status alone.
type Call struct {
	// Op names the operation in errors, as the caller's user should read
	// it ("renew lease", "write term", "list sessions"). Empty: the
	// method's default, named in its doc.
	Op string
	// Timeout bounds the request, from the moment the method is called to
	// the last byte of its answer (for Download, of the content); for a
	// listing, each page. Zero: Config.RequestTimeout. An earlier deadline
	// on the context still applies.
	Timeout time.Duration
	// Held lists the Azure error codes that mean, for this call, that
	// another instance holds the lease (usually [HeldCodes]).
	Held []string
	// Lost lists the Azure error codes that mean, for this call, that the
	// lease is no longer the caller's (usually [LostCodes]).
	Lost []string
}

// named returns c with op as its Op if it has none.
func (c Call) named(op string) Call {
	if c.Op == "" {
		c.Op = op
	}
	return c
}

// bound returns the context for one request of c: its timeout, and the
// SDK's retries off. Their defaults (3 retries from 0.8 s, no per-try
// timeout) can hold a call for 10 s or, against a silent server, forever;
// the callers retry on their own schedule, which knows how long a lease
// has left. MaxRetries -1 means none (0 would mean the default, 3).
func (cl *Client) bound(ctx context.Context, c Call) (context.Context, context.CancelFunc) {
	d := c.Timeout
	if d <= 0 {
		d = cl.timeout
	}
	ctx = policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
	return context.WithTimeout(ctx, d)
}

// answered marks the account reached: a request got an answer.
func (cl *Client) answered() { cl.reached.Store(true) }

// Container is the name of the client's container.
func (cl *Client) Container() string { return cl.container }

// RequestTimeout is the bound of a request whose [Call] sets none:
// Config.RequestTimeout, or its default.
func (cl *Client) RequestTimeout() time.Duration { return cl.timeout }

// Reached reports whether the account has answered this client (any
// answer, success or error) since it was built or [Client.MarkReached] was
// called. Until it has, a host that does not resolve, or a TLS handshake
// that cannot succeed, is a misconfiguration ([Permanent]); after, an
// outage ([Transient]).
func (cl *Client) Reached() bool { return cl.reached.Load() }

// MarkReached tells the client that the account has answered, for one
// built after another client of the same account was answered (a
// ShardOwner's session client, built beside its main one).
func (cl *Client) MarkReached() { cl.reached.Store(true) }

// CreateContainer creates the container. Op default "create container".
// An existing container is an error with Code [ContainerAlreadyExists]; a
// container still being deleted (Azure, for about 30 s) one with Code
// [ContainerBeingDeleted], which is Transient.
func (cl *Client) CreateContainer(ctx context.Context, c Call) error {
	c = c.named("create container")
	ctx, cancel := cl.bound(ctx, c)
	defer cancel()
	if _, err := cl.cc.Create(ctx, nil); err != nil {
		return cl.classify(c, "", err)
	}
	cl.answered()
	return nil
}

// Where names the container this client reaches, as scheme, host and path,
// without a query (a SAS token) or user info: to tell two clients' containers
// apart, not to show.
func (cl *Client) Where() string {
	u, err := url.Parse(cl.cc.URL())
	if err != nil {
		return cl.cc.URL()
	}
	return strings.ToLower(u.Scheme+"://"+u.Host) + strings.TrimSuffix(u.Path, "/")
}
