package blobstore

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// opCase is one behaviour of an operation, asserted on both backends.
type opCase struct {
	name string
	run  func(t *testing.T, e *env)
}

// TestOperations runs every case against Azurite and against the in-memory
// service: the same assertions must hold on both.
func TestOperations(t *testing.T) {
	for _, tc := range opCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			both(t, tc.run)
		})
	}
}

var opCases = []opCase{
	{"a container created twice is ContainerAlreadyExists, permanent", func(t *testing.T, e *env) {
		err := e.cl.CreateContainer(t.Context(), Call{})
		got := wantErr(t, err, 409, ContainerAlreadyExists, Permanent)
		assert.Equal(t, "create container", got.Op)
		assert.Equal(t, e.name, got.Container)
		assert.Empty(t, got.Blob)
	}},

	{"a blob is created once, with its metadata and content", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("made")
		etag, err := b.Create(ctx, WriteOptions{Metadata: md("role", "mutex"), Content: []byte("hello")})
		require.NoError(t, err)
		require.NotEmpty(t, etag)
		got, err := b.Download(ctx, DownloadOptions{})
		require.NoError(t, err)
		assert.Equal(t, "hello", string(got.Data))
		assert.Equal(t, map[string]string{"role": "mutex"}, flat(got.Metadata))
		assert.Equal(t, etag, got.ETag)

		_, err = b.Create(ctx, WriteOptions{})
		wantErr(t, err, 409, BlobAlreadyExists, Permanent)
		_, err = b.Create(ctx, WriteOptions{Call: Call{Op: "create shard", Held: []string{BlobAlreadyExists, ConditionNotMet, LeaseIDMissing}}})
		assert.Equal(t, "create shard", wantErr(t, err, 409, BlobAlreadyExists, Held).Op)
		props, err := b.Properties(ctx, Call{})
		require.NoError(t, err)
		assert.Equal(t, etag, props.ETag, "a refused creation changes nothing")
	}},

	{"a leased blob is not created again", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("leased")
		_, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		require.NoError(t, err)
		_, err = b.Create(ctx, WriteOptions{})
		wantErr(t, err, 409, BlobAlreadyExists, Permanent)
	}},

	{"a blob in a missing container is ContainerNotFound", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.elsewhere(t).Blob("b")
		_, err := b.Create(ctx, WriteOptions{})
		wantErr(t, err, 404, ContainerNotFound, Permanent)
		_, err = b.Create(ctx, WriteOptions{Call: with(nil, LostCodes)})
		wantErr(t, err, 404, ContainerNotFound, Lost)
		_, err = b.Properties(ctx, Call{})
		wantErr(t, err, 404, ContainerNotFound, Permanent)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite})
		wantErr(t, err, 404, ContainerNotFound, Permanent)
	}},

	{"put replaces a blob's content and metadata", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("dir/list")
		first, err := b.Put(ctx, WriteOptions{Metadata: md("a", "1"), Content: []byte("one")})
		require.NoError(t, err)
		second, err := b.Put(ctx, WriteOptions{Metadata: md("b", "2"), Content: []byte("two")})
		require.NoError(t, err)
		assert.NotEqual(t, first, second)
		got, err := b.Download(ctx, DownloadOptions{})
		require.NoError(t, err)
		assert.Equal(t, "two", string(got.Data))
		assert.Equal(t, map[string]string{"b": "2"}, flat(got.Metadata))

		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite})
		require.NoError(t, err)
		_, err = b.Put(ctx, WriteOptions{})
		wantErr(t, err, 412, LeaseIDMissing, Permanent)
	}},

	{"set metadata writes under a lease and on condition", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("record")
		old, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		etag, err := b.SetMetadata(ctx, SetMetadataOptions{Metadata: md("leaderterm", "1"), IfMatch: old})
		require.NoError(t, err)
		assert.NotEqual(t, old, etag, "every write changes the ETag")

		_, err = b.SetMetadata(ctx, SetMetadataOptions{Metadata: md("x", "y"), IfMatch: old})
		wantErr(t, err, 412, ConditionNotMet, Permanent)
		_, err = b.SetMetadata(ctx, SetMetadataOptions{Metadata: md("x", "y"), IfMatch: old, Call: Call{Held: []string{ConditionNotMet}}})
		wantErr(t, err, 412, ConditionNotMet, Held)

		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		require.NoError(t, err)
		_, err = b.SetMetadata(ctx, SetMetadataOptions{Metadata: md("x", "y")})
		wantErr(t, err, 412, LeaseIDMissing, Permanent)
		_, err = b.SetMetadata(ctx, SetMetadataOptions{Metadata: md("x", "y"), Call: with(nil, LostCodes)})
		wantErr(t, err, 412, LeaseIDMissing, Lost)
		_, err = b.SetMetadata(ctx, SetMetadataOptions{Metadata: md("x", "y"), LeaseID: idB, Call: with(nil, LostCodes)})
		wantErr(t, err, 412, LeaseIDMismatchWithBlobOperation, Lost)

		next, err := b.SetMetadata(ctx, SetMetadataOptions{Metadata: md("leaderterm", "2"), LeaseID: idA, IfMatch: etag})
		require.NoError(t, err)
		props, err := b.Properties(ctx, Call{})
		require.NoError(t, err)
		assert.Equal(t, next, props.ETag)
		assert.Equal(t, map[string]string{"leaderterm": "2"}, flat(props.Metadata), "a write replaces all the metadata")

		_, err = e.cl.Blob("none").SetMetadata(ctx, SetMetadataOptions{Metadata: md("x", "y"), Call: with(nil, LostCodes)})
		wantErr(t, err, 404, BlobNotFound, Lost)
	}},

	{"properties show the lease's state, status and duration, and lease operations leave the ETag", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("props")
		etag, err := b.Create(ctx, WriteOptions{Metadata: md("k", "v")})
		require.NoError(t, err)
		check := func(state LeaseState, status LeaseStatus, dur LeaseDuration) Props {
			t.Helper()
			before := time.Now()
			p, err := b.Properties(ctx, Call{})
			require.NoError(t, err)
			assert.Equal(t, state, p.LeaseState)
			assert.Equal(t, status, p.LeaseStatus)
			assert.Equal(t, dur, p.LeaseDuration)
			assert.Equal(t, etag, p.ETag)
			assert.Equal(t, map[string]string{"k": "v"}, flat(p.Metadata))
			assert.False(t, p.LastModified.IsZero())
			assert.False(t, p.Received.Before(before))
			assert.False(t, p.Received.After(time.Now()))
			return p
		}
		first := check(StateAvailable, StatusUnlocked, "")
		l, err := b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, etag, l.ETag)
		assert.Equal(t, first.LastModified, check(StateLeased, StatusLocked, DurationFixed).LastModified)
		require.NoError(t, b.ReleaseLease(ctx, idA, Call{}))
		check(StateAvailable, StatusUnlocked, "")
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite})
		require.NoError(t, err)
		check(StateLeased, StatusLocked, DurationInfinite)
		_, err = b.BreakLease(ctx, BreakOptions{})
		require.NoError(t, err)
		check(StateBroken, StatusUnlocked, "")

		_, err = e.cl.Blob("none").Properties(ctx, Call{Op: "read term", Lost: LostCodes})
		assert.Equal(t, "read term", wantErr(t, err, 404, BlobNotFound, Lost).Op)
	}},

	{"download reads content up to a limit", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("held/s1")
		_, err := b.Put(ctx, WriteOptions{Metadata: md("leaderheld", "2"), Content: []byte("0123456789")})
		require.NoError(t, err)
		got, err := b.Download(ctx, DownloadOptions{Limit: 4})
		require.NoError(t, err)
		assert.Equal(t, "0123", string(got.Data))
		assert.Equal(t, "2", flat(got.Metadata)["leaderheld"])
		got, err = b.Download(ctx, DownloadOptions{})
		require.NoError(t, err)
		assert.Equal(t, "0123456789", string(got.Data))

		_, err = e.cl.Blob("held/none").Download(ctx, DownloadOptions{Call: Call{Op: "read held shards"}})
		assert.Equal(t, "read held shards", wantErr(t, err, 404, BlobNotFound, Permanent).Op)
	}},

	{"delete needs the lease of a leased blob, and honours If-Match", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("gone")
		etag, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		err = b.Delete(ctx, DeleteOptions{IfMatch: staleETag})
		wantErr(t, err, 412, ConditionNotMet, Permanent)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite})
		require.NoError(t, err)
		err = b.Delete(ctx, DeleteOptions{IfMatch: etag})
		wantErr(t, err, 412, LeaseIDMissing, Permanent)
		require.NoError(t, b.Delete(ctx, DeleteOptions{LeaseID: idA, IfMatch: etag}))
		err = b.Delete(ctx, DeleteOptions{Call: Call{Op: "delete session"}})
		assert.Equal(t, "delete session", wantErr(t, err, 404, BlobNotFound, Permanent).Op)

		other := e.cl.Blob("plain")
		_, err = other.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		require.NoError(t, other.Delete(ctx, DeleteOptions{}))
	}},

	{"acquire grants the proposed ID, and another holder's lease is held", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("lease")
		etag, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		l, err := b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, idA, l.ID)
		assert.Equal(t, etag, l.ETag)

		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idB, Duration: 15 * time.Second})
		wantErr(t, err, 409, LeaseAlreadyPresent, Permanent)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idB, Duration: 15 * time.Second, Call: with(HeldCodes, nil)})
		got := wantErr(t, err, 409, LeaseAlreadyPresent, Held)
		assert.Equal(t, "acquire lease", got.Op)
		assert.Equal(t, "lease", got.Blob)

		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		require.NoError(t, err, "the holder's ID acquires again: a lost answer can be retried")
		require.NoError(t, b.ReleaseLease(ctx, idA, Call{}))

		l, err = b.AcquireLease(ctx, AcquireOptions{Duration: Infinite})
		require.NoError(t, err)
		assert.Len(t, l.ID, 36, "no ID proposed: a GUID of the package's")
		assert.NoError(t, b.ReleaseLease(ctx, l.ID, Call{}))
	}},

	{"acquire refuses durations outside 15 s to 60 s", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("durations")
		_, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		for _, d := range []time.Duration{10 * time.Second, 14 * time.Second, 61 * time.Second} {
			_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: d})
			wantErr(t, err, 400, InvalidHeaderValue, Permanent)
		}
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 60*time.Second + 900*time.Millisecond})
		require.NoError(t, err, "whole seconds, rounded down")
	}},

	{"acquire on condition takes nothing from a changed blob", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("shard")
		etag, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite, IfMatch: staleETag,
			Call: Call{Op: "acquire shard lease", Held: append([]string{ConditionNotMet, BlobNotFound}, HeldCodes...)}})
		wantErr(t, err, 412, ConditionNotMet, Held)
		p, err := b.Properties(ctx, Call{})
		require.NoError(t, err)
		assert.Equal(t, StateAvailable, p.LeaseState)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite, IfMatch: etag})
		require.NoError(t, err)

		_, err = e.cl.Blob("none").AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite})
		wantErr(t, err, 404, BlobNotFound, Permanent)
	}},

	{"renew keeps our lease and reports another's, or a broken one, lost", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("renew")
		_, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		require.NoError(t, err)
		l, err := b.RenewLease(ctx, idA, Call{})
		require.NoError(t, err)
		assert.Equal(t, idA, l.ID)

		_, err = b.RenewLease(ctx, idB, Call{})
		wantErr(t, err, 409, LeaseIDMismatchWithLeaseOperation, Permanent)
		_, err = b.RenewLease(ctx, idB, with(nil, LostCodes))
		assert.Equal(t, "renew lease", wantErr(t, err, 409, LeaseIDMismatchWithLeaseOperation, Lost).Op)

		_, err = b.BreakLease(ctx, BreakOptions{Period: 0})
		require.NoError(t, err)
		_, err = b.RenewLease(ctx, idA, with(nil, LostCodes))
		wantErr(t, err, 409, LeaseIsBrokenAndCannotBeRenewed, Lost)
	}},

	{"release frees the lease once", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("release")
		_, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		require.NoError(t, err)
		err = b.ReleaseLease(ctx, idB, with(nil, LostCodes))
		wantErr(t, err, 409, LeaseIDMismatchWithLeaseOperation, Lost)
		require.NoError(t, b.ReleaseLease(ctx, idA, Call{}))
		p, err := b.Properties(ctx, Call{})
		require.NoError(t, err)
		assert.Equal(t, StateAvailable, p.LeaseState)
		err = b.ReleaseLease(ctx, idA, with(nil, LostCodes))
		wantErr(t, err, 409, LeaseIDMismatchWithLeaseOperation, Lost)
		_, err = b.RenewLease(ctx, idA, with(nil, LostCodes))
		wantErr(t, err, 409, LeaseIDMismatchWithLeaseOperation, Lost)
	}},

	{"break ends a lease at once or after its period, on condition", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("break")
		etag, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		_, err = b.BreakLease(ctx, BreakOptions{Period: 0})
		wantErr(t, err, 409, LeaseNotPresentWithLeaseOperation, Permanent)

		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		require.NoError(t, err)
		_, err = b.BreakLease(ctx, BreakOptions{Period: 0, IfMatch: staleETag, Call: Call{Held: []string{ConditionNotMet}}})
		wantErr(t, err, 412, ConditionNotMet, Held)
		p, err := b.Properties(ctx, Call{})
		require.NoError(t, err)
		assert.Equal(t, StateLeased, p.LeaseState, "a refused break changes nothing")

		left, err := b.BreakLease(ctx, BreakOptions{Period: 5*time.Second + 700*time.Millisecond, IfMatch: etag})
		require.NoError(t, err)
		assert.Equal(t, 5*time.Second, left, "whole seconds, rounded down")
		p, err = b.Properties(ctx, Call{})
		require.NoError(t, err)
		assert.Equal(t, StateBreaking, p.LeaseState)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idB, Duration: 15 * time.Second, Call: with(HeldCodes, nil)})
		wantErr(t, err, 409, LeaseAlreadyPresent, Held)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second, Call: with(HeldCodes, nil)})
		wantErr(t, err, 409, LeaseIsBreakingAndCannotBeAcquired, Held)

		left, err = b.BreakLease(ctx, BreakOptions{Period: 0})
		require.NoError(t, err)
		assert.Zero(t, left)
		p, err = b.Properties(ctx, Call{})
		require.NoError(t, err)
		assert.Equal(t, StateBroken, p.LeaseState)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idB, Duration: 15 * time.Second})
		require.NoError(t, err, "a broken lease is anyone's")
	}},

	{"change hands the lease to a new ID and leaves the ETag", func(t *testing.T, e *env) {
		ctx := t.Context()
		b := e.cl.Blob("shards/s")
		etag, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite})
		require.NoError(t, err)
		_, err = b.ChangeLease(ctx, ChangeOptions{From: idA, To: idB, IfMatch: staleETag, Call: Call{Held: []string{ConditionNotMet}}})
		wantErr(t, err, 412, ConditionNotMet, Held)
		_, err = b.ChangeLease(ctx, ChangeOptions{From: idC, To: idB, Call: with(nil, LostCodes)})
		wantErr(t, err, 409, LeaseIDMismatchWithLeaseOperation, Lost)

		l, err := b.ChangeLease(ctx, ChangeOptions{From: idA, To: idB, IfMatch: etag})
		require.NoError(t, err)
		assert.Equal(t, idB, l.ID)
		assert.Equal(t, etag, l.ETag)
		_, err = b.RenewLease(ctx, idB, Call{})
		require.NoError(t, err)
		_, err = b.RenewLease(ctx, idA, with(nil, LostCodes))
		wantErr(t, err, 409, LeaseIDMismatchWithLeaseOperation, Lost)
	}},

	{"a listing comes in pages, with quoted ETags, leases, metadata and receive times", func(t *testing.T, e *env) {
		ctx := t.Context()
		var names []string
		for _, n := range []string{"p/sessions/a", "p/sessions/b", "p/sessions/c", "p/sessions/d", "p/sessions/e"} {
			_, err := e.cl.Blob(n).Create(ctx, WriteOptions{Metadata: md("leaderidentity", n)})
			require.NoError(t, err)
			names = append(names, n)
		}
		_, err := e.cl.Blob("p/shards/x").Create(ctx, WriteOptions{})
		require.NoError(t, err)
		_, err = e.cl.Blob("p/sessions/c").AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite})
		require.NoError(t, err)

		var sizes []int
		var listed []string
		var last time.Time
		before := time.Now()
		for page, err := range e.cl.List(ctx, ListOptions{Prefix: "p/sessions/", Metadata: true, PageSize: 2}) {
			require.NoError(t, err)
			assert.False(t, page.Received.Before(before))
			assert.False(t, page.Received.Before(last), "pages arrive in order")
			last = page.Received
			sizes = append(sizes, len(page.Items))
			for _, it := range page.Items {
				listed = append(listed, it.Name)
				assert.Equal(t, page.Received, it.Received)
				assert.Equal(t, it.Name, flat(it.Metadata)["leaderidentity"])
				p, err := e.cl.Blob(it.Name).Properties(ctx, Call{})
				require.NoError(t, err)
				assert.Equal(t, p.ETag, it.ETag, "a listed ETag is quoted as a header's")
				assert.Equal(t, p.LastModified, it.LastModified)
				assert.Equal(t, p.LeaseState, it.LeaseState)
				assert.Equal(t, p.LeaseStatus, it.LeaseStatus)
				assert.Equal(t, p.LeaseDuration, it.LeaseDuration)
			}
		}
		assert.Equal(t, []int{2, 2, 1}, sizes)
		assert.Equal(t, names, listed)

		sizes = nil
		for page, err := range e.cl.List(ctx, ListOptions{Prefix: "p/"}) {
			require.NoError(t, err)
			sizes = append(sizes, len(page.Items))
			for _, it := range page.Items {
				assert.Nil(t, it.Metadata, "no metadata unless asked for")
				if it.Name == "p/sessions/c" {
					assert.Equal(t, StateLeased, it.LeaseState)
					assert.Equal(t, DurationInfinite, it.LeaseDuration)
				}
			}
		}
		assert.Equal(t, []int{6}, sizes, "one page of up to 5,000 by default")

		pages := 0
		for _, err := range e.cl.List(ctx, ListOptions{Prefix: "p/", PageSize: 1}) {
			require.NoError(t, err)
			pages++
			break
		}
		assert.Equal(t, 1, pages)
	}},

	{"a listing of a missing container fails once, naming the prefix", func(t *testing.T, e *env) {
		n := 0
		for _, err := range e.elsewhere(t).List(t.Context(), ListOptions{Prefix: "p/sessions/", Call: Call{Op: "list sessions"}}) {
			n++
			got := wantErr(t, err, 404, ContainerNotFound, Permanent)
			assert.Equal(t, "list sessions", got.Op)
			assert.Equal(t, "p/sessions/", got.Blob)
		}
		assert.Equal(t, 1, n)
	}},

	{"an answer with another lease ID is no grant", func(t *testing.T, e *env) {
		ctx := t.Context()
		// The server's answer names another lease: as Azurite does for a
		// renewal of an expired lease by a non-holder, which revives the
		// old holder's lease.
		cl := e.via(t, func(next policy.Transporter) policy.Transporter {
			return transporterFunc(func(req *http.Request) (*http.Response, error) {
				resp, err := next.Do(req)
				if err == nil && resp.Header.Get("x-ms-lease-id") != "" {
					resp.Header.Set("x-ms-lease-id", idC)
				}
				return resp, err
			})
		})
		b := cl.Blob("revived")
		_, err := b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		got := wantErr(t, err, 0, "", Held)
		assert.Equal(t, "the server answered with another lease ID", got.Detail)
		assert.Nil(t, got.Err)
		_, err = b.RenewLease(ctx, idA, Call{})
		got = wantErr(t, err, 0, "", Lost)
		assert.Equal(t, "blobstore: renew lease on "+e.name+"/revived: the server answered with another lease ID (lost)", got.Error())
	}},
}

// On Azurite a non-holder's renewal of an expired lease succeeds and
// revives the holder's lease, answering with the holder's ID; the fake
// does the same (its timed contract cases pin it), in virtual time here.
// The renewal is no grant: the lease is lost to whoever sent it.
func TestARenewalThatRevivesAnotherLeaseIsLost(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		svc := memblob.New()
		cl, err := New(Config{ConnectionString: memblob.ConnectionString, Container: "leases",
			ClientOptions: &azblob.ClientOptions{ClientOptions: svc.ClientOptions()}})
		require.NoError(t, err)
		ctx := t.Context()
		require.NoError(t, cl.CreateContainer(ctx, Call{}))
		b := cl.Blob("lease")
		_, err = b.Create(ctx, WriteOptions{})
		require.NoError(t, err)
		_, err = b.AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
		require.NoError(t, err)
		time.Sleep(16 * time.Second)
		_, err = b.RenewLease(ctx, idB, Call{Lost: LostCodes})
		got := wantErr(t, err, 0, "", Lost)
		assert.Equal(t, "the server answered with another lease ID", got.Detail)
		state, _ := svc.Blob("leases", "lease")
		assert.Equal(t, idA, state.LeaseID, "the holder's lease was revived")
	})
}

// Every operation's default Op names it in errors.
func TestDefaultOpNames(t *testing.T) {
	t.Parallel()
	cl := blocked(t, 10*time.Millisecond)
	b := cl.Blob("b")
	ctx := context.Background()
	ops := map[string]func() error{}
	for name, op := range everyOperation(b) {
		ops[name] = func() error { return op(ctx, Call{}) }
	}
	var got []string
	for name, op := range ops {
		err := op()
		var e *Error
		require.ErrorAs(t, err, &e, name)
		got = append(got, e.Op)
	}
	slices.Sort(got)
	assert.Equal(t, []string{"acquire lease", "break lease", "change lease", "create blob", "create container", "delete blob",
		"download blob", "get blob properties", "list blobs", "put blob", "release lease", "renew lease", "set metadata"}, got)
}

// everyOperation makes one request of each kind with the given call, on b
// and its client.
func everyOperation(b *Blob) map[string]func(ctx context.Context, c Call) error {
	return map[string]func(ctx context.Context, c Call) error{
		"create container": func(ctx context.Context, c Call) error { return b.cl.CreateContainer(ctx, c) },
		"create blob": func(ctx context.Context, c Call) error {
			_, err := b.Create(ctx, WriteOptions{Call: c})
			return err
		},
		"put blob": func(ctx context.Context, c Call) error {
			_, err := b.Put(ctx, WriteOptions{Call: c, Content: []byte("x")})
			return err
		},
		"set metadata": func(ctx context.Context, c Call) error {
			_, err := b.SetMetadata(ctx, SetMetadataOptions{Call: c, Metadata: md("a", "b"), LeaseID: idA, IfMatch: staleETag})
			return err
		},
		"get blob properties": func(ctx context.Context, c Call) error {
			_, err := b.Properties(ctx, c)
			return err
		},
		"download blob": func(ctx context.Context, c Call) error {
			_, err := b.Download(ctx, DownloadOptions{Call: c})
			return err
		},
		"delete blob": func(ctx context.Context, c Call) error {
			return b.Delete(ctx, DeleteOptions{Call: c, LeaseID: idA})
		},
		"acquire lease": func(ctx context.Context, c Call) error {
			_, err := b.AcquireLease(ctx, AcquireOptions{Call: c, ID: idA, Duration: 15 * time.Second})
			return err
		},
		"renew lease": func(ctx context.Context, c Call) error {
			_, err := b.RenewLease(ctx, idA, c)
			return err
		},
		"release lease": func(ctx context.Context, c Call) error { return b.ReleaseLease(ctx, idA, c) },
		"break lease": func(ctx context.Context, c Call) error {
			_, err := b.BreakLease(ctx, BreakOptions{Call: c})
			return err
		},
		"change lease": func(ctx context.Context, c Call) error {
			_, err := b.ChangeLease(ctx, ChangeOptions{Call: c, From: idA, To: idB})
			return err
		},
		"list blobs": func(ctx context.Context, c Call) error {
			for _, err := range b.cl.List(ctx, ListOptions{Call: c, Prefix: b.name}) {
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
}
