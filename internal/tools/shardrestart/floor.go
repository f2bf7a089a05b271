package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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

// The floor of a restart in place: the least work any design must do for a
// restarted instance to run its shards again, fenced against what its dead
// predecessor left in flight, under a new term. It learns which shards are
// its own (one read of one small blob that names them: the session's list,
// heldlist.go), and for each changes the lease's ID to one of its own and writes
// the next term, If-Match the ETag the change answered with: done directly
// with the SDK against the same Azurite, from a client with a new connection
// pool (a new process has no connections), with as many requests in flight
// as the library's take-back. (Until the take-back read the list, it listed
// every shard first, and so did the floor.)

const floorParallel = 32 // takeBackParallel

type floorShard struct {
	name string
	id   string // the lease's ID now
	term int
}

type floor struct {
	conn, container string
	shards          []*floorShard // the restarted instance's, leased
}

// newFloor makes a container of n shard blobs, and leases held of them.
func newFloor(ctx context.Context, conn string, n, held int) (*floor, error) {
	f := &floor{conn: conn, container: fmt.Sprintf("floor-%d", time.Now().UnixNano())}
	cc, tr, err := f.client()
	if err != nil {
		return nil, err
	}
	defer tr.CloseIdleConnections()
	if _, err := cc.Create(ctx, nil); err != nil {
		return nil, err
	}
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("shards/shard-%05d", i))
	}
	var mu sync.Mutex
	err = parallel.Each(names, floorParallel, func(name string) error {
		bc := cc.NewBlockBlobClient(name)
		term := "1"
		if _, err := bc.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
			Metadata: map[string]*string{"leaderterm": &term}}); err != nil {
			return err
		}
		mu.Lock()
		mine := len(f.shards) < held
		s := &floorShard{name: name, id: uuid.NewString(), term: 1}
		if mine {
			f.shards = append(f.shards, s)
		}
		mu.Unlock()
		if !mine {
			return nil
		}
		lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: &s.id})
		if err != nil {
			return err
		}
		_, err = lc.AcquireLease(ctx, -1, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	var list strings.Builder
	for _, s := range f.shards {
		fmt.Fprintf(&list, "%s %d 1\n", s.name, s.term)
	}
	if _, err := cc.NewBlockBlobClient(floorList).Upload(ctx, streaming.NopCloser(strings.NewReader(list.String())), nil); err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	return f, nil
}

// floorList is the blob that names the restarted instance's shards.
const floorList = "held/session"

// client is a client with a connection pool of its own.
func (f *floor) client() (*container.Client, *http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2 * floorParallel
	cc, err := container.NewClientFromConnectionString(f.conn, f.container, &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}})
	return cc, tr, err
}

// once does the floor's work and returns how long it took.
func (f *floor) once(ctx context.Context) (time.Duration, error) {
	cc, tr, err := f.client()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := cc.NewBlobClient(floorList).DownloadStream(ctx, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	err = parallel.Each(f.shards, floorParallel, func(s *floorShard) error {
		bc := cc.NewBlockBlobClient(s.name)
		lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: &s.id})
		if err != nil {
			return err
		}
		next := uuid.NewString()
		changed, err := lc.ChangeLease(ctx, next, nil)
		if err != nil {
			return err
		}
		etag := *changed.ETag
		s.id, s.term = next, s.term+1
		term := strconv.Itoa(s.term)
		_, err = bc.SetMetadata(ctx, map[string]*string{"leaderterm": &term}, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &s.id},
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
		}})
		return err
	})
	took := time.Since(start)
	tr.CloseIdleConnections()
	return took, err
}
