package memblob

import (
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

// Op names what a request asked of the service, as the observer sees it.
type Op string

// The operations the service serves, and OpUnsupported for the rest.
const (
	OpCreateContainer        Op = "create-container"
	OpDeleteContainer        Op = "delete-container"
	OpGetContainerProperties Op = "get-container-properties"
	OpList                   Op = "list"
	OpUpload                 Op = "upload"
	OpGetProperties          Op = "get-properties"
	OpDownload               Op = "download"
	OpSetMetadata            Op = "set-metadata"
	OpDelete                 Op = "delete"
	OpAcquire                Op = "acquire"
	OpRenew                  Op = "renew"
	OpRelease                Op = "release"
	OpBreak                  Op = "break"
	OpChange                 Op = "change"
	// OpUnsupported is any request outside the fake's contract; it is
	// answered 501 NotImplemented.
	OpUnsupported Op = "unsupported"
)

// Event is one request the service applied or refused, or one admin change,
// as the observer (WithObserver) sees it.
type Event struct {
	// Time is the service's clock when the request took effect.
	Time time.Time
	// Method is the request's HTTP method; empty for an admin change.
	Method string
	// Admin is true for a change made through an admin method
	// (SetBlobMetadata, DeleteBlob, DeleteContainer), which bypasses HTTP
	// and lease checks; Status and ErrorCode are then zero.
	Admin bool
	// Container and Blob name the target; Blob is empty for container
	// operations.
	Container, Blob string
	Op              Op
	// LeaseID is the x-ms-lease-id the request presented, and
	// ProposedLeaseID its x-ms-proposed-lease-id (acquire, change).
	LeaseID, ProposedLeaseID string
	// Status is the HTTP status answered, and ErrorCode its
	// x-ms-error-code (empty on success).
	Status    int
	ErrorCode string
	// ETag is the target's ETag after the request, quoted as GetProperties
	// shows it: the blob's for blob operations, the container's for
	// container operations; empty when the target does not exist.
	ETag azcore.ETag
	// LeaseState is the blob's lease state after the request (empty when
	// there is no blob), and Lease the lease ID it then holds, which Azure
	// keeps through the expired, breaking and broken states (empty when
	// available).
	LeaseState lease.StateType
	Lease      string
	// LeaseExpiry is when the blob stops being locked if nothing more
	// happens: the expiry of a fixed lease, the end of a breaking lease's
	// break period. It is zero for an infinite lease and when the blob is
	// not locked.
	LeaseExpiry time.Time
	// Metadata is the blob's metadata after the request (nil for a
	// container, or when there is no blob), as stored: the observer must
	// not change it. The service never changes a stored map in place, it
	// replaces it, so an event's map stays as it was.
	Metadata map[string]string
}

// OK reports whether the request succeeded (a 2xx status), or is an admin
// change.
func (e Event) OK() bool {
	return e.Admin || e.Status >= 200 && e.Status < 300
}

// event builds the observer's view of the call.
func (c *call) event() Event {
	e := Event{
		Time:            c.now,
		Method:          c.req.Method,
		Container:       c.container,
		Blob:            c.blob,
		Op:              c.op,
		LeaseID:         c.get("x-ms-lease-id"),
		ProposedLeaseID: c.get("x-ms-proposed-lease-id"),
		Status:          c.status,
		ErrorCode:       c.errCode,
	}
	c.result.fill(&e)
	return e
}

// fill copies r into e.
func (r blobResult) fill(e *Event) {
	e.ETag = azcore.ETag(quote(r.etag))
	e.LeaseState = lease.StateType(r.leaseState)
	e.Lease = r.leaseID
	e.LeaseExpiry = r.leaseExpiry
	e.Metadata = r.metadata
}
