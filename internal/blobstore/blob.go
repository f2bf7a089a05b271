package blobstore

import (
	"bytes"
	"context"
	"io"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
)

// LeaseState is a blob's lease state as the service reports it. Its values
// are the SDK's lease.StateType's, so either converts to the other.
type LeaseState string

// The lease states. A blob never leased is available; an expired lease is
// free to take; a breaking one is held until its break period ends.
const (
	StateAvailable LeaseState = "available"
	StateLeased    LeaseState = "leased"
	StateExpired   LeaseState = "expired"
	StateBreaking  LeaseState = "breaking"
	StateBroken    LeaseState = "broken"
)

// LeaseStatus is a blob's lease status: locked while leased or breaking.
// Its values are the SDK's lease.StatusType's.
type LeaseStatus string

// The lease statuses.
const (
	StatusLocked   LeaseStatus = "locked"
	StatusUnlocked LeaseStatus = "unlocked"
)

// LeaseDuration is the kind of a blob's lease while it is leased: fixed (15
// to 60 s, the server expires it) or infinite (only a break ends it). Its
// values are the SDK's lease.DurationType's.
type LeaseDuration string

// The lease durations; "" when the blob is not leased.
const (
	DurationFixed    LeaseDuration = "fixed"
	DurationInfinite LeaseDuration = "infinite"
)

// Props is what the service says of a blob: its lease (never its ID, which
// no read shows), ETag, last write and metadata, and when the answer came.
// A field the answer did not carry is its zero value.
type Props struct {
	// LeaseState is available, leased, expired, breaking or broken.
	LeaseState LeaseState
	// LeaseStatus is locked while the lease is leased or breaking.
	LeaseStatus LeaseStatus
	// LeaseDuration is fixed or infinite while leased, "" otherwise.
	LeaseDuration LeaseDuration
	// ETag is quoted, as response headers give it, whether it was read
	// from a blob or from a listing (which gives it bare).
	ETag azcore.ETag
	// LastModified is the blob's last write, by the server's clock, to the
	// second. Lease operations do not change it, nor the ETag.
	LastModified time.Time
	// Metadata is the blob's metadata, keys as the service gives them
	// (lowercase, for what the library writes); nil from a listing without
	// metadata.
	Metadata map[string]*string
	// Received is when the answer arrived (for a listing, its page), by
	// this machine's clock with its monotonic reading: after the server
	// read what it describes.
	Received time.Time
}

// Blob is a handle on one blob of the client's container. It holds no state
// but its name: handles are cheap, and any number may name the same blob.
type Blob struct {
	cl   *Client
	name string
	bb   *blockblob.Client
}

// Blob returns a handle on the blob name in the client's container.
func (cl *Client) Blob(name string) *Blob {
	return &Blob{cl: cl, name: name, bb: cl.cc.NewBlockBlobClient(name)}
}

// Name is the blob's name.
func (b *Blob) Name() string { return b.name }

// fail classifies err for call c on this blob.
func (b *Blob) fail(c Call, err error) *Error { return b.cl.classify(c, b.name, err) }

// WriteOptions are a whole blob's upload: its metadata and content.
type WriteOptions struct {
	Call
	// Metadata replaces all of the blob's metadata; nil writes none.
	Metadata map[string]*string
	// Content is the blob's content; nil writes an empty blob.
	Content []byte
}

// Create uploads the blob only if it does not exist (If-None-Match: *), and
// returns the ETag it made ("" if the answer carried none). Op default
// "create blob". An existing blob is an error with Code [BlobAlreadyExists]
// (Azure, Azurite), or, if it is leased, [LeaseIDMissing]; pass those in
// Held to read "someone made it first" as [Held].
func (b *Blob) Create(ctx context.Context, o WriteOptions) (azcore.ETag, error) {
	anyETag := azcore.ETagAny
	return b.upload(ctx, o.Call.named("create blob"), o, &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyETag},
	})
}

// Put uploads the blob whether it exists or not, replacing it, and returns
// the ETag it made ("" if the answer carried none). Op default "put blob".
// A leased blob refuses it (412 [LeaseIDMissing]).
func (b *Blob) Put(ctx context.Context, o WriteOptions) (azcore.ETag, error) {
	return b.upload(ctx, o.Call.named("put blob"), o, nil)
}

func (b *Blob) upload(ctx context.Context, c Call, o WriteOptions, cond *blob.AccessConditions) (azcore.ETag, error) {
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	resp, err := b.bb.Upload(ctx, streaming.NopCloser(bytes.NewReader(o.Content)), &blockblob.UploadOptions{
		Metadata:         o.Metadata,
		AccessConditions: cond,
	})
	if err != nil {
		return "", b.fail(c, err)
	}
	b.cl.answered()
	return deref(resp.ETag), nil
}

// SetMetadataOptions are a metadata write's metadata and conditions.
type SetMetadataOptions struct {
	Call
	// Metadata replaces all of the blob's metadata.
	Metadata map[string]*string
	// LeaseID is the lease to write under; "" for none, which a leased
	// blob refuses (412 LeaseIdMissing).
	LeaseID string
	// IfMatch makes the write conditional on the blob's ETag (412
	// ConditionNotMet otherwise); "" for no condition.
	IfMatch azcore.ETag
}

// SetMetadata replaces the blob's metadata and returns the ETag it made (""
// if the answer carried none): every write changes it. Op default "set
// metadata".
func (b *Blob) SetMetadata(ctx context.Context, o SetMetadataOptions) (azcore.ETag, error) {
	c := o.Call.named("set metadata")
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	var opts *blob.SetMetadataOptions
	if cond := accessConditions(o.LeaseID, o.IfMatch); cond != nil {
		opts = &blob.SetMetadataOptions{AccessConditions: cond}
	}
	resp, err := b.bb.SetMetadata(ctx, o.Metadata, opts)
	if err != nil {
		return "", b.fail(c, err)
	}
	b.cl.answered()
	return deref(resp.ETag), nil
}

// Properties reads the blob's lease, ETag, last write and metadata. It
// needs no lease. Op default "get blob properties". A missing blob is an
// error with Code [BlobNotFound]; a missing container, [ContainerNotFound].
func (b *Blob) Properties(ctx context.Context, c Call) (Props, error) {
	c = c.named("get blob properties")
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	resp, err := b.bb.GetProperties(ctx, nil)
	received := time.Now()
	if err != nil {
		return Props{}, b.fail(c, err)
	}
	b.cl.answered()
	return Props{
		LeaseState:    LeaseState(deref(resp.LeaseState)),
		LeaseStatus:   LeaseStatus(deref(resp.LeaseStatus)),
		LeaseDuration: LeaseDuration(deref(resp.LeaseDuration)),
		ETag:          deref(resp.ETag),
		LastModified:  deref(resp.LastModified),
		Metadata:      resp.Metadata,
		Received:      received,
	}, nil
}

// DownloadOptions bound a download.
type DownloadOptions struct {
	Call
	// Limit is how many bytes of the content to read at most; 0 reads it
	// all. A caller that refuses content over N bytes passes N+1 and
	// checks the length.
	Limit int64
}

// Content is a downloaded blob: its properties and (up to the limit) its
// content. Props.Received is when the answer's headers arrived.
type Content struct {
	Props
	Data []byte
}

// Download reads the blob's content and properties. The content is read
// within the call's timeout. Op default "download blob". A missing blob is
// an error with Code [BlobNotFound].
func (b *Blob) Download(ctx context.Context, o DownloadOptions) (Content, error) {
	c := o.Call.named("download blob")
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	resp, err := b.bb.DownloadStream(ctx, nil)
	received := time.Now()
	if err != nil {
		return Content{}, b.fail(c, err)
	}
	b.cl.answered()
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	if o.Limit > 0 {
		r = io.LimitReader(r, o.Limit)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return Content{}, b.fail(c, err)
	}
	return Content{
		Props: Props{
			LeaseState:    LeaseState(deref(resp.LeaseState)),
			LeaseStatus:   LeaseStatus(deref(resp.LeaseStatus)),
			LeaseDuration: LeaseDuration(deref(resp.LeaseDuration)),
			ETag:          deref(resp.ETag),
			LastModified:  deref(resp.LastModified),
			Metadata:      resp.Metadata,
			Received:      received,
		},
		Data: data,
	}, nil
}

// DeleteOptions are a deletion's conditions.
type DeleteOptions struct {
	Call
	// LeaseID is the blob's lease, which a leased blob requires (412
	// LeaseIdMissing without it); "" for none.
	LeaseID string
	// IfMatch makes the deletion conditional on the blob's ETag (412
	// ConditionNotMet otherwise); "" for no condition.
	IfMatch azcore.ETag
}

// Delete deletes the blob. Op default "delete blob". A missing blob is an
// error with Code [BlobNotFound].
func (b *Blob) Delete(ctx context.Context, o DeleteOptions) error {
	c := o.Call.named("delete blob")
	ctx, cancel := b.cl.bound(ctx, c)
	defer cancel()
	var opts *blob.DeleteOptions
	if cond := accessConditions(o.LeaseID, o.IfMatch); cond != nil {
		opts = &blob.DeleteOptions{AccessConditions: cond}
	}
	if _, err := b.bb.Delete(ctx, opts); err != nil {
		return b.fail(c, err)
	}
	b.cl.answered()
	return nil
}

// accessConditions are the SDK's conditions for a lease ID and an ETag, nil
// when neither is set: the request then carries no condition header at all.
func accessConditions(leaseID string, ifMatch azcore.ETag) *blob.AccessConditions {
	if leaseID == "" && ifMatch == "" {
		return nil
	}
	cond := &blob.AccessConditions{}
	if leaseID != "" {
		cond.LeaseAccessConditions = &blob.LeaseAccessConditions{LeaseID: &leaseID}
	}
	if ifMatch != "" {
		cond.ModifiedAccessConditions = &blob.ModifiedAccessConditions{IfMatch: &ifMatch}
	}
	return cond
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
