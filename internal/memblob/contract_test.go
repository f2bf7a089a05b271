package memblob

import (
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

// The lease IDs the cases use. Azure wants GUIDs; Azurite and the fake
// take anything, but the cases stay valid on Azure.
const (
	idA = "aaaaaaaa-0000-4000-8000-000000000001"
	idB = "bbbbbbbb-0000-4000-8000-000000000002"
	idC = "cccccccc-0000-4000-8000-000000000003"
)

// Shorthands for the SDK's lease constants.
const (
	available = lease.StateTypeAvailable
	leased    = lease.StateTypeLeased
	expired   = lease.StateTypeExpired
	breaking  = lease.StateTypeBreaking
	broken    = lease.StateTypeBroken
	locked    = lease.StatusTypeLocked
	unlocked  = lease.StatusTypeUnlocked
	fixed     = lease.DurationTypeFixed
	infinite  = lease.DurationTypeInfinite
	noDur     = lease.DurationType("")
)

// ifMatch and ifNoneMatch are access conditions for blob writes.
func ifMatch(etag azcore.ETag) *blob.AccessConditions {
	return &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}
}

func ifNoneMatch(etag azcore.ETag) *blob.AccessConditions {
	return &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &etag}}
}

// withLease is the lease access condition of a write presenting id.
func withLease(id string) *blob.AccessConditions {
	return &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &id}}
}

// mac is a ModifiedAccessConditions of If-Match (and If-None-Match when
// none is non-empty).
func mac(match, none azcore.ETag) *blob.ModifiedAccessConditions {
	m := &blob.ModifiedAccessConditions{}
	if match != "" {
		m.IfMatch = &match
	}
	if none != "" {
		m.IfNoneMatch = &none
	}
	return m
}

// listAll lists the case's container with opts, page by page.
func listAll(t *testing.T, e *env, opts *container.ListBlobsFlatOptions) []container.ListBlobsFlatResponse {
	t.Helper()
	var pages []container.ListBlobsFlatResponse
	pager := e.cc.NewListBlobsFlatPager(opts)
	for pager.More() {
		p, err := pager.NextPage(e.ctx)
		noErr(t, err, "list")
		pages = append(pages, p)
	}
	return pages
}

// names are the blob names of a listing page.
func names(p container.ListBlobsFlatResponse) []string {
	var out []string
	for _, b := range p.Segment.BlobItems {
		out = append(out, deref(b.Name))
	}
	return out
}

func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func equalSlices(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}

func equalMaps(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

// contractCases are the behaviours the fake must share with Azurite: every
// fact of LEASE-FACTS.md that is about the service, and every behaviour the
// package promises.
var contractCases = []contractCase{
	// Containers.
	{name: "container-create-twice", run: func(t *testing.T, e *env) {
		cc := e.container(t, "-b")
		resp, err := cc.Create(e.ctx, nil)
		noErr(t, err, "create")
		equal(t, "create has an ETag", resp.ETag != nil && *resp.ETag != "", true)
		_, err = cc.Create(e.ctx, nil)
		wantErr(t, err, 409, "ContainerAlreadyExists")
		p, err := cc.GetProperties(e.ctx, nil)
		noErr(t, err, "get properties")
		equal(t, "properties' ETag", deref(p.ETag), deref(resp.ETag))
	}},
	{name: "container-missing", run: func(t *testing.T, e *env) {
		cc := e.container(t, "-none")
		_, err := cc.GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = cc.Delete(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = cc.NewListBlobsFlatPager(nil).NextPage(e.ctx)
		wantErr(t, err, 404, "ContainerNotFound")
	}},
	{name: "container-missing-blob-ops", run: func(t *testing.T, e *env) {
		bb := e.container(t, "-none").NewBlockBlobClient("b")
		_, err := bb.Upload(e.ctx, body("x"), nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = bb.GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = bb.DownloadStream(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = bb.SetMetadata(e.ctx, meta(map[string]string{"k": "v"}), nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = bb.Delete(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		lc, err := lease.NewBlobClient(bb, &lease.BlobClientOptions{LeaseID: to.Ptr(idA)})
		noErr(t, err, "lease client")
		_, err = lc.AcquireLease(e.ctx, 15, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = lc.RenewLease(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = lc.ReleaseLease(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = lc.BreakLease(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = lc.ChangeLease(e.ctx, idB, nil)
		wantErr(t, err, 404, "ContainerNotFound")
	}},
	{name: "container-delete-takes-leased-blobs", run: func(t *testing.T, e *env) {
		e.put(t, "free", nil)
		e.put(t, "held", map[string]string{"term": "1"})
		e.acquire(t, "held", idA, -1)
		e.put(t, "dir/fixed", nil)
		e.acquire(t, "dir/fixed", idB, 15)
		_, err := e.cc.Delete(e.ctx, nil)
		noErr(t, err, "delete container")
		_, err = e.cc.GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		_, err = e.blob("held").GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		// Azurite divergence: Azure refuses the name for about 30 s
		// (409 ContainerBeingDeleted); Azurite creates it at once.
		_, err = e.cc.Create(e.ctx, nil)
		noErr(t, err, "create again at once")
		_, err = e.blob("held").GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "BlobNotFound")
		pages := listAll(t, e, nil)
		equal(t, "blobs listed after re-creation", len(pages[0].Segment.BlobItems), 0)
		// The blob created again does not inherit the old lease.
		e.put(t, "held", nil)
		e.leaseState(t, "held", available, unlocked, noDur)
	}},
	{name: "container-name-invalid", run: func(t *testing.T, e *env) {
		for _, c := range []struct{ name, code string }{
			{"Upper", "InvalidResourceName"},
			{"a--b", "InvalidResourceName"},
			{"-ab", "InvalidResourceName"},
			{"ab", "OutOfRangeInput"},
			{strings.Repeat("a", 64), "OutOfRangeInput"},
		} {
			cc, err := container.NewClientFromConnectionString(e.conn, c.name, &container.ClientOptions{ClientOptions: e.opts})
			noErr(t, err, "client")
			_, err = cc.Create(e.ctx, nil)
			wantErr(t, err, 400, c.code)
		}
	}},

	// Blobs.
	{name: "upload-and-read", run: func(t *testing.T, e *env) {
		resp, err := e.blob("b").Upload(e.ctx, body("hello"), &blockblob.UploadOptions{
			Metadata: meta(map[string]string{"Term": "7", "owner": "x"})})
		noErr(t, err, "upload")
		etag := *resp.ETag
		equal(t, "ETag is quoted", strings.HasPrefix(string(etag), `"0x`), true)
		p := e.props(t, "b")
		equal(t, "ETag", *p.ETag, etag)
		equal(t, "Last-Modified", p.LastModified.Equal(*resp.LastModified), true)
		equal(t, "length", *p.ContentLength, int64(5))
		equal(t, "blob type", deref(p.BlobType), blob.BlobTypeBlockBlob)
		// Over HTTP Go canonicalises header names: "owner" reads back
		// as "Owner" from GetProperties (listings keep the case).
		equalMaps(t, "metadata", flat(p.Metadata), map[string]string{"Term": "7", "Owner": "x"})
		e.leaseState(t, "b", available, unlocked, noDur)
		d, err := e.blob("b").DownloadStream(e.ctx, nil)
		noErr(t, err, "download")
		got, err := io.ReadAll(d.Body)
		noErr(t, err, "read body")
		_ = d.Body.Close()
		equal(t, "content", string(got), "hello")
		equal(t, "download ETag", *d.ETag, etag)
		equalMaps(t, "download metadata", flat(d.Metadata), map[string]string{"Term": "7", "Owner": "x"})
		equal(t, "download lease state", deref(d.LeaseState), available)
	}},
	{name: "upload-overwrites", run: func(t *testing.T, e *env) {
		first := e.put(t, "b", map[string]string{"a": "1", "b": "2"})
		resp, err := e.blob("b").Upload(e.ctx, body("longer"), &blockblob.UploadOptions{
			Metadata: meta(map[string]string{"c": "3"})})
		noErr(t, err, "upload again")
		equal(t, "new ETag", *resp.ETag != first, true)
		p := e.props(t, "b")
		equalMaps(t, "metadata replaced", flat(p.Metadata), map[string]string{"C": "3"})
		equal(t, "length", *p.ContentLength, int64(6))
	}},
	{name: "set-metadata-replaces-all", run: func(t *testing.T, e *env) {
		first := e.put(t, "b", map[string]string{"a": "1", "b": "2"})
		resp, err := e.blob("b").SetMetadata(e.ctx, meta(map[string]string{"b": "3", "c": "4"}), nil)
		noErr(t, err, "set metadata")
		second := *resp.ETag
		equal(t, "new ETag", second != first, true)
		p := e.props(t, "b")
		equal(t, "ETag as answered", *p.ETag, second)
		equalMaps(t, "metadata", flat(p.Metadata), map[string]string{"B": "3", "C": "4"})
		resp, err = e.blob("b").SetMetadata(e.ctx, meta(map[string]string{"b": "3", "c": "4"}), nil)
		noErr(t, err, "set the same metadata")
		equal(t, "the same metadata written again is a new ETag", *resp.ETag != second, true)
		_, err = e.blob("b").SetMetadata(e.ctx, nil, nil)
		noErr(t, err, "clear metadata")
		equal(t, "no metadata left", len(e.props(t, "b").Metadata), 0)
	}},
	{name: "metadata-name-case", run: func(t *testing.T, e *env) {
		e.put(t, "b", map[string]string{"myKey": "v", "UPPER": "w"})
		equalMaps(t, "GetProperties (Go canonicalises)", flat(e.props(t, "b").Metadata),
			map[string]string{"Mykey": "v", "Upper": "w"})
		pages := listAll(t, e, &container.ListBlobsFlatOptions{Include: container.ListBlobsInclude{Metadata: true}})
		// The listing's XML keeps the case (the transcript shows it),
		// but the SDK lower-cases the names it parses from it.
		equalMaps(t, "listing (the SDK lower-cases)", flat(pages[0].Segment.BlobItems[0].Metadata),
			map[string]string{"mykey": "v", "upper": "w"})
	}},
	{name: "metadata-name-invalid", run: func(t *testing.T, e *env) {
		_, err := e.blob("b").Upload(e.ctx, body("x"), &blockblob.UploadOptions{Metadata: meta(map[string]string{"1st": "v"})})
		wantErr(t, err, 400, "InvalidMetadata")
		e.put(t, "b", nil)
		_, err = e.blob("b").SetMetadata(e.ctx, meta(map[string]string{"a-b": "v"}), nil)
		wantErr(t, err, 400, "InvalidMetadata")
		// Which check comes first: Set Blob Metadata reads the metadata
		// before it looks for the container, Put Blob after.
		other := e.container(t, "-none")
		_, err = other.NewBlobClient("b").SetMetadata(e.ctx, meta(map[string]string{"a-b": "v"}), nil)
		wantErr(t, err, 400, "InvalidMetadata")
		_, err = other.NewBlockBlobClient("b").Upload(e.ctx, body("x"), &blockblob.UploadOptions{Metadata: meta(map[string]string{"1st": "v"})})
		wantErr(t, err, 404, "ContainerNotFound")
	}},
	{name: "blob-missing", run: func(t *testing.T, e *env) {
		bb := e.blob("none")
		_, err := bb.GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "BlobNotFound")
		_, err = bb.DownloadStream(e.ctx, nil)
		wantErr(t, err, 404, "BlobNotFound")
		_, err = bb.SetMetadata(e.ctx, meta(map[string]string{"k": "v"}), nil)
		wantErr(t, err, 404, "BlobNotFound")
		_, err = bb.Delete(e.ctx, nil)
		wantErr(t, err, 404, "BlobNotFound")
		lc := e.lease(t, "none", idA)
		_, err = lc.AcquireLease(e.ctx, 15, nil)
		wantErr(t, err, 404, "BlobNotFound")
		_, err = lc.BreakLease(e.ctx, nil)
		wantErr(t, err, 404, "BlobNotFound")
		_, err = lc.RenewLease(e.ctx, nil)
		wantErr(t, err, 404, "BlobNotFound")
	}},
	{name: "delete-blob", run: func(t *testing.T, e *env) {
		first := e.put(t, "b", nil)
		_, err := e.blob("b").Delete(e.ctx, nil)
		noErr(t, err, "delete")
		_, err = e.blob("b").GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "BlobNotFound")
		again := e.put(t, "b", nil)
		equal(t, "a blob created again has a new ETag", again != first, true)
	}},
	{name: "blob-names", run: func(t *testing.T, e *env) {
		for _, n := range []string{"a/b/c d+e", "x\\y", "ünï-cødé", "q?r#s%t"} {
			e.put(t, n, nil)
		}
		// Backslashes become slashes, as on Azure.
		e.props(t, "x/y")
		pages := listAll(t, e, nil)
		equalSlices(t, "names", names(pages[0]), []string{"a/b/c d+e", "q?r#s%t", "x/y", "ünï-cødé"})
	}},
}
