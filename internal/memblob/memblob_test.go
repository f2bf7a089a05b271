package memblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/appendblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
)

// cname is the fixture's container.
const cname = "ctr"

// fixture is a Service with a container cname and clients on it, for the
// tests of what only the fake has (observer, admin methods, clock).
type fixture struct {
	svc *Service
	cc  *container.Client
	ctx context.Context
}

func newFixture(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	svc := New(opts...)
	co := svc.ClientOptions()
	co.Retry = policy.RetryOptions{MaxRetries: -1}
	cc, err := container.NewClientFromConnectionString(ConnectionString, cname, &container.ClientOptions{ClientOptions: co})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cc.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return &fixture{svc: svc, cc: cc, ctx: ctx}
}

func (f *fixture) put(t testing.TB, name string) azcore.ETag {
	t.Helper()
	resp, err := f.cc.NewBlockBlobClient(name).Upload(f.ctx, body("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return *resp.ETag
}

func (f *fixture) lease(t testing.TB, name, id string) *lease.BlobClient {
	t.Helper()
	lc, err := lease.NewBlobClient(f.cc.NewBlockBlobClient(name), &lease.BlobClientOptions{LeaseID: to.Ptr(id)})
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

// TestVirtualTimeExpiry is the point of the package: inside a synctest
// bubble a 15 s lease expires after 16 s of virtual time, in a few
// milliseconds of wall time.
func TestVirtualTimeExpiry(t *testing.T) {
	start := time.Now()
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.put(t, "b")
		if _, err := f.lease(t, "b", idA).AcquireLease(f.ctx, 15, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(16 * time.Second)
		p, err := f.cc.NewBlobClient("b").GetProperties(f.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := deref(p.LeaseState); got != expired {
			t.Errorf("after 16 s of virtual time: lease state %q, want expired", got)
		}
		if _, err := f.lease(t, "b", idB).AcquireLease(f.ctx, 15, nil); err != nil {
			t.Errorf("another could not acquire the expired lease: %v", err)
		}
	})
	wall := time.Since(start)
	t.Logf("16 s of virtual time took %v of wall time", wall)
	if wall > 2*time.Second {
		t.Errorf("16 s of virtual time took %v of wall time", wall)
	}
}

// manualClock is a clock a test moves by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestWithClock: the service keeps time on the clock it is given, for
// expiry, Last-Modified and Date alike.
func TestWithClock(t *testing.T) {
	clock := &manualClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	f := newFixture(t, WithClock(clock.Now))
	f.put(t, "b")
	resp, err := f.lease(t, "b", idA).AcquireLease(f.ctx, 15, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Date.Equal(clock.Now()) {
		t.Errorf("Date %v, want the clock's %v", resp.Date, clock.Now())
	}
	st, _ := f.svc.Blob(cname, "b")
	if want := clock.Now().Add(15 * time.Second); !st.LeaseExpiry.Equal(want) {
		t.Errorf("lease expiry %v, want %v", st.LeaseExpiry, want)
	}
	clock.advance(15*time.Second - time.Nanosecond)
	if st, _ := f.svc.Blob(cname, "b"); st.LeaseState != leased {
		t.Errorf("1 ns before expiry: %q, want leased", st.LeaseState)
	}
	clock.advance(time.Nanosecond)
	if st, _ := f.svc.Blob(cname, "b"); st.LeaseState != expired || st.LeaseID != idA {
		t.Errorf("at expiry: %q held by %q, want expired, still naming %s", st.LeaseState, st.LeaseID, idA)
	}
	md, err := f.cc.NewBlobClient("b").SetMetadata(f.ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !md.LastModified.Equal(clock.Now()) {
		t.Errorf("Last-Modified %v, want the clock's %v", md.LastModified, clock.Now())
	}
}

// TestContextDone: a request whose context is done gets the context's
// error, as from a real transport, and is not applied.
func TestContextDone(t *testing.T) {
	var events []Event
	f := newFixture(t, WithObserver(func(e Event) { events = append(events, e) }))
	etag := f.put(t, "b")
	n := len(events)
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	_, err := f.cc.NewBlobClient("b").SetMetadata(ctx, meta(map[string]string{"k": "v"}), nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithDeadline(f.ctx, time.Now().Add(-time.Second))
	defer cancel()
	_, err = f.lease(t, "b", idA).AcquireLease(ctx, 15, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past deadline: got %v, want context.DeadlineExceeded", err)
	}
	// The SDK looks at the context itself before it sends; the service
	// must too, for a context done between that and Do.
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, Endpoint+"/"+cname+"/b?comp=metadata", strings.NewReader(""))
	noErr(t, err, "request")
	req.Header["x-ms-meta-k"] = []string{"v"}
	resp, err := f.svc.Do(req)
	var ue *url.Error
	if resp != nil || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ue) {
		t.Errorf("Do with a done context: %v, %v; want a *url.Error of context.DeadlineExceeded, as http.Client returns", resp, err)
	}
	st, _ := f.svc.Blob(cname, "b")
	if st.ETag != etag || st.LeaseState != available || len(st.Metadata) != 0 {
		t.Errorf("a request with a done context was applied: %+v", st)
	}
	if len(events) != n {
		t.Errorf("the observer saw requests that never reached the service: %+v", events[n:])
	}
}

// TestObserver: every request applied or refused is reported, in order,
// with the lease and ETag it left.
func TestObserver(t *testing.T) {
	var events []Event
	clock := &manualClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newFixture(t, WithClock(clock.Now), WithObserver(func(e Event) { events = append(events, e) }))
	etag := f.put(t, "b")
	_, err := f.lease(t, "b", idA).AcquireLease(f.ctx, 15, nil)
	noErr(t, err, "acquire")
	_, err = f.lease(t, "b", idB).AcquireLease(f.ctx, 15, nil)
	wantErr(t, err, 409, "LeaseAlreadyPresent")
	clock.advance(5 * time.Second)
	_, err = f.lease(t, "b", idA).RenewLease(f.ctx, nil)
	noErr(t, err, "renew")
	_, err = f.lease(t, "b", idA).ChangeLease(f.ctx, idB, nil)
	noErr(t, err, "change")
	resp, err := f.cc.NewBlobClient("b").SetMetadata(f.ctx, nil, &blob.SetMetadataOptions{AccessConditions: withLease(idB)})
	noErr(t, err, "set metadata")
	_, err = f.lease(t, "b", idB).BreakLease(f.ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](10)})
	noErr(t, err, "break")
	_, err = f.cc.NewBlobClient("b").GetProperties(f.ctx, nil)
	noErr(t, err, "get properties")
	_, err = f.lease(t, "b", idB).ReleaseLease(f.ctx, nil)
	noErr(t, err, "release")
	_, err = f.cc.NewListBlobsFlatPager(nil).NextPage(f.ctx)
	noErr(t, err, "list")
	_, err = f.cc.NewBlobClient("b").Delete(f.ctx, nil)
	noErr(t, err, "delete")
	_, err = f.cc.Delete(f.ctx, nil)
	noErr(t, err, "delete container")

	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	t5 := t0.Add(5 * time.Second)
	newETag := *resp.ETag
	want := []Event{
		{Time: t0, Method: "PUT", Container: cname, Op: OpCreateContainer, Status: 201},
		{Time: t0, Method: "PUT", Container: cname, Blob: "b", Op: OpUpload, Status: 201, ETag: etag, LeaseState: available},
		{Time: t0, Method: "PUT", Container: cname, Blob: "b", Op: OpAcquire, ProposedLeaseID: idA, Status: 201,
			ETag: etag, LeaseState: leased, Lease: idA, LeaseExpiry: t0.Add(15 * time.Second)},
		{Time: t0, Method: "PUT", Container: cname, Blob: "b", Op: OpAcquire, ProposedLeaseID: idB, Status: 409,
			ErrorCode: "LeaseAlreadyPresent", ETag: etag, LeaseState: leased, Lease: idA, LeaseExpiry: t0.Add(15 * time.Second)},
		{Time: t5, Method: "PUT", Container: cname, Blob: "b", Op: OpRenew, LeaseID: idA, Status: 200,
			ETag: etag, LeaseState: leased, Lease: idA, LeaseExpiry: t5.Add(15 * time.Second)},
		{Time: t5, Method: "PUT", Container: cname, Blob: "b", Op: OpChange, LeaseID: idA, ProposedLeaseID: idB, Status: 200,
			ETag: etag, LeaseState: leased, Lease: idB, LeaseExpiry: t5.Add(15 * time.Second)},
		{Time: t5, Method: "PUT", Container: cname, Blob: "b", Op: OpSetMetadata, LeaseID: idB, Status: 200,
			ETag: newETag, LeaseState: leased, Lease: idB, LeaseExpiry: t5.Add(15 * time.Second)},
		{Time: t5, Method: "PUT", Container: cname, Blob: "b", Op: OpBreak, Status: 202,
			ETag: newETag, LeaseState: breaking, Lease: idB, LeaseExpiry: t5.Add(10 * time.Second)},
		{Time: t5, Method: "HEAD", Container: cname, Blob: "b", Op: OpGetProperties, Status: 200,
			ETag: newETag, LeaseState: breaking, Lease: idB, LeaseExpiry: t5.Add(10 * time.Second)},
		{Time: t5, Method: "PUT", Container: cname, Blob: "b", Op: OpRelease, LeaseID: idB, Status: 200,
			ETag: newETag, LeaseState: available},
		{Time: t5, Method: "GET", Container: cname, Op: OpList, Status: 200},
		{Time: t5, Method: "DELETE", Container: cname, Blob: "b", Op: OpDelete, Status: 202},
		{Time: t5, Method: "DELETE", Container: cname, Op: OpDeleteContainer, Status: 202},
	}
	// The container's ETag is not known to the test: take it as seen.
	if len(events) > 0 {
		want[0].ETag = events[0].ETag
		if events[0].ETag == "" {
			t.Error("create-container reported no ETag")
		}
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for i := range want {
		if !eventsEqual(events[i], want[i]) {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, events[i], want[i])
		}
		if events[i].OK() != (want[i].Status < 300) {
			t.Errorf("event %d: OK() = %t", i, events[i].OK())
		}
	}
}

// eventsEqual compares events but for their metadata (see
// TestObserverSeesTheMetadata).
func eventsEqual(a, b Event) bool {
	ta, tb := a.Time, b.Time
	ea, eb := a.LeaseExpiry, b.LeaseExpiry
	a.Time, b.Time, a.LeaseExpiry, b.LeaseExpiry = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	a.Metadata, b.Metadata = nil, nil
	return reflect.DeepEqual(a, b) && ta.Equal(tb) && ea.Equal(eb)
}

// TestAdmin: the admin methods read and change state without HTTP and
// without lease checks, and the observer sees the changes.
func TestAdmin(t *testing.T) {
	var events []Event
	f := newFixture(t, WithObserver(func(e Event) { events = append(events, e) }))
	etag := f.put(t, "b")
	_, err := f.lease(t, "b", idA).AcquireLease(f.ctx, -1, nil)
	noErr(t, err, "acquire")
	st, ok := f.svc.Blob(cname, "b")
	if !ok || st.ETag != etag || st.LeaseState != leased || st.LeaseStatus != locked ||
		st.LeaseDuration != infinite || st.LeaseID != idA || !st.LeaseExpiry.IsZero() || string(st.Content) != "x" {
		t.Errorf("Blob: %+v, %t", st, ok)
	}

	// A hand edit of a leased blob's metadata: no lease ID needed, a new
	// ETag, the lease untouched.
	n := len(events)
	newETag, err := f.svc.SetBlobMetadata(cname, "b", map[string]string{"term": "9"})
	noErr(t, err, "SetBlobMetadata")
	if newETag == etag {
		t.Error("SetBlobMetadata kept the ETag")
	}
	p, err := f.cc.NewBlobClient("b").GetProperties(f.ctx, nil)
	noErr(t, err, "get properties")
	if *p.ETag != newETag || deref(p.Metadata["Term"]) != "9" || deref(p.LeaseState) != leased {
		t.Errorf("after SetBlobMetadata: ETag %s, metadata %v, lease %s", *p.ETag, flat(p.Metadata), deref(p.LeaseState))
	}
	_, err = f.cc.NewBlobClient("b").SetMetadata(f.ctx, nil, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
		ModifiedAccessConditions: mac(etag, ""), LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(idA)}}})
	wantErr(t, err, 412, "ConditionNotMet")
	_, err = f.lease(t, "b", idA).RenewLease(f.ctx, nil)
	noErr(t, err, "renew after the hand edit")
	if len(events) < n+1 || !events[n].Admin || events[n].Op != OpSetMetadata || events[n].ETag != newETag ||
		events[n].Lease != idA || events[n].Method != "" || events[n].Status != 0 {
		t.Errorf("admin set-metadata event: %+v", events[n:])
	}

	// The returned state is a copy.
	st, _ = f.svc.Blob(cname, "b")
	st.Metadata["term"] = "changed"
	if st2, _ := f.svc.Blob(cname, "b"); st2.Metadata["term"] != "9" {
		t.Error("Blob's metadata map aliases the service's")
	}

	// Deleting a leased blob, and a container.
	noErr(t, f.svc.DeleteBlob(cname, "b"), "DeleteBlob")
	if _, ok := f.svc.Blob(cname, "b"); ok {
		t.Error("the blob is still there")
	}
	_, err = f.cc.NewBlobClient("b").GetProperties(f.ctx, nil)
	wantErr(t, err, 404, "BlobNotFound")
	f.put(t, "d")
	noErr(t, f.svc.DeleteContainer(cname), "DeleteContainer")
	last := events[len(events)-1]
	_, err = f.cc.NewBlobClient("d").GetProperties(f.ctx, nil)
	wantErr(t, err, 404, "ContainerNotFound")
	if !last.Admin || last.Op != OpDeleteContainer || last.Container != cname {
		t.Errorf("admin delete-container event: %+v", last)
	}

	// Missing targets.
	if _, ok := f.svc.Blob(cname, "d"); ok {
		t.Error("Blob found a blob of a deleted container")
	}
	if err := f.svc.DeleteContainer(cname); !errors.Is(err, ErrContainerNotFound) {
		t.Errorf("DeleteContainer of a missing container: %v", err)
	}
	if err := f.svc.DeleteBlob(cname, "d"); !errors.Is(err, ErrContainerNotFound) {
		t.Errorf("DeleteBlob in a missing container: %v", err)
	}
	_, err = f.cc.Create(f.ctx, nil)
	noErr(t, err, "create again")
	if err := f.svc.DeleteBlob(cname, "none"); !errors.Is(err, ErrBlobNotFound) {
		t.Errorf("DeleteBlob of a missing blob: %v", err)
	}
	if _, err := f.svc.SetBlobMetadata(cname, "none", nil); !errors.Is(err, ErrBlobNotFound) {
		t.Errorf("SetBlobMetadata of a missing blob: %v", err)
	}
	if _, err := f.svc.SetBlobMetadata("x", "none", nil); !errors.Is(err, ErrContainerNotFound) {
		t.Errorf("SetBlobMetadata in a missing container: %v", err)
	}
}

// TestResponseHeaders: every response carries Date (the service's clock),
// a fresh x-ms-request-id and x-ms-version; every error carries
// x-ms-error-code and, but for HEAD, an XML body with the same code.
func TestResponseHeaders(t *testing.T) {
	clock := &manualClock{now: time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)}
	svc := New(WithClock(clock.Now))
	seen := map[string]bool{}
	do := func(method, path string, header map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, Endpoint+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header[k] = []string{v} // non-canonical names, as the SDK sets them
		}
		resp, err := svc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("Date"); got != "Tue, 06 May 2031 07:08:09 GMT" {
			t.Errorf("%s %s: Date %q", method, path, got)
		}
		id := resp.Header.Get("X-Ms-Request-Id")
		if id == "" || seen[id] {
			t.Errorf("%s %s: request ID %q missing or repeated", method, path, id)
		}
		seen[id] = true
		if resp.Header.Get("X-Ms-Version") != APIVersion {
			t.Errorf("%s %s: x-ms-version %q", method, path, resp.Header.Get("X-Ms-Version"))
		}
		if resp.Request != req {
			t.Errorf("%s %s: the response does not point at its request", method, path)
		}
		return resp
	}
	checkError := func(resp *http.Response, status int, code string) {
		t.Helper()
		if resp.StatusCode != status || resp.Header.Get("X-Ms-Error-Code") != code {
			t.Errorf("%s %s: %d %s, want %d %s", resp.Request.Method, resp.Request.URL.Path,
				resp.StatusCode, resp.Header.Get("X-Ms-Error-Code"), status, code)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.Request.Method == http.MethodHead {
			if len(b) != 0 {
				t.Errorf("HEAD error with a body: %q", b)
			}
			return
		}
		if !strings.Contains(string(b), "<Code>"+code+"</Code>") || !strings.Contains(string(b), "<Message>") {
			t.Errorf("error body %q", b)
		}
	}
	checkError(do("HEAD", "/ctr/b", nil), 404, "ContainerNotFound")
	checkError(do("GET", "/ctr/b", nil), 404, "ContainerNotFound")
	if r := do("PUT", "/ctr?restype=container", nil); r.StatusCode != 201 {
		t.Fatalf("create: %d", r.StatusCode)
	}
	if r := do("PUT", "/ctr/b", map[string]string{"x-ms-blob-type": "BlockBlob", "x-ms-meta-k": "v"}); r.StatusCode != 201 {
		t.Fatalf("upload: %d", r.StatusCode)
	}
	checkError(do("PUT", "/ctr/b?comp=lease", map[string]string{"x-ms-lease-action": "acquire", "x-ms-lease-duration": "10"}),
		400, "InvalidHeaderValue")
	checkError(do("PUT", "/ctr/b?comp=lease", map[string]string{"x-ms-lease-action": "acquire"}), 400, "MissingRequiredHeader")
	checkError(do("PUT", "/ctr/b?comp=lease", map[string]string{"x-ms-lease-action": "renew"}), 400, "MissingRequiredHeader")
	checkError(do("PUT", "/ctr/b?comp=lease", map[string]string{"x-ms-lease-action": "acquire", "x-ms-lease-duration": "x"}),
		400, "InvalidHeaderValue")
	// An acquire with no proposed ID gets one made up, a GUID.
	r := do("PUT", "/ctr/b?comp=lease", map[string]string{"x-ms-lease-action": "acquire", "x-ms-lease-duration": "-1"})
	if id := r.Header.Get("X-Ms-Lease-Id"); r.StatusCode != 201 || len(id) != 36 {
		t.Errorf("acquire with no proposed ID: %d, lease ID %q", r.StatusCode, id)
	}
	checkError(do("HEAD", "/ctr/b", map[string]string{"x-ms-lease-id": idB}), 412, "LeaseIdMismatchWithBlobOperation")
	checkError(do("DELETE", "/ctr/b", nil), 412, "LeaseIdMissing")
	r = do("HEAD", "/ctr/b", nil)
	if r.StatusCode != 200 || r.Header.Get("X-Ms-Meta-K") != "v" || r.Header.Get("X-Ms-Lease-Duration") != "infinite" ||
		!strings.HasPrefix(r.Header.Get("Etag"), `"0x`) || r.Header.Get("Last-Modified") != "Tue, 06 May 2031 07:08:09 GMT" {
		t.Errorf("HEAD: %d %v", r.StatusCode, r.Header)
	}
	checkError(do("GET", "/", nil), 501, "NotImplemented")
}

// TestUnsupported: requests outside the fake's contract are refused loudly
// (501 NotImplemented), not answered as if they were something else.
func TestUnsupported(t *testing.T) {
	f := newFixture(t)
	f.put(t, "b")
	co := f.svc.ClientOptions()
	co.Retry = policy.RetryOptions{MaxRetries: -1}
	ab, err := appendblob.NewClientFromConnectionString(ConnectionString, cname, "ab", &appendblob.ClientOptions{ClientOptions: co})
	noErr(t, err, "append blob client")
	_, err = ab.Create(f.ctx, nil)
	wantErr(t, err, 501, "NotImplemented")
	_, err = f.cc.NewListBlobsHierarchyPager("/", nil).NextPage(f.ctx)
	wantErr(t, err, 501, "NotImplemented")
	_, err = f.cc.NewBlobClient("b").CreateSnapshot(f.ctx, nil)
	wantErr(t, err, 501, "NotImplemented")
	_, err = f.cc.NewBlobClient("b").DownloadStream(f.ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: 0, Count: 1}})
	wantErr(t, err, 501, "NotImplemented")
	_, err = f.cc.SetMetadata(f.ctx, nil)
	wantErr(t, err, 501, "NotImplemented")
	sc, err := service.NewClientFromConnectionString(ConnectionString, &service.ClientOptions{ClientOptions: co})
	noErr(t, err, "service client")
	_, err = sc.NewListContainersPager(nil).NextPage(f.ctx)
	wantErr(t, err, 501, "NotImplemented")
}

// TestConcurrentAcquire: many clients race for one lease; exactly one wins,
// and the service is safe for concurrent use (run with -race).
func TestConcurrentAcquire(t *testing.T) {
	var mu sync.Mutex
	winners := 0
	f := newFixture(t, WithObserver(func(e Event) {
		if e.Op == OpAcquire && e.OK() {
			winners++ // under the service's lock
		}
	}))
	f.put(t, "b")
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Go(func() {
			id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)
			_, errs[i] = f.lease(t, "b", id).AcquireLease(f.ctx, 15, nil)
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !bloberror.HasCode(err, bloberror.LeaseAlreadyPresent):
			t.Errorf("unexpected error: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if won != 1 || winners != 1 {
		t.Errorf("%d clients acquired the lease (observer: %d), want 1", won, winners)
	}
}

// TestDefaultPage: with no maxresults a page holds 5,000 blobs.
func TestDefaultPage(t *testing.T) {
	f := newFixture(t)
	for i := range MaxListResults + 1 {
		if err := f.svc.putForTest(cname, fmt.Sprintf("b%05d", i)); err != nil {
			t.Fatal(err)
		}
	}
	pager := f.cc.NewListBlobsFlatPager(nil)
	first, err := pager.NextPage(f.ctx)
	noErr(t, err, "page 1")
	if n := len(first.Segment.BlobItems); n != MaxListResults || deref(first.NextMarker) != "b04999" {
		t.Errorf("page 1: %d blobs, next marker %q", n, deref(first.NextMarker))
	}
	second, err := pager.NextPage(f.ctx)
	noErr(t, err, "page 2")
	if n := len(second.Segment.BlobItems); n != 1 || deref(second.NextMarker) != "" || pager.More() {
		t.Errorf("page 2: %d blobs, next marker %q", n, deref(second.NextMarker))
	}
}

// putForTest creates an empty blob without going through HTTP, to set up
// large containers quickly.
func (s *Service) putForTest(container, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.containers[container]
	if cs == nil {
		return ErrContainerNotFound
	}
	now := s.now()
	cs.addBlob(&blobState{name: name, etag: s.newETag(), created: now, lastModified: now,
		contentType: "application/octet-stream", lease: leaseInfo{state: stateAvailable},
		metadata: map[string]string{"term": "1", "holder": name}})
	return nil
}

// BenchmarkRenew is one lease renewal through the SDK.
func BenchmarkRenew(b *testing.B) {
	f := newFixture(b)
	f.put(b, "b")
	lc := f.lease(b, "b", idA)
	if _, err := lc.AcquireLease(f.ctx, 60, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lc.RenewLease(f.ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList1000 is one List Blobs page of 1,000 blobs with their
// metadata, parsed by the SDK.
func BenchmarkList1000(b *testing.B) {
	f := newFixture(b)
	for i := range 1000 {
		if err := f.svc.putForTest(cname, fmt.Sprintf("shard/%04d", i)); err != nil {
			b.Fatal(err)
		}
	}
	opts := &container.ListBlobsFlatOptions{Prefix: to.Ptr("shard/"), Include: container.ListBlobsInclude{Metadata: true}}
	b.ReportAllocs()
	for b.Loop() {
		p, err := f.cc.NewListBlobsFlatPager(opts).NextPage(f.ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Segment.BlobItems) != 1000 {
			b.Fatalf("%d blobs", len(p.Segment.BlobItems))
		}
	}
}

// TestObserverSeesTheMetadata: an event carries the blob's metadata after
// the request, and an event's map stays as it was when a later request
// replaces the metadata.
func TestObserverSeesTheMetadata(t *testing.T) {
	var events []Event
	f := newFixture(t, WithObserver(func(e Event) { events = append(events, e) }))
	f.put(t, "b")
	bc := f.cc.NewBlobClient("b")
	_, err := bc.SetMetadata(f.ctx, map[string]*string{"term": to.Ptr("1")}, nil)
	noErr(t, err, "set metadata")
	first := events[len(events)-1]
	_, err = bc.SetMetadata(f.ctx, map[string]*string{"term": to.Ptr("2")}, nil)
	noErr(t, err, "set metadata")
	second := events[len(events)-1]
	if first.Op != OpSetMetadata || first.Metadata["term"] != "1" {
		t.Errorf("first event: %s %v, want set-metadata with term 1", first.Op, first.Metadata)
	}
	if second.Metadata["term"] != "2" {
		t.Errorf("second event: %v, want term 2", second.Metadata)
	}
	_, err = f.cc.Delete(f.ctx, nil)
	noErr(t, err, "delete container")
	if e := events[len(events)-1]; e.Metadata != nil {
		t.Errorf("a container's event carries metadata: %v", e.Metadata)
	}
}
