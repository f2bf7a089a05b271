package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/google/uuid"

	"github.com/blobelect/leaderelection/internal/tools/parallel"
)

// The floors: the least work any design must do for a scenario, done
// directly with the SDK against the same Azurite, in the same run, with the
// library's concurrency: 8 claims in flight per instance (claimParallel),
// 16 releases (releaseAtOnce). Each client is a client of its own, as each
// instance is a process of its own. Nothing here lists, waits or balances:
// each client is told its blobs.

const (
	floorClaimParallel   = 8
	floorReleaseParallel = 16
)

// floorBlob is one blob of a floor, with the client that works on it.
type floorBlob struct {
	name string
	bc   *blockblob.Client
	etag azcore.ETag
	id   string
	cc   *container.Client // its client's container, where the kill floor's list is read
}

// floorContainer makes a container of its own for one floor, and a client
// of it for each of n clients.
func floorContainer(ctx context.Context, connStr, name string, n int) ([]*container.Client, error) {
	out, err := floorClients(connStr, name, n)
	if err != nil {
		return nil, err
	}
	if _, err := out[0].Create(ctx, nil); err != nil {
		return nil, fmt.Errorf("floor %s: %w", name, err)
	}
	return out, nil
}

// floorClients makes n clients of the container, each with a pool of its
// own that keeps every connection it uses, as an instance's does: the SDK's
// shared default keeps 10 idle per host for the whole process, and a floor
// whose clients opened new connections all along would be slower than it
// must be.
func floorClients(connStr, name string, n int) ([]*container.Client, error) {
	out := make([]*container.Client, n)
	for i := range out {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 2 * (floorClaimParallel + floorReleaseParallel)
		cc, err := container.NewClientFromConnectionString(connStr, name, &container.ClientOptions{
			ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}})
		if err != nil {
			return nil, err
		}
		out[i] = cc
	}
	return out, nil
}

// record writes a term record under the blob's lease, If-Match its ETag, as
// a claim does.
func (b *floorBlob) record(ctx context.Context, term int) error {
	n, who := strconv.Itoa(term), "floor"
	resp, err := b.bc.SetMetadata(ctx, map[string]*string{"leaderterm": &n, "leadersession": &who}, &blob.SetMetadataOptions{
		AccessConditions: &blob.AccessConditions{
			LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &b.id},
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &b.etag},
		}})
	if err != nil {
		return err
	}
	b.etag = *resp.ETag
	return nil
}

// acquire takes the blob's infinite lease with a new ID, If-Match its ETag.
func (b *floorBlob) acquire(ctx context.Context) error {
	b.id = uuid.NewString()
	lc, err := lease.NewBlobClient(b.bc, &lease.BlobClientOptions{LeaseID: &b.id})
	if err != nil {
		return err
	}
	_, err = lc.AcquireLease(ctx, -1, &lease.BlobAcquireOptions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &b.etag}})
	return err
}

func (b *floorBlob) release(ctx context.Context) error {
	lc, err := lease.NewBlobClient(b.bc, &lease.BlobClientOptions{LeaseID: &b.id})
	if err != nil {
		return err
	}
	_, err = lc.ReleaseLease(ctx, nil)
	return err
}

// create makes the blob, empty, If-None-Match *, as a first claim does.
func (b *floorBlob) create(ctx context.Context) error {
	anyETag := azcore.ETagAny
	resp, err := b.bc.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyETag}},
	})
	if err != nil {
		return err
	}
	b.etag = *resp.ETag
	return nil
}

// blobsOf makes n blobs, dealt out to the clients in turn.
func blobsOf(ccs []*container.Client, n int) [][]*floorBlob {
	out := make([][]*floorBlob, len(ccs))
	for i := range n {
		c := i % len(ccs)
		name := fmt.Sprintf("shards/shard-%05d", i)
		out[c] = append(out[c], &floorBlob{name: name, bc: ccs[c].NewBlockBlobClient(name)})
	}
	return out
}

// parallelClients runs fn for each client's blobs at once and returns how
// long the slowest took.
func parallelClients(parts [][]*floorBlob, fn func([]*floorBlob) error) (time.Duration, error) {
	start := time.Now()
	errs := make(chan error, len(parts))
	for _, p := range parts {
		go func() { errs <- fn(p) }()
	}
	var first error
	for range parts {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return time.Since(start), first
}

// claimFirst is a first claim of a blob: create it, take its lease, record
// term 1.
func (b *floorBlob) claimFirst(ctx context.Context) error {
	if err := b.create(ctx); err != nil {
		return err
	}
	if err := b.acquire(ctx); err != nil {
		return err
	}
	return b.record(ctx, 1)
}

// firstClaims claims every client's blobs for the first time, each client
// claimParallel at a time, and returns how long the slowest client took.
func firstClaims(ctx context.Context, parts [][]*floorBlob) (time.Duration, error) {
	return parallelClients(parts, func(bs []*floorBlob) error {
		return parallel.Each(bs, floorClaimParallel, func(b *floorBlob) error { return b.claimFirst(ctx) })
	})
}

// coldFloor: clients create, lease and record n shard blobs, each client its
// part, claimParallel at a time.
func coldFloor(ctx context.Context, connStr, name string, n, clients int) (time.Duration, error) {
	ccs, err := floorContainer(ctx, connStr, name, clients)
	if err != nil {
		return 0, err
	}
	defer ccs[0].Delete(context.WithoutCancel(ctx), nil)
	return firstClaims(ctx, blobsOf(ccs, n))
}

// prepared makes n blobs leased and recorded by givers clients (untimed).
func prepared(ctx context.Context, connStr, name string, n, givers int) ([]*container.Client, [][]*floorBlob, error) {
	ccs, err := floorContainer(ctx, connStr, name, givers+1)
	if err != nil {
		return nil, nil, err
	}
	parts := blobsOf(ccs[:givers], n)
	_, err = firstClaims(ctx, parts)
	return ccs, parts, err
}

// joinFloor: givers hold n blobs; each releases its part, releaseAtOnce at a
// time, and one receiver acquires and records each as soon as it is
// released, claimParallel at a time. From the first release sent to the last
// record confirmed.
func joinFloor(ctx context.Context, connStr, name string, n, givers int) (time.Duration, error) {
	ccs, parts, err := prepared(ctx, connStr, name, n, givers)
	if err != nil {
		return 0, err
	}
	defer ccs[0].Delete(context.WithoutCancel(ctx), nil)
	recv := ccs[givers]
	freed := make(chan *floorBlob, n)
	start := time.Now()
	var releases sync.WaitGroup
	var relErr error
	var mu sync.Mutex
	for _, p := range parts {
		releases.Add(1)
		go func() {
			defer releases.Done()
			if err := parallel.Each(p, floorReleaseParallel, func(b *floorBlob) error {
				if err := b.release(ctx); err != nil {
					return err
				}
				freed <- b
				return nil
			}); err != nil {
				mu.Lock()
				relErr = err
				mu.Unlock()
			}
		}()
	}
	go func() { releases.Wait(); close(freed) }()
	var claims sync.WaitGroup
	var claimErr error
	for range floorClaimParallel {
		claims.Add(1)
		go func() {
			defer claims.Done()
			for b := range freed {
				nb := &floorBlob{name: b.name, bc: recv.NewBlockBlobClient(b.name), etag: b.etag}
				err := nb.acquire(ctx)
				if err == nil {
					err = nb.record(ctx, 2)
				}
				if err != nil {
					mu.Lock()
					claimErr = err
					mu.Unlock()
				}
			}
		}()
	}
	claims.Wait()
	if claimErr != nil {
		return 0, claimErr
	}
	return time.Since(start), relErr
}

// killFloor: a dead holder held n blobs, and left the list of them (name,
// ETag, lease ID: what a survivor needs to take each without a listing);
// survivors clients each read that list once, then take their part, each
// blob by a change of its lease's ID from the dead holder's to one of its
// own, If-Match the listed ETag, and a record, claimParallel at a time.
// A break and an acquire would be one request more per blob; a design
// that knows the dead holder's lease IDs needs neither.
func killFloor(ctx context.Context, connStr, name string, n, survivors int) (time.Duration, error) {
	ccs, parts, err := prepared(ctx, connStr, name, n, 1)
	if err != nil {
		return 0, err
	}
	defer ccs[0].Delete(context.WithoutCancel(ctx), nil)
	var list bytes.Buffer
	for _, b := range parts[0] {
		fmt.Fprintf(&list, "%s %s %s\n", b.name, b.etag, b.id)
	}
	if _, err := ccs[0].NewBlockBlobClient("held/dead").UploadBuffer(ctx, list.Bytes(), nil); err != nil {
		return 0, err
	}
	claimers, err := floorClients(connStr, name, survivors)
	if err != nil {
		return 0, err
	}
	split := make([][]*floorBlob, survivors)
	for i, b := range parts[0] {
		c := i % survivors
		split[c] = append(split[c], &floorBlob{name: b.name, bc: claimers[c].NewBlockBlobClient(b.name), etag: b.etag, id: b.id, cc: claimers[c]})
	}
	return parallelClients(split, func(bs []*floorBlob) error {
		if len(bs) == 0 {
			return nil
		}
		resp, err := bs[0].cc.NewBlobClient("held/dead").DownloadStream(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		resp.Body.Close()
		return parallel.Each(bs, floorClaimParallel, func(b *floorBlob) error {
			if err := b.change(ctx); err != nil {
				return err
			}
			return b.record(ctx, 2)
		})
	})
}

// change changes the blob's lease ID from b.id to a new one, If-Match its
// ETag.
func (b *floorBlob) change(ctx context.Context) error {
	lc, err := lease.NewBlobClient(b.bc, &lease.BlobClientOptions{LeaseID: &b.id})
	if err != nil {
		return err
	}
	id := uuid.NewString()
	if _, err := lc.ChangeLease(ctx, id, &lease.BlobChangeOptions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &b.etag}}); err != nil {
		return err
	}
	b.id = id
	return nil
}
