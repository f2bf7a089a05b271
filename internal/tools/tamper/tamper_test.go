package tamper

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/azuritetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

var containers int

// writer returns a Writer on a container of its own, created.
func writer(t *testing.T) *Writer {
	t.Helper()
	containers++
	w, err := New(azuritetest.ConnectionString(t), fmt.Sprintf("tamper-%d-%d", time.Now().UnixNano()%1e6, containers))
	require.NoError(t, err)
	t.Cleanup(w.Close)
	_, err = w.cc.Create(context.Background(), nil)
	require.NoError(t, err)
	return w
}

func hold(t *testing.T, w *Writer, name string) *lease.BlobClient {
	t.Helper()
	id := "11111111-2222-4333-8444-555555555555"
	lc, err := lease.NewBlobClient(w.cc.NewBlobClient(name), &lease.BlobClientOptions{LeaseID: &id})
	require.NoError(t, err)
	_, err = lc.AcquireLease(context.Background(), -1, nil)
	require.NoError(t, err)
	return lc
}

// A malformed record goes only on an unleased blob: a missing one is
// created with it; a leased one is left alone until its lease is released.
func TestMalformedRecordsAreWrittenOnlyWhileUnleased(t *testing.T) {
	ctx := context.Background()
	w := writer(t)
	out, err := w.WriteMalformed(ctx, "m", KindMutex, TermGarbage, time.Now().Add(5*time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	assert.Zero(t, out.Term, "a garbage term is no term")
	props, err := w.cc.NewBlobClient("m").GetProperties(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, "garbage", value(props.Metadata, KeyTerm))
	assert.Equal(t, KindMutex, value(props.Metadata, KeyKind))

	lc := hold(t, w, "m")
	_, err = w.WriteMalformed(ctx, "m", KindMutex, TermOverflow, time.Now().Add(300*time.Millisecond), 50*time.Millisecond)
	require.ErrorIs(t, err, ErrLeased)
	props, err = w.cc.NewBlobClient("m").GetProperties(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, "garbage", value(props.Metadata, KeyTerm), "nothing written under a lease")

	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = lc.ReleaseLease(context.Background(), nil)
	}()
	_, err = w.WriteMalformed(ctx, "m", KindMutex, TermOverflow, time.Now().Add(5*time.Second), 20*time.Millisecond)
	require.NoError(t, err, "written once the lease was released")
	props, err = w.cc.NewBlobClient("m").GetProperties(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, "9223372036854775807", value(props.Metadata, KeyTerm))
}

// A repair writes the term after the highest seen: the fleet's (observed)
// or read from a record that is not the other writer's, never the
// overflowed one the other writer wrote itself.
func TestRepairWritesTheTermAfterTheHighestSeen(t *testing.T) {
	ctx := context.Background()
	w := writer(t)
	bc := w.cc.NewBlockBlobClient("s")
	_, err := w.WriteMalformed(ctx, "s", KindShard, DurationAbsurd, time.Now().Add(time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	props, err := bc.GetProperties(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, "2562047h", value(props.Metadata, KeyDuration))
	assert.Equal(t, "1", value(props.Metadata, KeyTerm), "a valid term after none")

	// The fleet writes term 41 meanwhile.
	_, err = bc.SetMetadata(ctx, map[string]*string{KeyIdentity: ptr("i01"), KeyTerm: ptr("41")}, nil)
	require.NoError(t, err)
	w.Observe("s", 17)
	_, err = w.WriteMalformed(ctx, "s", KindShard, TermOverflow, time.Now().Add(time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, int64(41), w.Highest("s"), "read from the fleet's record before it was overwritten")

	out, err := w.Repair(ctx, "s", KindShard, time.Now().Add(time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, int64(42), out.Term)
	props, err = bc.GetProperties(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, "42", value(props.Metadata, KeyTerm))
	assert.NotEmpty(t, value(props.Metadata, KeyEnded), "the repaired record's term has ended")

	_, err = w.Repair(ctx, "gone", KindShard, time.Now().Add(200*time.Millisecond), 50*time.Millisecond)
	assert.ErrorIs(t, err, ErrLeased, "a repair does not create a blob")
}

// A leased blob is not deleted; once released, it is. Deleting the
// container takes the blob's lease first, so never takes a contender's.
func TestDeletionsWaitForTheLeaseToBeFree(t *testing.T) {
	ctx := context.Background()
	w := writer(t)
	_, err := w.WriteMalformed(ctx, "d", KindMutex, DurationGarbage, time.Now().Add(time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	lc := hold(t, w, "d")
	_, err = w.DeleteBlob(ctx, "d", time.Now().Add(300*time.Millisecond), 50*time.Millisecond)
	require.ErrorIs(t, err, ErrLeased)
	_, err = w.DeleteContainer(ctx, "d", time.Now().Add(300*time.Millisecond), 50*time.Millisecond)
	require.ErrorIs(t, err, ErrLeased)
	_, err = w.cc.NewBlobClient("d").GetProperties(ctx, nil)
	require.NoError(t, err, "still there")

	_, err = lc.ReleaseLease(ctx, nil)
	require.NoError(t, err)
	_, err = w.DeleteBlob(ctx, "d", time.Now().Add(time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	_, err = w.cc.NewBlobClient("d").GetProperties(ctx, nil)
	assert.True(t, bloberror.HasCode(err, bloberror.BlobNotFound), "%v", err)

	_, err = w.WriteMalformed(ctx, "d", KindMutex, TermGarbage, time.Now().Add(time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	_, err = w.DeleteContainer(ctx, "d", time.Now().Add(time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	_, err = w.cc.GetProperties(ctx, nil)
	assert.True(t, bloberror.HasCode(err, bloberror.ContainerNotFound), "%v", err)
}

// A late acquire takes a session judged dead, not only one whose lease
// ended: it waits on an unleased blob whose record lacks the end mark (a
// lease broken, the mark not yet written: nobody has acted on its death, and
// its owner may resume it), and takes the lease under the given ID once the
// mark is there.
func TestAcquireLateWaitsForTheEndMark(t *testing.T) {
	ctx := context.Background()
	w := writer(t)
	bc := w.cc.NewBlockBlobClient("s")
	md := Record(KindMutex, 3, time.Now())
	delete(md, KeyEnded)
	_, err := bc.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{Metadata: md})
	require.NoError(t, err)
	id := "aaaaaaaa-2222-4333-8444-555555555555"
	_, err = w.AcquireLate(ctx, "s", id, time.Now().Add(300*time.Millisecond), 50*time.Millisecond)
	require.ErrorIs(t, err, ErrNotMarked, "unleased, but not marked: not taken")
	props, err := bc.GetProperties(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, lease.StateTypeAvailable, *props.LeaseState)

	go func() {
		time.Sleep(200 * time.Millisecond)
		md[KeyEnded] = ptr(time.Now().UTC().Format(time.RFC3339Nano))
		_, _ = bc.SetMetadata(context.Background(), md, nil)
	}()
	out, err := w.AcquireLate(ctx, "s", id, time.Now().Add(5*time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	assert.Greater(t, out.Tries, 1, "it waited for the mark")
	props, err = bc.GetProperties(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, lease.StateTypeLeased, *props.LeaseState)
	lc, err := lease.NewBlobClient(bc.BlobClient(), &lease.BlobClientOptions{LeaseID: &id})
	require.NoError(t, err)
	_, err = lc.ReleaseLease(ctx, nil)
	assert.NoError(t, err, "held under the ID it was given")

	_, err = w.AcquireLate(ctx, "gone", id, time.Now().Add(time.Second), 20*time.Millisecond)
	assert.ErrorIs(t, err, ErrGone)
}

// DeleteContainerNow deletes the container while a blob in it is leased:
// the lease goes with it, and the holder's renewal then finds no container.
func TestDeleteContainerNowTakesAHoldersLease(t *testing.T) {
	ctx := context.Background()
	w := writer(t)
	_, err := w.WriteMalformed(ctx, "h", KindMutex, DurationGarbage, time.Now().Add(time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	lc := hold(t, w, "h")
	_, err = w.DeleteContainerNow(ctx, time.Now().Add(time.Second), 20*time.Millisecond)
	require.NoError(t, err)
	_, err = w.cc.GetProperties(ctx, nil)
	assert.True(t, bloberror.HasCode(err, bloberror.ContainerNotFound), "%v", err)
	_, err = lc.RenewLease(ctx, nil)
	assert.True(t, bloberror.HasCode(err, bloberror.ContainerNotFound), "%v", err)
	_, err = w.DeleteContainerNow(ctx, time.Now().Add(time.Second), 20*time.Millisecond)
	assert.NoError(t, err, "a container already gone")
}

// Phantom sessions: an empty blob and a leased one with a mutex's record;
// both are removed, the leased one with the Writer's lease or, once an
// instance broke it, without.
func TestPhantomSessionsAreCreatedAndRemoved(t *testing.T) {
	ctx := context.Background()
	w := writer(t)
	ps, err := w.Phantoms(ctx, "bench", "1")
	require.NoError(t, err)
	require.Len(t, ps, 2)
	assert.Equal(t, "bench/sessions/phantom-1-empty", ps[0].Name)
	props, err := w.cc.NewBlobClient(ps[1].Name).GetProperties(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, lease.StateTypeLeased, *props.LeaseState)
	assert.Equal(t, KindMutex, value(props.Metadata, KeyKind))
	require.NoError(t, w.RemovePhantoms(ctx, ps, time.Now().Add(2*time.Second), 20*time.Millisecond))
	for _, p := range ps {
		_, err := w.cc.NewBlobClient(p.Name).GetProperties(ctx, nil)
		assert.True(t, bloberror.HasCode(err, bloberror.BlobNotFound), "%s: %v", p.Name, err)
	}

	ps, err = w.Phantoms(ctx, "bench", "2")
	require.NoError(t, err)
	lc, err := lease.NewBlobClient(w.cc.NewBlobClient(ps[1].Name), nil)
	require.NoError(t, err)
	_, err = lc.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: ptrInt32(0)})
	require.NoError(t, err)
	require.NoError(t, w.RemovePhantoms(ctx, ps, time.Now().Add(2*time.Second), 20*time.Millisecond))
	_, err = w.cc.NewBlobClient(ps[1].Name).GetProperties(ctx, nil)
	assert.True(t, bloberror.HasCode(err, bloberror.BlobNotFound), "%v", err)
}

func ptrInt32(n int32) *int32 { return &n }

// Which cases leave no term to follow.
func TestCasesThatBlockTheTerm(t *testing.T) {
	var blocking []Case
	for _, c := range Cases {
		if c.BlocksTerm() {
			blocking = append(blocking, c)
		}
		got, ok := ParseCase(string(c))
		assert.True(t, ok)
		assert.Equal(t, c, got)
	}
	assert.Equal(t, []Case{TermGarbage, TermOverflow}, blocking)
}
