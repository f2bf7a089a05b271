package leaderelection

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
	"regexp"
	"strings"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// The kinds of outcome a lease operation can have. Every storage failure returned by a
// [BlobLeaseManager] method matches exactly one of them with [errors.Is].
var (
	// ErrLeaseHeld means another instance holds the lease (409 LeaseAlreadyPresent).
	// For a follower it is the normal answer, not a fault.
	ErrLeaseHeld = errors.New("lease is held by another instance")

	// ErrLeaseLost means the lease is no longer ours: it was released, broken,
	// taken by another instance after it expired, or its blob was deleted.
	// A leader that sees it must stop at once.
	ErrLeaseLost = errors.New("lease lost")

	// ErrTransient means the request failed in a way that may pass: a 5xx,
	// 408 or 429 answer, a timeout, or a connection error. Retrying is right.
	ErrTransient = errors.New("transient storage error")

	// ErrPermanent means retrying cannot help: bad credentials (401/403),
	// missing permissions, an invalid request (400), or a refused container
	// creation. The error names the Azure error code.
	ErrPermanent = errors.New("permanent storage error")
)

// ErrRenewDeadline is the cause (see [context.Cause]) set on a leader's context
// when the lease could not be renewed before its safety deadline: the moment
// the last successful renewal was sent, plus the lease duration, minus the stop
// margin.
var ErrRenewDeadline = errors.New("lease not renewed before its safety deadline")

// ErrAlreadyRunning is returned by [BlobDistributedMutex.RunTaskWhenMutexAcquired]
// when it is called while another call on the same mutex is still running. Two
// loops sharing one lease ID would both believe they lead.
var ErrAlreadyRunning = errors.New("leaderelection: RunTaskWhenMutexAcquired is already running on this mutex")

// StorageError describes a failed lease or blob operation. Its message names
// the operation, the blob, the HTTP status and the Azure error code, and never
// carries account keys or SAS tokens. It matches one of [ErrLeaseHeld],
// [ErrLeaseLost], [ErrTransient] or [ErrPermanent] with [errors.Is], and unwraps
// to the SDK's error (for example *azcore.ResponseError) for errors.As.
type StorageError struct {
	Op         string // the operation: "acquire lease", "renew lease", "create container", ...
	Container  string
	Blob       string
	StatusCode int    // HTTP status, 0 when no response arrived
	ErrorCode  string // Azure error code (x-ms-error-code), "" when none

	kind   error
	detail string // scrubbed description of an error that has no HTTP response
	err    error
	unsent bool // the request never left this host: no connection was made
}

func (e *StorageError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leaderelection: %s on %s/%s: ", e.Op, e.Container, e.Blob)
	switch {
	case e.StatusCode != 0 && e.ErrorCode != "":
		fmt.Fprintf(&b, "%d %s", e.StatusCode, e.ErrorCode)
	case e.StatusCode != 0:
		fmt.Fprintf(&b, "HTTP %d", e.StatusCode)
	case e.ErrorCode != "":
		b.WriteString(e.ErrorCode)
	default:
		b.WriteString(e.detail)
	}
	fmt.Fprintf(&b, " (%v)", e.kind)
	return b.String()
}

// Unwrap returns the SDK's error.
func (e *StorageError) Unwrap() error { return e.err }

// Is reports whether target is the kind of this error.
func (e *StorageError) Is(target error) bool { return target == e.kind }

// classify wraps err, returned by operation op, into a *StorageError of the
// right kind. lostCodes are the Azure error codes that mean "lease lost" for
// this operation; heldCodes those that mean "someone else holds it".
func (m *BlobLeaseManager) classify(op string, err error, heldCodes, lostCodes []string) error {
	if already, ok := err.(*StorageError); ok {
		// Classified where it arose (e.g. an answer with another lease ID):
		// wrapping it again would give it a second kind.
		return already
	}
	se := &StorageError{Op: op, Container: m.container, Blob: m.blob, err: err}
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re):
		m.reached.Store(true)
		se.StatusCode, se.ErrorCode = re.StatusCode, re.ErrorCode
		switch {
		case contains(heldCodes, re.ErrorCode):
			se.kind = ErrLeaseHeld
		case contains(lostCodes, re.ErrorCode):
			se.kind = ErrLeaseLost
		case re.StatusCode == http.StatusRequestTimeout, re.StatusCode == http.StatusTooManyRequests,
			re.StatusCode >= 500,
			// Azure refuses most requests on a container for about 30 s
			// after it was deleted; that passes, and the container can be
			// created again.
			re.ErrorCode == string(bloberror.ContainerBeingDeleted):
			se.kind = ErrTransient
		default:
			se.kind = ErrPermanent
		}
	default:
		se.unsent = neverSent(err)
		se.detail, se.kind = classifyNoResponse(err, m.reached.Load())
		se.detail = m.redact(se.detail)
		se.err = m.scrub(err)
	}
	return se
}

// classifyNoResponse sorts errors that carry no storage response. reached
// says whether the storage account has ever answered this manager.
func classifyNoResponse(err error, reached bool) (detail string, kind error) {
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
			return fmt.Sprintf("token request refused (HTTP %d)", r.StatusCode), ErrPermanent
		}
		return "token request failed: " + firstLine(err.Error()), ErrTransient
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr):
		return "TLS certificate not trusted: " + firstLine(err.Error()), ErrPermanent
	case errors.Is(err, context.DeadlineExceeded):
		return "request timed out", ErrTransient
	case errors.Is(err, context.Canceled):
		return "request cancelled", ErrTransient
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound && !reached:
		// A host that has never resolved is a misspelt account name, not
		// an outage.
		return fmt.Sprintf("no such host %q: check the account name or endpoint", dnsErr.Name), ErrPermanent
	case !reached && tlsMisconfigured(err) != "":
		// No TLS session with an endpoint that has never answered: the
		// URL's scheme or port is wrong, or the two ends share no TLS
		// version. Once it has answered, the same error is a fault on the
		// way (a middlebox, a restart), retried like any other.
		return tlsMisconfigured(err), ErrPermanent
	case errors.As(err, &netErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return "connection error: " + firstLine(err.Error()), ErrTransient
	case errors.As(err, &nonRetriable):
		return "no credential available: " + firstLine(err.Error()), ErrPermanent
	default:
		// An error we do not recognise (for example azcore refusing to send a
		// bearer token over plain http) will not go away by itself: failing
		// fast with it is kinder than retrying it forever.
		return firstLine(err.Error()), ErrPermanent
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

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// queryPattern matches the query string of a URL: SAS tokens live there.
var queryPattern = regexp.MustCompile(`(https?://[^\s?"'#]*)\?[^\s"'#]*`)

// secretRedactor removes secrets from text that may reach an error or a log.
type secretRedactor struct{ secrets []string }

func (r secretRedactor) redact(s string) string {
	s = queryPattern.ReplaceAllString(s, "$1?REDACTED")
	for _, secret := range r.secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "REDACTED")
		}
	}
	return s
}

// ErrStalled is the cause set on a leader's context when its func has not
// called [Heartbeat] within the stall timeout (see [WithStallTimeout]).
var ErrStalled = errors.New("leader func stalled: no heartbeat within the stall timeout")

// scrub returns what a StorageError unwraps to when no HTTP response came:
// err without the *url.Error around it, whose message holds the request URL
// and so a SAS token. What is left (a *net.OpError, context.DeadlineExceeded,
// a TLS error) still matches errors.Is and errors.As.
func (m *BlobLeaseManager) scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if msg := err.Error(); m.redact(msg) != msg {
		return errors.New(m.redact(msg))
	}
	return err
}

// neverSent reports whether err says a request failed before any byte of it
// could reach the server: no connection was made (refused, unreachable, no
// such host). The request had no effect there, so no answer was lost.
func neverSent(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
}

// unsent reports whether err is a request that never reached the server
// (see neverSent).
func unsent(err error) bool {
	var se *StorageError
	return errors.As(err, &se) && se.unsent
}

// ErrPreferredCandidate is the cause of a leader func's context when the
// leader hands the lease to a waiting contender of higher priority (see
// [WithPriority]).
var ErrPreferredCandidate = errors.New("leaderelection: a contender of higher priority waits: handing the lease to it")
