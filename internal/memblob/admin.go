package memblob

import (
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

// ErrContainerNotFound and ErrBlobNotFound are what the admin methods
// return for a target that does not exist.
var (
	ErrContainerNotFound = errors.New("memblob: container not found")
	ErrBlobNotFound      = errors.New("memblob: blob not found")
)

// BlobState is a blob as the service holds it, read with Service.Blob. It
// shows what no REST answer does (the lease ID and its expiry), for tests
// and safety checks.
type BlobState struct {
	Metadata     map[string]string
	Content      []byte
	ETag         azcore.ETag // quoted, as GetProperties answers it
	LastModified time.Time
	Created      time.Time
	LeaseState   lease.StateType
	LeaseStatus  lease.StatusType
	// LeaseDuration is fixed or infinite while leased, empty otherwise.
	LeaseDuration lease.DurationType
	// LeaseID is the lease's ID in every state but available: Azure keeps
	// it through expired, breaking and broken.
	LeaseID string
	// LeaseExpiry is when a fixed lease expires if not renewed, and
	// BreakTime when a breaking lease will be broken; zero otherwise.
	LeaseExpiry, BreakTime time.Time
}

// Blob returns the blob's state as of the service's clock now, and false
// if the container or the blob does not exist. The maps and slices
// returned are copies.
func (s *Service) Blob(container, name string) (BlobState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.containers[container]
	if cs == nil {
		return BlobState{}, false
	}
	b := cs.blobs[name]
	if b == nil {
		return BlobState{}, false
	}
	b.lease.at(s.now())
	st := BlobState{
		Metadata:      maps.Clone(b.metadata),
		Content:       slices.Clone(b.content),
		ETag:          azcore.ETag(quote(b.etag)),
		LastModified:  b.lastModified,
		Created:       b.created,
		LeaseState:    lease.StateType(b.lease.state),
		LeaseStatus:   lease.StatusType(b.lease.status()),
		LeaseDuration: lease.DurationType(b.lease.durationType()),
	}
	if b.lease.state != stateAvailable {
		st.LeaseID = b.lease.id
	}
	switch b.lease.state {
	case stateLeased:
		if !b.lease.infinite {
			st.LeaseExpiry = b.lease.expiry
		}
	case stateBreaking:
		st.BreakTime = b.lease.breakAt
	}
	if st.Metadata == nil {
		st.Metadata = map[string]string{}
	}
	return st, true
}

// SetBlobMetadata replaces the blob's metadata as a hand edit would (in the
// portal, or by a tool holding the account key that ignores leases): it
// needs no lease ID and leaves the lease as it is, but like any write it
// gives the blob a new ETag and Last-Modified, which it returns. The
// observer sees it as an admin set-metadata.
func (s *Service) SetBlobMetadata(container, name string, md map[string]string) (azcore.ETag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.containers[container]
	if cs == nil {
		return "", ErrContainerNotFound
	}
	b := cs.blobs[name]
	if b == nil {
		return "", ErrBlobNotFound
	}
	now := s.now()
	b.lease.at(now)
	b.metadata = maps.Clone(md)
	b.etag = s.newETag()
	b.lastModified = now
	s.adminEvent(now, OpSetMetadata, container, name, b)
	return azcore.ETag(quote(b.etag)), nil
}

// DeleteBlob deletes the blob whatever its lease, as a deletion by hand
// (or by a lifecycle rule) would. The observer sees it as an admin delete.
func (s *Service) DeleteBlob(container, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.containers[container]
	if cs == nil {
		return ErrContainerNotFound
	}
	if cs.blobs[name] == nil {
		return ErrBlobNotFound
	}
	cs.removeBlob(name)
	s.adminEvent(s.now(), OpDelete, container, name, nil)
	return nil
}

// DeleteContainer deletes the container and all its blobs, leased or not,
// as Delete Container does. The observer sees it as an admin
// delete-container.
func (s *Service) DeleteContainer(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.containers[name] == nil {
		return ErrContainerNotFound
	}
	delete(s.containers, name)
	s.adminEvent(s.now(), OpDeleteContainer, name, "", nil)
	return nil
}

// adminEvent tells the observer of an admin change; b is the blob after it
// (nil: gone).
func (s *Service) adminEvent(now time.Time, op Op, container, name string, b *blobState) {
	if s.observer == nil {
		return
	}
	e := Event{Time: now, Admin: true, Container: container, Blob: name, Op: op}
	var c call
	b.report(&c)
	c.result.fill(&e)
	s.observer(e)
}
