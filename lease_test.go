package leaderelection

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newManager(t *testing.T, s BlobSettings) *BlobLeaseManager {
	t.Helper()
	s, _ = withTransport(t, s)
	m, err := NewBlobLeaseManager(s, WithLogger(testLogger(t, "manager")))
	require.NoError(t, err)
	return m
}

func TestLeaseManagerLifecycle(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		s := testSettings(t)
		a, b := newManager(t, s), newManager(t, s)
		_, err := uuid.Parse(a.LeaseID())
		require.NoError(t, err, "lease IDs are GUIDs")
		require.NotEqual(t, a.LeaseID(), b.LeaseID())

		before := time.Now()
		g, err := a.Acquire(ctx) // creates the container and the blob
		require.NoError(t, err)
		assert.Equal(t, a.LeaseID(), g.LeaseID)
		assert.False(t, g.Sent.Before(before))
		assert.Equal(t, 15*time.Second, g.Expires.Sub(g.Sent))

		_, err = b.Acquire(ctx)
		require.ErrorIs(t, err, ErrLeaseHeld, "the normal follower answer")
		assert.ErrorContains(t, err, "LeaseAlreadyPresent")

		// An acquire whose answer was lost is retried with the same ID, and succeeds.
		_, err = a.Acquire(ctx)
		require.NoError(t, err)

		_, err = a.Renew(ctx)
		require.NoError(t, err)
		_, err = b.Renew(ctx)
		require.ErrorIs(t, err, ErrLeaseLost, "a non-holder's renew")

		info, err := b.Inspect(ctx)
		require.NoError(t, err)
		assert.Equal(t, lease.StateTypeLeased, info.State)
		assert.Equal(t, lease.DurationTypeFixed, info.Duration)

		require.NoError(t, a.Release(ctx))
		require.NoError(t, a.Release(ctx), "releasing a lease that is no longer ours counts as released")
		_, err = a.Renew(ctx)
		require.ErrorIs(t, err, ErrLeaseLost, "renew after release")

		_, err = b.Acquire(ctx)
		require.NoError(t, err, "a released lease can be taken at once")
	})
}

func TestBreakEndsTheHoldersLease(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		s := testSettings(t)
		a, op := newManager(t, s), newManager(t, s)
		_, err := a.Acquire(ctx)
		require.NoError(t, err)

		remaining, err := op.Break(ctx, 0)
		require.NoError(t, err)
		assert.Zero(t, remaining)
		_, err = a.Renew(ctx)
		require.ErrorIs(t, err, ErrLeaseLost)
		assert.ErrorContains(t, err, "LeaseIsBrokenAndCannotBeRenewed")
		_, err = op.Acquire(ctx)
		require.NoError(t, err, "a broken lease can be taken")

		remaining, err = a.Break(ctx, 5*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 5*time.Second, remaining)
		_, err = a.Acquire(ctx)
		require.ErrorIs(t, err, ErrLeaseHeld, "nobody may take a breaking lease")

		_, err = op.Break(ctx, 61*time.Second)
		require.ErrorContains(t, err, "break period")
	})
}

func TestBreakWithoutLeaseIsNotAnError(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		m := newManager(t, testSettings(t))
		_, err := m.Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Release(ctx))
		remaining, err := m.Break(ctx, 0)
		require.NoError(t, err)
		assert.Zero(t, remaining)
	})
}

func TestInspectBeforeAnyoneContendedShowsNoLeader(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		m := newManager(t, testSettings(t))
		info, err := m.Inspect(context.Background())
		require.NoError(t, err)
		assert.False(t, info.Exists)
		assert.False(t, info.Held())
		assert.Zero(t, info.Leader.Number)
	})
}

func TestRecordTermNumbersGrowAndNeedTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testSettings(t)
	a, b := newManager(t, s), newManager(t, s)
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	t1, err := a.RecordTerm(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, int64(1), t1.Number)
	assert.Equal(t, a.LeaseID(), t1.LeaseID)

	_, err = b.RecordTerm(ctx, "b")
	require.ErrorIs(t, err, ErrLeaseLost, "only the holder may write the term")

	_, err = op(t, s).Break(ctx, 0)
	require.NoError(t, err)
	_, err = b.Acquire(ctx)
	require.NoError(t, err)
	t2, err := b.RecordTerm(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, int64(2), t2.Number)

	info, err := a.Inspect(ctx)
	require.NoError(t, err)
	assert.True(t, info.Held())
	assert.Equal(t, "b", info.Leader.Identity)
	assert.Equal(t, int64(2), info.Leader.Number)
	assert.WithinDuration(t, t2.Since, info.Leader.Since, time.Millisecond)

	_, err = a.RecordTerm(ctx, "bad\nidentity")
	require.ErrorContains(t, err, "printable ASCII")
}

func op(t *testing.T, s BlobSettings) *BlobLeaseManager { return newManager(t, s) }

// A SAS with a wrong signature is refused; the signature appears nowhere.
func TestBadSASIsPermanentAndNotLeaked(t *testing.T) {
	t.Parallel()
	s := testSettings(t)
	cred, err := azblob.NewSharedKeyCredential(azurite.AccountName, "d3JvbmdrZXl3cm9uZ2tleXdyb25na2V5d3JvbmdrZXl3cm9uZ2tleQ==")
	require.NoError(t, err)
	q, err := sas.AccountSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().Add(time.Hour).UTC(),
		Permissions:   (&sas.AccountPermissions{Read: true, Write: true, Create: true}).String(),
		ResourceTypes: (&sas.AccountResourceTypes{Service: true, Container: true, Object: true}).String(),
	}.SignWithSharedKey(cred)
	require.NoError(t, err)
	base := connectionStringURL(t, s.ConnectionString)
	s.ConnectionString = ""
	s.SASURL = base + "?" + q.Encode()
	s, _ = withTransport(t, s)
	m, err := NewBlobLeaseManager(s, WithLogger(testLogger(t, "sas")))
	require.NoError(t, err)

	_, err = m.Acquire(context.Background())
	require.ErrorIs(t, err, ErrPermanent)
	assert.ErrorContains(t, err, "403")
	assert.NotContains(t, err.Error(), q.Signature())
	t.Log(err)
}

// connectionStringURL is the blob endpoint a test's connection string names
// (azuritetest's always name it), with a trailing slash.
func connectionStringURL(t *testing.T, cs string) string {
	t.Helper()
	for part := range strings.SplitSeq(cs, ";") {
		if k, v, ok := strings.Cut(part, "="); ok && strings.EqualFold(strings.TrimSpace(k), "BlobEndpoint") {
			return strings.TrimRight(strings.TrimSpace(v), "/") + "/"
		}
	}
	t.Fatalf("no BlobEndpoint in the connection string")
	return ""
}

var _ azcore.TokenCredential = fakeCredential{}

// A release whose outcome is unknown may still reach the server later. The
// manager then proposes a new lease ID, so that such a late release cannot
// end a lease it acquires afterwards.
func TestReleaseWithUnknownOutcomeChangesTheLeaseID(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		s, tr := withTransport(t, testSettings(t))
		m, err := NewBlobLeaseManager(s, WithLogger(testLogger(t, "manager")))
		require.NoError(t, err)
		_, err = m.Acquire(ctx)
		require.NoError(t, err)
		old := m.LeaseID()

		tr.Blackhole()
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, m.Release(short), ErrTransient)
		tr.Heal()
		require.NotEqual(t, old, m.LeaseID(), "a new lease ID after a release that may arrive late")
		_, err = uuid.Parse(m.LeaseID())
		require.NoError(t, err)

		late := func() error { return m.blobClient.ReleaseLease(ctx, old, blobstore.Call{}) }
		require.NoError(t, late()) // the old release arrives
		_, err = m.Acquire(ctx)
		require.NoError(t, err, "the manager takes the lease with its new ID")
		require.Error(t, late(), "a release of the old ID cannot end the new lease") // a duplicate of it arrives later still
		_, err = m.Renew(ctx)
		require.NoError(t, err, "the new lease is still ours")
		require.NoError(t, m.Release(ctx))
	})
}

// An answer with another lease ID is classified where it arises; passing it
// through wrap again must not give it a second kind.
func TestClassifiedErrorKeepsItsOneKind(t *testing.T) {
	m := &BlobLeaseManager{container: "c", blob: "b", floor: &termFloor{}}
	held := &StorageError{Op: "acquire lease", Container: "c", Blob: "b",
		detail: "the server answered with another lease ID", kind: ErrLeaseHeld}
	err := m.wrap(held)
	assert.ErrorIs(t, err, ErrLeaseHeld)
	for _, other := range []error{ErrLeaseLost, ErrTransient, ErrPermanent} {
		assert.NotErrorIs(t, err, other)
	}
}

// A container being deleted (Azure refuses it for about 30 s) is no reason
// to give up: an acquire waits for it to pass, and a holder has lost its
// lease, whose blob goes with the container.
func TestContainerBeingDeletedIsNoReasonToGiveUp(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		s, tr := withTransport(t, testSettings(t))
		m, err := NewBlobLeaseManager(s, WithLogger(testLogger(t, "manager")))
		require.NoError(t, err)
		_, err = m.Acquire(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { tr.Heal(); _ = m.Release(ctx) })

		tr.Fail(http.StatusConflict, string(bloberror.ContainerBeingDeleted))
		_, err = m.Acquire(ctx)
		assert.ErrorIs(t, err, ErrTransient, "acquire")
		_, err = m.Renew(ctx)
		assert.ErrorIs(t, err, ErrLeaseLost, "renew")
		_, err = m.RecordTerm(ctx, "me")
		assert.ErrorIs(t, err, ErrLeaseLost, "term read")
		_, err = m.Inspect(ctx)
		assert.ErrorIs(t, err, ErrTransient, "inspect")
	})
}

// The rule by which Break breaks again, after its break found the blob
// changed (sameRunningTerm): only while the blob shows the term it first
// read, recorded and running, as a renewal of an ETag lease leaves it; not
// a term ended (released, and perhaps taken by another that has not
// recorded its own yet), a lease gone, or another term. (The whole retry,
// against a renewing holder on Azurite, is leaderctl's
// TestForcedBreakReadsAgainWhenTheHolderRenewsMeanwhile.)
func TestBreakRetriesOnlyOnTheSameRunningTerm(t *testing.T) {
	running := LeaseInfo{State: lease.StateTypeLeased, Leader: Term{Number: 7, Identity: "x"}}
	ended := running
	ended.LeaderEnded = time.Now()
	free := running
	free.State = lease.StateTypeBroken
	other := running
	other.Leader = Term{Number: 8, Identity: "y"}
	sameNumber := running
	sameNumber.Leader.Identity = "y"
	unread := running
	unread.RecordError = &RecordError{Key: wire.MetaTerm}
	none := LeaseInfo{State: lease.StateTypeLeased}
	assert.True(t, sameRunningTerm(running, running))
	assert.False(t, sameRunningTerm(running, ended))
	assert.False(t, sameRunningTerm(ended, ended))
	assert.False(t, sameRunningTerm(running, free))
	assert.False(t, sameRunningTerm(running, other))
	assert.False(t, sameRunningTerm(running, sameNumber))
	assert.False(t, sameRunningTerm(running, unread))
	assert.False(t, sameRunningTerm(none, none))
}
