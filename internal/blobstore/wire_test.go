package blobstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wire records each request as a line: what the server sees of it that
// the caller chose (method, path, query, conditions, lease IDs and
// durations, metadata, content) and how long its context had left when it
// was sent, to the second. Headers that vary from one request to the next
// whatever the caller does (date, signature, request ID) are left out.
type wire struct {
	next  policy.Transporter
	mu    sync.Mutex
	lines []string
}

func (w *wire) Do(req *http.Request) (*http.Response, error) {
	var b strings.Builder
	b.WriteString(req.Method + " " + req.URL.Path)
	q := req.URL.Query()
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range q {
			if !yield(k) {
				return
			}
		}
	})
	for i, k := range keys {
		b.WriteString(map[bool]string{true: "?", false: "&"}[i == 0] + k + "=" + q.Get(k))
	}
	var hs []string
	for k, vs := range req.Header {
		switch lk := strings.ToLower(k); {
		case lk == "x-ms-date", lk == "x-ms-client-request-id", lk == "authorization", lk == "user-agent", lk == "date":
		case strings.HasPrefix(lk, "x-ms-"), strings.HasPrefix(lk, "if-"), lk == "content-length", lk == "content-type":
			hs = append(hs, lk+"="+strings.Join(vs, ","))
		}
	}
	slices.Sort(hs)
	b.WriteString(" " + strings.Join(hs, " "))
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
		fmt.Fprintf(&b, " body=%q", body)
	}
	if d, ok := req.Context().Deadline(); ok {
		fmt.Fprintf(&b, " deadline=%v", time.Until(d).Round(time.Second))
	} else {
		b.WriteString(" deadline=none")
	}
	w.mu.Lock()
	w.lines = append(w.lines, b.String())
	w.mu.Unlock()
	return w.next.Do(req)
}

// site is one call of the root's on the Azure SDK, and the call on this
// package that replaces it. Both run against fresh services set up alike
// (the fake's ETags are a sequence, so they come out alike too); the
// requests they send must be the same.
type site struct {
	name  string // file.go:function of the root
	setup func(t *testing.T, b *Blob) azcore.ETag
	root  func(ctx context.Context, cc *container.Client, etag azcore.ETag) error
	store func(ctx context.Context, cl *Client, etag azcore.ETag) error
}

// Timings of the root's settings with their defaults: RequestTimeout,
// claimTimeout (3 × RequestTimeout) and listPageTimeout.
const (
	rootRequest  = 4 * time.Second
	rootClaim    = 12 * time.Second
	rootListPage = 30 * time.Second
)

// callWithin is the root's lease.go:callWithin as it was before the root
// called this package (5c563f6): each call site below is written as it was
// then, and sends what the package sends now.
func callWithin(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx = policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
	return context.WithTimeout(ctx, d)
}

func leaseOn(cc *container.Client, name, id string) *lease.BlobClient {
	lc, err := lease.NewBlobClient(cc.NewBlockBlobClient(name), &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		panic(err)
	}
	return lc
}

const blobName = "p/sessions/s1"

// recordMD is a term record's metadata, as record.go writes it.
func recordMD() map[string]*string {
	return md("leaderidentity", "host-1", "leaderterm", "7", "leadersince", "2026-01-02T03:04:05Z", "leaderleaseduration", "15s", "leaderrole", "session")
}

// created makes the blob with a record.
func created(t *testing.T, b *Blob) azcore.ETag {
	etag, err := b.Put(t.Context(), WriteOptions{Metadata: recordMD()})
	require.NoError(t, err)
	return etag
}

// leased makes the blob and takes its lease with idA, infinite.
func leased(t *testing.T, b *Blob) azcore.ETag {
	etag := created(t, b)
	_, err := b.AcquireLease(t.Context(), AcquireOptions{ID: idA, Duration: Infinite})
	require.NoError(t, err)
	return etag
}

// listed makes three blobs under p/sessions/ and one elsewhere.
func listed(t *testing.T, b *Blob) azcore.ETag {
	for _, n := range []string{"p/sessions/a", "p/sessions/b", "p/sessions/c", "p/shards/x"} {
		_, err := b.cl.Blob(n).Put(t.Context(), WriteOptions{Metadata: md("leaderrole", "session")})
		require.NoError(t, err)
	}
	return ""
}

func drain(ctx context.Context, pager interface {
	More() bool
	NextPage(context.Context) (container.ListBlobsFlatResponse, error)
}, timeout time.Duration) error {
	for pager.More() {
		callCtx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			callCtx, cancel = callWithin(ctx, timeout)
		}
		_, err := pager.NextPage(callCtx)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

func drainList(ctx context.Context, cl *Client, o ListOptions) error {
	for _, err := range cl.List(ctx, o) {
		if err != nil {
			return err
		}
	}
	return nil
}

var sites = []site{
	{"lease.go:createContainer", nil,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := cc.Create(ctx, nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error { return cl.CreateContainer(ctx, Call{}) }},

	{"lease.go:createBlob", nil,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			anyETag := azcore.ETagAny
			_, err := cc.NewBlockBlobClient(blobName).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
				Metadata:         recordMD(),
				AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyETag}},
			})
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).Create(ctx, WriteOptions{Metadata: recordMD()})
			return err
		}},

	{"shardclaim.go:createShard", nil,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootClaim)
			defer cancel()
			anyETag := azcore.ETagAny
			_, err := cc.NewBlockBlobClient(blobName).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
				Metadata:         md("leaderrole", "shard"),
				AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyETag}},
			})
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).Create(ctx, WriteOptions{Metadata: md("leaderrole", "shard"), Call: Call{Timeout: rootClaim}})
			return err
		}},

	{"handoffnotes.go:writeNote, prefer.go:keepBlob (upload)", nil,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := cc.NewBlockBlobClient(blobName).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
				Metadata: md("leaderrole", "handoff", "leadernote", "s:1:\"0x1\""),
			})
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).Put(ctx, WriteOptions{Metadata: md("leaderrole", "handoff", "leadernote", "s:1:\"0x1\"")})
			return err
		}},

	{"heldlist.go:putHeld", nil,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := cc.NewBlockBlobClient(blobName).Upload(ctx, streaming.NopCloser(strings.NewReader("a 1\nb 2")), &blockblob.UploadOptions{
				Metadata: md("leaderrole", "held", "leaderheld", "2"),
			})
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).Put(ctx, WriteOptions{Metadata: md("leaderrole", "held", "leaderheld", "2"), Content: []byte("a 1\nb 2")})
			return err
		}},

	{"lease.go:acquire (native lease)", created,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := leaseOn(cc, blobName, idA).AcquireLease(ctx, 15, nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).AcquireLease(ctx, AcquireOptions{ID: idA, Duration: 15 * time.Second})
			return err
		}},

	{"lease.go:acquire (ETag lease), session.go:startSession", created,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := leaseOn(cc, blobName, idA).AcquireLease(ctx, -1, nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite})
			return err
		}},

	{"shardclaim.go:acquireIfMatch", created,
		func(ctx context.Context, cc *container.Client, etag azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootClaim)
			defer cancel()
			_, err := leaseOn(cc, blobName, idA).AcquireLease(ctx, -1, &lease.BlobAcquireOptions{
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
			})
			return err
		},
		func(ctx context.Context, cl *Client, etag azcore.ETag) error {
			_, err := cl.Blob(blobName).AcquireLease(ctx, AcquireOptions{ID: idA, Duration: Infinite, IfMatch: etag, Call: Call{Timeout: rootClaim}})
			return err
		}},

	{"prefer.go:keepBlob (acquire)", created,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := leaseOn(cc, blobName, idB).AcquireLease(ctx, int32(15*time.Second/time.Second), nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).AcquireLease(ctx, AcquireOptions{ID: idB, Duration: 15 * time.Second})
			return err
		}},

	{"lease.go:Renew, prefer.go:keepBlob (renew)", leased,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := leaseOn(cc, blobName, idA).RenewLease(ctx, nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).RenewLease(ctx, idA, Call{})
			return err
		}},

	{"lease.go:releaseWith", leased,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := leaseOn(cc, blobName, idA).ReleaseLease(ctx, nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			return cl.Blob(blobName).ReleaseLease(ctx, idA, Call{})
		}},

	{"lease.go:breakLease", leased,
		func(ctx context.Context, cc *container.Client, etag azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			secs := int32(15 * time.Second / time.Second)
			_, err := leaseOn(cc, blobName, idC).BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: &secs,
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}})
			return err
		},
		func(ctx context.Context, cl *Client, etag azcore.ETag) error {
			_, err := cl.Blob(blobName).BreakLease(ctx, BreakOptions{Period: 15 * time.Second, IfMatch: etag})
			return err
		}},

	{"silence.go:breakIfUnchangedWithin", leased,
		func(ctx context.Context, cc *container.Client, etag azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootClaim)
			defer cancel()
			var period int32
			_, err := leaseOn(cc, blobName, idC).BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: &period,
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}})
			return err
		},
		func(ctx context.Context, cl *Client, etag azcore.ETag) error {
			_, err := cl.Blob(blobName).BreakLease(ctx, BreakOptions{IfMatch: etag, Call: Call{Timeout: rootClaim}})
			return err
		}},

	{"handoff.go:changeLease (If-Match)", leased,
		func(ctx context.Context, cc *container.Client, etag azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := leaseOn(cc, blobName, idA).ChangeLease(ctx, idB, &lease.BlobChangeOptions{
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}})
			return err
		},
		func(ctx context.Context, cl *Client, etag azcore.ETag) error {
			_, err := cl.Blob(blobName).ChangeLease(ctx, ChangeOptions{From: idA, To: idB, IfMatch: etag})
			return err
		}},

	{"handoff.go:changeLease (no condition)", leased,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			var opts *lease.BlobChangeOptions
			_, err := leaseOn(cc, blobName, idA).ChangeLease(ctx, idB, opts)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).ChangeLease(ctx, ChangeOptions{From: idA, To: idB})
			return err
		}},

	{"lease.go:inspect (Inspect), leaseterm.go:recordTerm, etaglease.go:writtenSince, sessionfile.go:resumeSession", leased,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := cc.NewBlockBlobClient(blobName).GetProperties(ctx, nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).Properties(ctx, Call{})
			return err
		}},

	{"heldlist.go:freeShard", leased,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := cc.NewBlobClient(blobName).GetProperties(ctx, nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).Properties(ctx, Call{})
			return err
		}},

	{"handoff.go:warm", leased,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootClaim)
			defer cancel()
			_, err := cc.NewBlobClient(blobName).GetProperties(ctx, nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).Properties(ctx, Call{Timeout: rootClaim})
			return err
		}},

	{"leaseterm.go:recordTerm, leaseterm.go:endTerm, etaglease.go:renewByWrite", leased,
		func(ctx context.Context, cc *container.Client, etag azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			id := idA
			_, err := cc.NewBlockBlobClient(blobName).SetMetadata(ctx, recordMD(), &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
				LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &id},
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
			}})
			return err
		},
		func(ctx context.Context, cl *Client, etag azcore.ETag) error {
			_, err := cl.Blob(blobName).SetMetadata(ctx, SetMetadataOptions{Metadata: recordMD(), LeaseID: idA, IfMatch: etag})
			return err
		}},

	{"shardclaim.go:writeShardRecord", leased,
		func(ctx context.Context, cc *container.Client, etag azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootClaim)
			defer cancel()
			id := idA
			_, err := cc.NewBlockBlobClient(blobName).SetMetadata(ctx, recordMD(), &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
				LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &id},
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
			}})
			return err
		},
		func(ctx context.Context, cl *Client, etag azcore.ETag) error {
			_, err := cl.Blob(blobName).SetMetadata(ctx, SetMetadataOptions{Metadata: recordMD(), LeaseID: idA, IfMatch: etag, Call: Call{Timeout: rootClaim}})
			return err
		}},

	{"leaseterm.go:RepairRecord, recreated.go:writeUnleased", created,
		func(ctx context.Context, cc *container.Client, etag azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := cc.NewBlockBlobClient(blobName).SetMetadata(ctx, recordMD(), &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag},
			}})
			return err
		},
		func(ctx context.Context, cl *Client, etag azcore.ETag) error {
			_, err := cl.Blob(blobName).SetMetadata(ctx, SetMetadataOptions{Metadata: recordMD(), IfMatch: etag})
			return err
		}},

	{"heldlist.go:readHeld", func(t *testing.T, b *Blob) azcore.ETag {
		_, err := b.Put(t.Context(), WriteOptions{Metadata: md("leaderrole", "held", "leaderheld", "1"), Content: []byte("a 1")})
		require.NoError(t, err)
		return ""
	},
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			resp, err := cc.NewBlobClient(blobName).DownloadStream(ctx, nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.ReadAll(io.LimitReader(resp.Body, 4<<20+1))
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			_, err := cl.Blob(blobName).Download(ctx, DownloadOptions{Limit: 4<<20 + 1})
			return err
		}},

	{"session.go:endSession (delete), heldlist.go:dropHeld, prefer.go:watchCandidates (delete), handoff.go:dropNotes (delete)", created,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := cc.NewBlockBlobClient(blobName).Delete(ctx, nil)
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			return cl.Blob(blobName).Delete(ctx, DeleteOptions{})
		}},

	{"sessionjudge.go:collect, handoff.go:watchNotes (delete)", created,
		func(ctx context.Context, cc *container.Client, etag azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			_, err := cc.NewBlobClient(blobName).Delete(ctx, &blob.DeleteOptions{
				AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}},
			})
			return err
		},
		func(ctx context.Context, cl *Client, etag azcore.ETag) error {
			return cl.Blob(blobName).Delete(ctx, DeleteOptions{IfMatch: etag})
		}},

	{"prefer.go:withdraw", leased,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			id := leaseOn(cc, blobName, idA).LeaseID()
			_, err := cc.NewBlobClient(blobName).Delete(ctx, &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: id}}})
			return err
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			return cl.Blob(blobName).Delete(ctx, DeleteOptions{LeaseID: idA})
		}},

	{"session.go:list (sessions)", listed,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			full, page := "p/sessions/", int32(1000)
			return drain(ctx, cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
				Prefix: &full, Include: container.ListBlobsInclude{Metadata: true}, MaxResults: &page}), rootRequest)
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			return drainList(ctx, cl, ListOptions{Prefix: "p/sessions/", Metadata: true, PageSize: 1000})
		}},

	{"session.go:list (shards)", listed,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			full, page := "p/shards/", int32(1000)
			return drain(ctx, cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
				Prefix: &full, Include: container.ListBlobsInclude{Metadata: true}, MaxResults: &page}), max(rootRequest, rootListPage))
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			return drainList(ctx, cl, ListOptions{Prefix: "p/shards/", Metadata: true, PageSize: 1000, Call: Call{Timeout: rootListPage}})
		}},

	{"handoff.go:watchNotes (list), prefer.go:watchCandidates (list)", listed,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			prefix := "p/sessions/"
			return drain(ctx, cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}}), rootRequest)
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			return drainList(ctx, cl, ListOptions{Prefix: "p/sessions/", Metadata: true})
		}},

	{"handoff.go:dropNotes (list, within endSession's call)", listed,
		func(ctx context.Context, cc *container.Client, _ azcore.ETag) error {
			ctx, cancel := callWithin(ctx, rootRequest)
			defer cancel()
			prefix := "p/sessions/"
			return drain(ctx, cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix}), 0)
		},
		func(ctx context.Context, cl *Client, _ azcore.ETag) error {
			ctx, cancel := context.WithTimeout(ctx, rootRequest)
			defer cancel()
			return drainList(ctx, cl, ListOptions{Prefix: "p/sessions/"})
		}},
}

// Each of the root's calls on the SDK has a call on this package that
// sends the same request: method, path, query, conditions, lease IDs,
// durations, metadata, content, and the same time left to answer.
func TestEachRootCallSiteSendsTheSameRequestThroughThePackage(t *testing.T) {
	t.Parallel()
	for _, s := range sites {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			run := func(act func(ctx context.Context, svc *memblob.Service, rec *wire, etag azcore.ETag) error) ([]string, error) {
				svc := memblob.New()
				setup, err := New(Config{ConnectionString: memblob.ConnectionString, Container: "leases",
					ClientOptions: &azblob.ClientOptions{ClientOptions: svc.ClientOptions()}})
				require.NoError(t, err)
				var etag azcore.ETag
				if s.name != "lease.go:createContainer" {
					require.NoError(t, setup.CreateContainer(t.Context(), Call{}))
				}
				if s.setup != nil {
					etag = s.setup(t, setup.Blob(blobName))
				}
				rec := &wire{next: svc}
				err = act(t.Context(), svc, rec, etag)
				return rec.lines, err
			}
			rootLines, rootErr := run(func(ctx context.Context, _ *memblob.Service, rec *wire, etag azcore.ETag) error {
				cc, err := container.NewClientFromConnectionString(memblob.ConnectionString, "leases",
					&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: rec}})
				require.NoError(t, err)
				return s.root(ctx, cc, etag)
			})
			storeLines, storeErr := run(func(ctx context.Context, _ *memblob.Service, rec *wire, etag azcore.ETag) error {
				cl, err := New(Config{ConnectionString: memblob.ConnectionString, Container: "leases",
					ClientOptions: &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: rec}}})
				require.NoError(t, err)
				return s.store(ctx, cl, etag)
			})
			require.NoError(t, rootErr)
			require.NoError(t, storeErr)
			require.NotEmpty(t, rootLines)
			assert.Equal(t, rootLines, storeLines)
		})
	}
}
