package leaderelection

import (
	"errors"

	"github.com/blobelect/leaderelection/internal/blobstore"
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
// loops sharing one lease ID would both believe they lead. [ShardOwner.Run]
// called twice returns an error of its own text that matches it with
// [errors.Is].
var ErrAlreadyRunning = errors.New("leaderelection: RunTaskWhenMutexAcquired is already running on this mutex")

// errShardOwnerRunning is [ShardOwner.Run]'s ErrAlreadyRunning: a text that
// names the call the user made twice.
var errShardOwnerRunning error = alreadyRunning{"leaderelection: ShardOwner.Run is already running on this ShardOwner"}

// alreadyRunning is an ErrAlreadyRunning with its own text.
type alreadyRunning struct{ text string }

func (e alreadyRunning) Error() string        { return e.text }
func (e alreadyRunning) Is(target error) bool { return target == ErrAlreadyRunning }

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
	return blobstore.Describe("leaderelection", e.Op, e.Container, e.Blob, e.StatusCode, e.ErrorCode, e.detail, e.kind)
}

// Unwrap returns the SDK's error.
func (e *StorageError) Unwrap() error { return e.err }

// Is reports whether target is the kind of this error.
func (e *StorageError) Is(target error) bool { return target == e.kind }

// storageError is err, a failed request of the storage package
// (internal/blobstore), as the library returns it: a *StorageError of the
// same kind, with the same operation, status, code, detail and cause, that
// names container and blob as the caller names them (a lease's blob; for a
// ShardOwner's listings and lists, its prefix), whatever blob the request
// was on. Any other error, a *StorageError included, is returned as it is.
func storageError(err error, container, blob string) error {
	var be *blobstore.Error
	if !errors.As(err, &be) {
		return err
	}
	kind := ErrPermanent
	switch be.Kind {
	case blobstore.Held:
		kind = ErrLeaseHeld
	case blobstore.Lost:
		kind = ErrLeaseLost
	case blobstore.Transient:
		kind = ErrTransient
	}
	return &StorageError{Op: be.Op, Container: container, Blob: blob, StatusCode: be.Status, ErrorCode: be.Code,
		kind: kind, detail: be.Detail, err: be.Err, unsent: be.Unsent}
}

// ErrStalled is the cause set on a leader's context when its func has not
// called [Heartbeat] within the stall timeout (see [WithStallTimeout]).
var ErrStalled = errors.New("leader func stalled: no heartbeat within the stall timeout")

// unsent reports whether err is a request that never reached the server:
// no connection was made (see blobstore.Error's Unsent).
func unsent(err error) bool {
	var se *StorageError
	return errors.As(err, &se) && se.unsent
}

// ErrPreferredCandidate is the cause of a leader func's context when the
// leader hands the lease to a waiting contender of higher priority (see
// [WithPriority]).
var ErrPreferredCandidate = errors.New("leaderelection: a contender of higher priority waits: handing the lease to it")
