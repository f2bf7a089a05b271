// Package baseline reproduces the algorithm of Microsoft's Leader Election
// sample (C#: BlobDistributedMutex, BlobLeaseManager) in Go, so that the
// benchmarks can measure it side by side with this library under the same
// faults. It is deliberately faithful, flaws included; nothing else may use
// it.
//
// The sample: try to acquire a 15 s lease, and wait 20 s after a failed
// attempt; on success run the task, and renew the lease at once and then
// every 10 s (counted from the start of the previous renewal); when a renew
// call fails, cancel the task; when the task ends first, cancel the renewals
// and release the lease; then try again. The storage client keeps the SDK's
// default retry policy (3 retries from 0.8 s, no per-try timeout), so a
// renewal against a server that stops answering does not return, and the
// task is not cancelled, until the connection breaks.
package baseline

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

// The sample's timings.
const (
	LeaseDuration          = 15 * time.Second
	RenewInterval          = 10 * time.Second
	AcquireAttemptInterval = 20 * time.Second
)

// Mutex is the sample's BlobDistributedMutex.
type Mutex struct {
	// Container holds Blob, the lease blob; their client has the SDK's
	// default options.
	Container *container.Client
	Blob      *blockblob.Client
	// Task runs while the lease is held.
	Task func(ctx context.Context) error
	// OnTermEnd, if set, is called once the task has returned, with the
	// earliest moment the lease could have expired on the server (send
	// time of the last successful acquire or renewal + LeaseDuration).
	// It is instrumentation for the benchmarks, not part of the sample.
	OnTermEnd func(leaseExpiry time.Time)
}

// RunTaskWhenMutexAcquired is the sample's loop; it returns when ctx is done.
func (m *Mutex) RunTaskWhenMutexAcquired(ctx context.Context) error {
	// The sample's set-up creates the container if it does not exist.
	_, _ = m.Container.Create(ctx, nil)
	for ctx.Err() == nil {
		lc, sent, ok := m.tryAcquireLeaseOrWait(ctx)
		if ok {
			m.runTerm(ctx, lc, sent)
		}
	}
	return ctx.Err()
}

// tryAcquireLeaseOrWait proposes a fresh lease ID; on any failure it waits
// AcquireAttemptInterval.
func (m *Mutex) tryAcquireLeaseOrWait(ctx context.Context) (*lease.BlobClient, time.Time, bool) {
	lc, err := lease.NewBlobClient(m.Blob, nil)
	if err != nil {
		return nil, time.Time{}, false
	}
	sent := time.Now()
	_, err = lc.AcquireLease(ctx, int32(LeaseDuration/time.Second), nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		// The sample creates the blob when it is missing.
		anyTag := azcore.ETagAny
		_, _ = m.Blob.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
			AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyTag}},
		})
		sent = time.Now()
		_, err = lc.AcquireLease(ctx, int32(LeaseDuration/time.Second), nil)
	}
	if err == nil {
		return lc, sent, true
	}
	t := time.NewTimer(AcquireAttemptInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return nil, time.Time{}, false
}

// runTerm is the sample's CancelAllWhenAnyCompletes over the task and
// KeepRenewingLease.
func (m *Mutex) runTerm(ctx context.Context, lc *lease.BlobClient, sent time.Time) {
	leaseCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg     sync.WaitGroup
		expiry time.Time
	)
	done := make(chan struct{}, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = m.Task(leaseCtx)
		done <- struct{}{}
	}()
	go func() {
		defer wg.Done()
		expiry = m.keepRenewingLease(leaseCtx, lc, sent)
		done <- struct{}{}
	}()
	<-done
	cancel()
	wg.Wait()
	if m.OnTermEnd != nil {
		m.OnTermEnd(expiry)
	}
}

// keepRenewingLease renews until a renewal fails (it returns, which cancels
// the task) or ctx is cancelled (it releases the lease and returns). It
// returns the lease's expiry as of the last successful renewal.
func (m *Mutex) keepRenewingLease(ctx context.Context, lc *lease.BlobClient, sent time.Time) time.Time {
	expiry := sent.Add(LeaseDuration)
	for {
		if ctx.Err() != nil {
			release(ctx, lc)
			return expiry
		}
		start := time.Now()
		_, err := lc.RenewLease(ctx, nil)
		if err != nil {
			if ctx.Err() != nil {
				release(ctx, lc)
			}
			return expiry
		}
		expiry = start.Add(LeaseDuration)
		t := time.NewTimer(RenewInterval - time.Since(start))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// release is the sample's ReleaseLease, which it does not wait for. Ours is
// bounded, so that a release sent into a dead network does not hang the
// loop: that would only make the baseline look worse than the sample.
func release(ctx context.Context, lc *lease.BlobClient) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _ = lc.ReleaseLease(ctx, nil)
}
