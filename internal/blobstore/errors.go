package blobstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// Kind sorts a failure by what its caller should do about it. Every [*Error]
// has exactly one; the root maps each to its public sentinel (ErrLeaseHeld,
// ErrLeaseLost, ErrTransient, ErrPermanent).
type Kind int

const (
	// Permanent means retrying cannot help: bad credentials (401/403),
	// missing permissions, an invalid request (400, or headers net/http
	// will not send), a refused creation, or an error the library does
	// not recognise.
	Permanent Kind = iota + 1
	// Transient means the request failed in a way that may pass: a 5xx,
	// 408 or 429 answer, ContainerBeingDeleted, a timeout, a connection
	// error.
	Transient
	// Held means another instance holds the lease: the answer's error code
	// is in the call's [Call.Held] list, or the server granted another
	// lease ID than the one proposed.
	Held
	// Lost means the lease is no longer the caller's: the answer's error
	// code is in the call's [Call.Lost] list, or a renewal was answered
	// with another lease ID.
	Lost
)

// String is the kind's name, as [Error.Error] prints it.
func (k Kind) String() string {
	switch k {
	case Permanent:
		return "permanent"
	case Transient:
		return "transient"
	case Held:
		return "held"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is a failed storage request. It carries everything the root's
// StorageError prints, so that the root can wrap it without losing any of
// it, and never an account key or a SAS token.
type Error struct {
	// Op names the operation as the caller named it in [Call.Op], e.g.
	// "renew lease" or "write term".
	Op string
	// Container is the container's name; Blob the blob's, or the prefix of
	// a listing, "" for a container's creation.
	Container, Blob string
	// Status is the HTTP status of the answer, 0 when none arrived.
	Status int
	// Code is the Azure error code (x-ms-error-code), "" when none.
	Code string
	// Kind is what the failure means to the caller (see [Kind]).
	Kind Kind
	// Unsent reports that the request never left this host: no connection
	// could be made (refused, unreachable, no such host), or net/http
	// would not send its headers, so it had no effect on the server and no
	// answer was lost.
	Unsent bool
	// Detail describes a failure that has no answer to show (a timeout, a
	// connection error, a credential that got no token), or a check of
	// this package's that failed (an answer with another lease ID); ""
	// when Status says it. Secrets are removed from it.
	Detail string
	// Err is what Error unwraps to: the SDK's *azcore.ResponseError as it
	// came (its text names the URL's path, never its query), or, when no
	// answer came, the cause without the *url.Error around it (whose text
	// holds the URL, and so a SAS token) and with secrets removed from its
	// text; nil for a check of this package's.
	Err error
}

// Error says what failed on which blob, with the status and code, or the
// detail, and the kind, e.g.
// "blobstore: acquire lease on c/b: 409 LeaseAlreadyPresent (held)".
func (e *Error) Error() string {
	return Describe("blobstore", e.Op, e.Container, e.Blob, e.Status, e.Code, e.Detail, e.Kind)
}

// Describe is the text of a failed request, as [Error] and the root's
// StorageError print it: "<pkg>: <op> on <container>/<blob>: " then the
// status and code, or the detail when no answer says it, then the kind in
// parentheses.
func Describe(pkg, op, container, blob string, status int, code, detail string, kind any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s on %s/%s: ", pkg, op, container, blob)
	switch {
	case status != 0 && code != "":
		fmt.Fprintf(&b, "%d %s", status, code)
	case status != 0:
		fmt.Fprintf(&b, "HTTP %d", status)
	case code != "":
		b.WriteString(code)
	default:
		b.WriteString(detail)
	}
	fmt.Fprintf(&b, " (%v)", kind)
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// HasCode reports whether err is, or wraps, an [*Error] whose Code is one of
// codes.
func HasCode(err error, codes ...string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code != "" && slices.Contains(codes, e.Code)
}

// IsUnsent reports whether err is, or wraps, an [*Error] for a request that
// never left this host (see [Error.Unsent]).
func IsUnsent(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Unsent
}

// Azure error codes (x-ms-error-code) that the library tells apart. Their
// values are the SDK's bloberror codes, so a code from either compares
// equal.
const (
	BlobAlreadyExists                  = "BlobAlreadyExists"
	BlobNotFound                       = "BlobNotFound"
	ConditionNotMet                    = "ConditionNotMet"
	ContainerAlreadyExists             = "ContainerAlreadyExists"
	ContainerBeingDeleted              = "ContainerBeingDeleted"
	ContainerNotFound                  = "ContainerNotFound"
	InvalidHeaderValue                 = "InvalidHeaderValue"
	LeaseAlreadyBroken                 = "LeaseAlreadyBroken"
	LeaseAlreadyPresent                = "LeaseAlreadyPresent"
	LeaseIDMismatchWithBlobOperation   = "LeaseIdMismatchWithBlobOperation"
	LeaseIDMismatchWithLeaseOperation  = "LeaseIdMismatchWithLeaseOperation"
	LeaseIDMissing                     = "LeaseIdMissing"
	LeaseIsBreakingAndCannotBeAcquired = "LeaseIsBreakingAndCannotBeAcquired"
	LeaseIsBreakingAndCannotBeChanged  = "LeaseIsBreakingAndCannotBeChanged"
	LeaseIsBrokenAndCannotBeRenewed    = "LeaseIsBrokenAndCannotBeRenewed"
	LeaseLost                          = "LeaseLost"
	LeaseNotPresentWithBlobOperation   = "LeaseNotPresentWithBlobOperation"
	LeaseNotPresentWithLeaseOperation  = "LeaseNotPresentWithLeaseOperation"
)

// LostCodes are the codes that mean, to a holder, that the lease is no
// longer its own: released, broken, expired and taken, or its blob (or
// container) gone. A holder's calls pass them as [Call.Lost]. Do not
// modify: append to a copy.
var LostCodes = []string{
	LeaseIDMismatchWithLeaseOperation,
	LeaseIsBrokenAndCannotBeRenewed,
	LeaseIsBreakingAndCannotBeChanged,
	LeaseIsBreakingAndCannotBeAcquired,
	LeaseNotPresentWithLeaseOperation,
	LeaseLost,
	LeaseAlreadyBroken,
	LeaseIDMissing,
	LeaseIDMismatchWithBlobOperation,
	LeaseNotPresentWithBlobOperation,
	BlobNotFound,
	ContainerNotFound,
	ContainerBeingDeleted, // and the blob with it
}

// HeldCodes are the codes that mean, to a contender, that another instance
// holds the lease. An acquire passes them as [Call.Held]. Do not modify:
// append to a copy.
var HeldCodes = []string{
	LeaseAlreadyPresent,
	LeaseIsBreakingAndCannotBeAcquired,
}

// classify turns err, returned by the SDK for the call c on blob, into an
// *Error of the right kind: an answer's code in c.Held is Held, in c.Lost
// Lost; otherwise 408, 429, 5xx and ContainerBeingDeleted are Transient and
// any other answer Permanent; an error without an answer is sorted by
// classifyNoResponse. Any answer marks the account reached.
func (cl *Client) classify(c Call, blob string, err error) *Error {
	var already *Error
	if errors.As(err, &already) {
		// Classified where it arose: classifying it again would give
		// it a second kind.
		return already
	}
	e := &Error{Op: c.Op, Container: cl.container, Blob: blob, Err: err}
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re):
		cl.reached.Store(true)
		e.Status, e.Code = re.StatusCode, re.ErrorCode
		switch {
		case slices.Contains(c.Held, re.ErrorCode):
			e.Kind = Held
		case slices.Contains(c.Lost, re.ErrorCode):
			e.Kind = Lost
		case re.StatusCode == http.StatusRequestTimeout, re.StatusCode == http.StatusTooManyRequests,
			re.StatusCode >= 500,
			// Azure refuses most requests on a container for about 30 s
			// after it was deleted; that passes, and the container can be
			// created again.
			re.ErrorCode == ContainerBeingDeleted:
			e.Kind = Transient
		default:
			e.Kind = Permanent
		}
	default:
		e.Unsent = neverSent(err)
		e.Detail, e.Kind = classifyNoResponse(err, cl.reached.Load())
		e.Detail = cl.red.redact(e.Detail)
		e.Err = cl.red.scrub(err)
	}
	return e
}

// classifyNoResponse sorts errors that carry no storage response. reached
// says whether the storage account has ever answered this client.
func classifyNoResponse(err error, reached bool) (detail string, kind Kind) {
	var (
		credErr      *credentialError
		nonRetriable interface{ NonRetriable() } // azidentity marks errors no retry can fix
		authFailed   *azidentity.AuthenticationFailedError
		certErr      *tls.CertificateVerificationError
		unknownCA    x509.UnknownAuthorityError
		hostErr      x509.HostnameError
		dnsErr       *net.DNSError
		netErr       net.Error
	)
	// Order matters: azcore wraps every credential error as NonRetriable,
	// even a token request that merely timed out, so timeouts and network
	// errors are recognised first. And every *url.Error is a net.Error, so
	// what the network cannot cure is recognised before that.
	switch {
	case errors.As(err, &credErr):
		detail, kind = classifyNoResponse(credErr.err, reached)
		return fmt.Sprintf("credential %s could not get a token: %s", credErr.name, detail), kind
	case errors.As(err, &authFailed):
		if r := authFailed.RawResponse; r != nil && r.StatusCode >= 400 && r.StatusCode < 500 &&
			r.StatusCode != http.StatusRequestTimeout && r.StatusCode != http.StatusTooManyRequests {
			return fmt.Sprintf("token request refused (HTTP %d)", r.StatusCode), Permanent
		}
		return "token request failed: " + firstLine(err.Error()), Transient
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr):
		return "TLS certificate not trusted: " + firstLine(err.Error()), Permanent
	case unsendable(err) != "":
		// Checked before net.Error, which every *url.Error is: the
		// request is one HTTP cannot carry, and never will be.
		return "request not sent: " + unsendable(err), Permanent
	case errors.Is(err, context.DeadlineExceeded):
		return "request timed out", Transient
	case errors.Is(err, context.Canceled):
		return "request cancelled", Transient
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound && !reached:
		// A host that has never resolved is a misspelt account name, not
		// an outage.
		return fmt.Sprintf("no such host %q: check the account name or endpoint", dnsErr.Name), Permanent
	case !reached && tlsMisconfigured(err) != "":
		// No TLS session with an endpoint that has never answered: the
		// URL's scheme or port is wrong, or the two ends share no TLS
		// version. Once it has answered, the same error is a fault on the
		// way (a middlebox, a restart), retried like any other.
		return tlsMisconfigured(err), Permanent
	case errors.As(err, &netErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return "connection error: " + firstLine(err.Error()), Transient
	case errors.As(err, &nonRetriable):
		return "no credential available: " + firstLine(err.Error()), Permanent
	default:
		// An error we do not recognise (for example azcore refusing to send a
		// bearer token over plain http) will not go away by itself: failing
		// fast with it is kinder than retrying it forever.
		return firstLine(err.Error()), Permanent
	}
}

// tlsMisconfigured describes err if it is a TLS handshake that failed for
// want of a TLS peer that agrees with us, and returns "" otherwise (a
// timeout, a reset, a refused connection are not).
func tlsMisconfigured(err error) string {
	var (
		recordErr tls.RecordHeaderError
		alertErr  tls.AlertError
		opErr     *net.OpError
	)
	inner := err
	var ue *url.Error
	if errors.As(err, &ue) {
		inner = ue.Err
	}
	switch {
	case errors.Is(err, http.ErrSchemeMismatch):
		return "the endpoint answered https with plain http: check the URL's scheme and port"
	case errors.As(err, &recordErr):
		return "the endpoint does not speak TLS (" + recordErr.Msg + "): check the URL's scheme and port"
	case errors.As(err, &alertErr), errors.As(err, &opErr) && opErr.Op == "remote error":
		return "TLS handshake refused by the endpoint: " + firstLine(inner.Error())
	case errors.As(err, &opErr) && opErr.Op == "local error":
		return "TLS handshake failed: " + firstLine(inner.Error())
	case strings.HasPrefix(inner.Error(), "tls: "):
		// crypto/tls's own handshake errors (an unsupported version, a
		// bad handshake message) are plain errors with this prefix.
		return "TLS handshake failed: " + firstLine(inner.Error())
	}
	return ""
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// neverSent reports whether err says a request failed before any byte of it
// could reach the server: no connection was made (refused, unreachable, no
// such host), or net/http refused to send its headers (unsendable). The
// request had no effect there, so no answer was lost.
func neverSent(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial" || unsendable(err) != ""
}

// unsendable returns net/http's error if err is its transport's refusal to
// send a header HTTP cannot carry (a newline in a metadata value, a space in
// a metadata name), which it returns before sending anything, and ""
// otherwise. net/http names the header, never its value.
func unsendable(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) || ue.Err == nil {
		return ""
	}
	if msg := ue.Err.Error(); strings.HasPrefix(msg, "net/http: invalid header ") {
		return msg
	}
	return ""
}
