package faults

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind: a held
// request, or a pooled connection that Close did not drop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server is an httptest server that answers every request with 201 and a
// lease ID, like a successful acquire, and counts the requests it got.
type server struct {
	*httptest.Server
	hits atomic.Int64
}

func newServer(t *testing.T, handler http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if handler != nil {
			handler(w, r)
			return
		}
		w.Header().Set("x-ms-lease-id", "00000000-0000-0000-0000-000000000001")
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(s.Close)
	return s
}

// newTransport returns a Transport that is closed at the end of the test,
// before the server (cleanups run last-in first-out).
func newTransport(t *testing.T) *Transport {
	t.Helper()
	ft := New()
	t.Cleanup(ft.Close)
	return ft
}

// recorder collects the exchanges that Observe reports.
type recorder struct {
	mu  sync.Mutex
	exs []Exchange
}

func (r *recorder) observe(ex Exchange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exs = append(r.exs, ex)
}

func (r *recorder) last(t *testing.T) Exchange {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.exs) == 0 {
		t.Fatal("no exchange observed")
	}
	return r.exs[len(r.exs)-1]
}

// leaseRequest builds a request the way the SDK does, with the lease header
// under a lower-case key.
func leaseRequest(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url+"/c/b?comp=lease", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header["x-ms-lease-action"] = []string{"acquire"}
	return req
}

// do sends a request through ft and returns the response status (0 on
// error), how long Do took and the error.
func do(t *testing.T, ft *Transport, req *http.Request) (int, time.Duration, error) {
	t.Helper()
	begin := time.Now()
	resp, err := ft.Do(req)
	took := time.Since(begin)
	if err != nil {
		return 0, took, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, took, nil
}

func TestPassThroughAndObserve(t *testing.T) {
	srv := newServer(t, nil)
	ft := newTransport(t)
	var rec recorder
	ft.Observe(rec.observe)

	before := time.Now()
	status, _, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL))
	if err != nil || status != http.StatusCreated {
		t.Fatalf("pass-through: status %d, err %v", status, err)
	}
	ex := rec.last(t)
	if ex.Method != http.MethodPut || ex.LeaseAction != "acquire" || ex.Status != http.StatusCreated || ex.Err != nil {
		t.Fatalf("exchange %+v", ex)
	}
	if !strings.HasSuffix(ex.URL, "/c/b?comp=lease") {
		t.Fatalf("exchange URL %q", ex.URL)
	}
	if ex.Sent.Before(before) || ex.Done.Before(ex.Sent) {
		t.Fatalf("times out of order: before %v, sent %v, done %v", before, ex.Sent, ex.Done)
	}
	if srv.hits.Load() != 1 {
		t.Fatalf("server got %d requests, want 1", srv.hits.Load())
	}

	ft.Observe(nil)
	if _, _, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL)); err != nil {
		t.Fatal(err)
	}
	if len(rec.exs) != 1 {
		t.Fatalf("observed %d exchanges after Observe(nil), want 1", len(rec.exs))
	}
}

func TestBlackholeAnswersOnlyWhenContextEnds(t *testing.T) {
	srv := newServer(t, nil)
	ft := newTransport(t)
	var rec recorder
	ft.Observe(rec.observe)
	ft.Blackhole()

	// A deadline: Do returns when it passes, not before, not much after.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, took, err := do(t, ft, leaseRequest(t, ctx, srv.URL))
	if !errors.Is(err, context.DeadlineExceeded) || took < 150*time.Millisecond || took > 2*time.Second {
		t.Fatalf("blackholed request: err %v after %s, want DeadlineExceeded after 150ms", err, took)
	}
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		t.Fatalf("error %T is not a *url.Error like net/http's", err)
	}
	if ex := rec.last(t); ex.Status != 0 || !errors.Is(ex.Err, context.DeadlineExceeded) || ex.LeaseAction != "acquire" {
		t.Fatalf("exchange %+v", ex)
	}

	// A cancellation, with no deadline: Do is still blocked long after.
	ctx2, cancel2 := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() {
		_, _, err := do(t, ft, leaseRequest(t, ctx2, srv.URL))
		result <- err
	}()
	select {
	case err := <-result:
		t.Fatalf("blackholed request returned before its context ended: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel2()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("blackholed request did not return after its context was cancelled")
	}
	if n := srv.hits.Load(); n != 0 {
		t.Fatalf("server got %d blackholed requests, want 0", n)
	}

	ft.Heal()
	if status, _, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL)); err != nil || status != http.StatusCreated {
		t.Fatalf("after Heal: status %d, err %v", status, err)
	}
}

func TestBlackholeWithholdsResponsesInFlight(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	ft := newTransport(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan error, 1)
	go func() {
		_, _, err := do(t, ft, leaseRequest(t, ctx, srv.URL))
		result <- err
	}()
	<-arrived
	ft.Blackhole()
	ft.Heal() // even a partition that is over by the time the answer comes
	close(release)
	select {
	case err := <-result:
		t.Fatalf("response of a request in flight during Blackhole was delivered (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("held request: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("held request did not return after its context was cancelled")
	}

	// Healed: the next request goes through (its handler is released).
	go func() { <-arrived }()
	if status, _, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL)); err != nil || status != http.StatusCreated {
		t.Fatalf("after Heal: status %d, err %v", status, err)
	}
}

func TestCloseReleasesHeldRequests(t *testing.T) {
	srv := newServer(t, nil)
	ft := New()
	ft.Blackhole()
	result := make(chan error, 1)
	go func() {
		_, _, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL))
		result <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ft.Close()
	select {
	case err := <-result:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("held request after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not release a held request")
	}
	ft.Heal()
	if _, _, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("request after Close: %v, want net.ErrClosed", err)
	}
	ft.Close() // idempotent
}

// newBlobClients returns azblob clients that talk to srv through ft, with
// azcore's retries off so that one call is one request.
func newBlobClients(t *testing.T, srv *server, ft *Transport) (*azblob.Client, *lease.BlobClient) {
	t.Helper()
	client, err := azblob.NewClientWithNoCredential(srv.URL+"/devstoreaccount1", &azblob.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: ft,
			Retry:     policy.RetryOptions{MaxRetries: -1},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	blob := client.ServiceClient().NewContainerClient("c").NewBlobClient("b")
	leaseID := "00000000-0000-0000-0000-000000000001"
	lc, err := lease.NewBlobClient(blob, &lease.BlobClientOptions{LeaseID: &leaseID})
	if err != nil {
		t.Fatal(err)
	}
	return client, lc
}

func TestFailGivesAzureErrorCodes(t *testing.T) {
	srv := newServer(t, nil)
	ft := newTransport(t)
	var rec recorder
	ft.Observe(rec.observe)
	client, lc := newBlobClients(t, srv, ft)
	ctx := context.Background()

	ft.Fail(http.StatusServiceUnavailable, "ServerBusy")
	_, err := client.CreateContainer(ctx, "c", nil)
	var rerr *azcore.ResponseError
	if !errors.As(err, &rerr) || rerr.ErrorCode != "ServerBusy" || rerr.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("CreateContainer: %v, want *azcore.ResponseError 503 ServerBusy", err)
	}
	if !bloberror.HasCode(err, bloberror.ServerBusy) {
		t.Fatalf("bloberror.HasCode(ServerBusy) is false for %v", err)
	}

	// HEAD: no body, the code comes from the header.
	_, err = client.ServiceClient().NewContainerClient("c").NewBlobClient("b").GetProperties(ctx, nil)
	if !bloberror.HasCode(err, bloberror.ServerBusy) {
		t.Fatalf("GetProperties: %v, want ServerBusy", err)
	}

	ft.Fail(http.StatusConflict, string(bloberror.LeaseAlreadyPresent))
	_, err = lc.AcquireLease(ctx, 15, nil)
	if !bloberror.HasCode(err, bloberror.LeaseAlreadyPresent) {
		t.Fatalf("AcquireLease: %v, want LeaseAlreadyPresent", err)
	}
	if ex := rec.last(t); ex.LeaseAction != "acquire" || ex.Status != http.StatusConflict || ex.Err != nil {
		t.Fatalf("exchange of an SDK acquire: %+v", ex)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Fatalf("server got %d requests in Fail mode, want 0", n)
	}

	ft.Heal()
	if _, err := lc.AcquireLease(ctx, 15, nil); err != nil {
		t.Fatalf("AcquireLease after Heal: %v", err)
	}
	if ex := rec.last(t); ex.LeaseAction != "acquire" || ex.Status != http.StatusCreated {
		t.Fatalf("exchange after Heal: %+v", ex)
	}
}

func TestDelay(t *testing.T) {
	srv := newServer(t, nil)
	ft := newTransport(t)
	var rec recorder
	ft.Observe(rec.observe)
	ft.Delay(200 * time.Millisecond)

	status, took, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL))
	if err != nil || status != http.StatusCreated || took < 200*time.Millisecond {
		t.Fatalf("delayed request: status %d, err %v after %s", status, err, took)
	}
	if ex := rec.last(t); ex.Done.Sub(ex.Sent) >= 200*time.Millisecond {
		t.Fatalf("Sent should be after the delay: sent %v, done %v", ex.Sent, ex.Done)
	}

	// The context ends during the delay: the request is not sent.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, took, err = do(t, ft, leaseRequest(t, ctx, srv.URL))
	if !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Fatalf("request whose context ends in the delay: %v after %s", err, took)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("server got %d requests, want 1", n)
	}

	ft.Heal()
	if _, took, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL)); err != nil || took >= 200*time.Millisecond {
		t.Fatalf("after Heal: err %v after %s", err, took)
	}
}

func TestResetConnections(t *testing.T) {
	srv := newServer(t, nil)
	ft := newTransport(t)
	client, _ := newBlobClients(t, srv, ft)
	ft.ResetConnections()

	_, took, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL))
	if !errors.Is(err, syscall.ECONNRESET) || took > time.Second {
		t.Fatalf("reset: %v after %s, want ECONNRESET at once", err, took)
	}
	var uerr *url.Error
	var operr *net.OpError
	if !errors.As(err, &uerr) || !errors.As(err, &operr) {
		t.Fatalf("reset error %#v should be a *url.Error wrapping a *net.OpError", err)
	}
	if !strings.Contains(err.Error(), "connection reset by peer") {
		t.Fatalf("reset error text: %v", err)
	}
	// Through the SDK the same error comes back.
	if _, err := client.CreateContainer(context.Background(), "c", nil); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("CreateContainer: %v, want ECONNRESET", err)
	}
	if n := srv.hits.Load(); n != 0 {
		t.Fatalf("server got %d requests, want 0", n)
	}

	ft.Heal()
	if status, _, err := do(t, ft, leaseRequest(t, context.Background(), srv.URL)); err != nil || status != http.StatusCreated {
		t.Fatalf("after Heal: status %d, err %v", status, err)
	}
}

// TestSwitchingWhileBusy runs requests while another goroutine keeps
// switching modes, for the race detector, and checks that every request
// ends by its deadline.
func TestSwitchingWhileBusy(t *testing.T) {
	srv := newServer(t, nil)
	ft := newTransport(t)
	var observed atomic.Int64
	ft.Observe(func(Exchange) { observed.Add(1) })

	stop := make(chan struct{})
	var switcher sync.WaitGroup
	switcher.Go(func() {
		modes := []func(){
			ft.Heal,
			ft.Blackhole,
			func() { ft.Fail(http.StatusInternalServerError, "InternalError") },
			func() { ft.Delay(5 * time.Millisecond) },
			ft.ResetConnections,
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
				modes[i%len(modes)]()
			}
		}
	})

	var clients sync.WaitGroup
	const workers, perWorker = 8, 25
	for range workers {
		clients.Go(func() {
			for range perWorker {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_, took, _ := do(t, ft, leaseRequest(t, ctx, srv.URL))
				cancel()
				if took > 2*time.Second {
					t.Errorf("request took %s despite a 50ms deadline", took)
				}
			}
		})
	}
	clients.Wait()
	close(stop)
	switcher.Wait()
	if n := observed.Load(); n != workers*perWorker {
		t.Fatalf("observed %d exchanges, want %d", n, workers*perWorker)
	}
}

func TestFailNextAndLoseNextAnswerTouchOneRequestOfOneAction(t *testing.T) {
	srv := newServer(t, nil)
	ft := newTransport(t)
	_, lc := newBlobClients(t, srv, ft)
	ctx := context.Background()

	ft.FailNext("acquire", http.StatusServiceUnavailable, "ServerBusy")
	// The test server answers 201 to everything, which a renewal does not
	// expect: what matters is that it reached the server.
	if _, err := lc.RenewLease(ctx, nil); bloberror.HasCode(err, bloberror.ServerBusy) || srv.hits.Load() != 1 {
		t.Fatalf("a renewal is not the armed action, yet: %v", err)
	}
	if _, err := lc.AcquireLease(ctx, 15, nil); !bloberror.HasCode(err, bloberror.ServerBusy) {
		t.Fatalf("first acquire: %v, want ServerBusy", err)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("server got %d requests, want 1 (the renewal): the failed acquire is not sent", n)
	}
	if _, err := lc.AcquireLease(ctx, 15, nil); err != nil {
		t.Fatalf("second acquire: %v", err)
	}

	ft.LoseNextAnswer("acquire")
	_, err := lc.AcquireLease(ctx, 15, nil)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("acquire with its answer lost: %v, want a connection reset", err)
	}
	if n := srv.hits.Load(); n != 3 {
		t.Fatalf("server got %d requests, want 3: the lost answer's request was sent", n)
	}
	if _, err := lc.AcquireLease(ctx, 15, nil); err != nil {
		t.Fatalf("the next acquire: %v", err)
	}
}
