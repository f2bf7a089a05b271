package faults

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/memblob"
)

// memClients returns a container client and a lease client for blob "b"
// of container "c" on svc, through ft, with the SDK's retries off; the
// container and the blob exist.
func memClients(t *testing.T, svc *memblob.Service, ft *Transport) (*container.Client, *lease.BlobClient) {
	t.Helper()
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: ft}}
	opts.Retry.MaxRetries = -1
	cc, err := container.NewClientFromConnectionString(memblob.ConnectionString, "ccc", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Create(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	bc := cc.NewBlockBlobClient("b")
	if _, err := bc.UploadBuffer(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	lc, err := lease.NewBlobClient(bc, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cc, lc
}

// memTransport is a Transport over a new in-memory service, closed when t
// ends, and memClients through it.
func memTransport(t *testing.T) (*Transport, *container.Client, *lease.BlobClient) {
	t.Helper()
	svc := memblob.New()
	ft := Over(svc)
	t.Cleanup(ft.Close)
	cc, lc := memClients(t, svc, ft)
	return ft, cc, lc
}

// A late request reaches the server after its caller gave up, and after a
// request the caller sent later: here an acquire, given up on after 1 s,
// takes the lease at 5 s, after a metadata write sent at 2 s.
func TestRatesLateAppliesARequestAfterItsCallerGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := memblob.New()
		ft := Over(svc)
		defer ft.Close()
		var rec recorder
		ft.Observe(rec.observe)
		cc, lc := memClients(t, svc, ft)
		start := time.Now()

		ft.SetRates(Rates{Late: 1, LateMin: 5 * time.Second, LateMax: 5 * time.Second}, rand.New(rand.NewPCG(1, 2)))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := lc.AcquireLease(ctx, 15, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("held acquire: %v after %v, want the caller's deadline at 1s", err, time.Since(start))
		}
		if ex := rec.last(t); ex.Fault != FaultLate {
			t.Fatalf("exchange's fault %q, want %q", ex.Fault, FaultLate)
		}
		if st, _ := svc.Blob("ccc", "b"); st.LeaseState != lease.StateTypeAvailable {
			t.Fatalf("lease %s before the late acquire arrived", st.LeaseState)
		}

		ft.SetRates(Rates{}, nil)
		time.Sleep(time.Second)
		if _, err := cc.NewBlobClient("b").SetMetadata(context.Background(), map[string]*string{"k": new("v")}, nil); err != nil {
			t.Fatalf("a write sent later, while the acquire is held: %v", err)
		}
		time.Sleep(3*time.Second + time.Millisecond)
		st, _ := svc.Blob("ccc", "b")
		if st.LeaseState != lease.StateTypeLeased || st.LeaseID != *lc.LeaseID() {
			t.Fatalf("after 5s the blob is %s under %q, want leased under the late acquire's %q", st.LeaseState, st.LeaseID, *lc.LeaseID())
		}
		if st.Metadata["k"] != "v" {
			t.Fatal("the later write was applied before the late acquire: its metadata is gone")
		}
	})
}

// A late request still on its way when the Transport is closed is
// dropped, and WaitLate returns.
func TestRatesLateRequestsAreDroppedOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := memblob.New()
		ft := Over(svc)
		_, lc := memClients(t, svc, ft)
		ft.SetRates(Rates{Late: 1, LateMin: time.Minute, LateMax: 2 * time.Minute}, rand.New(rand.NewPCG(1, 2)))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := lc.AcquireLease(ctx, 15, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("held acquire: %v", err)
		}
		ft.Close()
		ft.WaitLate()
		time.Sleep(3 * time.Minute)
		if st, _ := svc.Blob("ccc", "b"); st.LeaseState != lease.StateTypeAvailable {
			t.Fatalf("lease %s: a request dropped by Close reached the server", st.LeaseState)
		}
	})
}

// Lost answers are applied; failed requests are not sent; the rates draw
// each request on its own, in the shares asked, and the zero Rates ends
// them.
func TestRatesLoseAndFailAtTheirShares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var applied int
		svc := memblob.New(memblob.WithObserver(func(e memblob.Event) {
			if e.Op == memblob.OpSetMetadata {
				applied++
			}
		}))
		ft := Over(svc)
		defer ft.Close()
		faults := map[string]int{}
		ft.Observe(func(ex Exchange) { faults[ex.Fault]++ })
		cc, _ := memClients(t, svc, ft)
		bc := cc.NewBlobClient("b")
		ft.SetRates(Rates{Fail: 0.25, FailStatus: http.StatusServiceUnavailable, FailCode: "ServerBusy", Lose: 0.25}, rand.New(rand.NewPCG(3, 4)))
		const n = 2000
		var busy, reset, ok int
		for range n {
			_, err := bc.SetMetadata(context.Background(), map[string]*string{"k": new("v")}, nil)
			switch {
			case err == nil:
				ok++
			case bloberror.HasCode(err, bloberror.ServerBusy):
				busy++
			case errors.Is(err, syscall.ECONNRESET):
				reset++
			default:
				t.Fatalf("unexpected error: %v", err)
			}
		}
		for name, got := range map[string]int{"failed": busy, "lost": reset, "answered": ok} {
			want := n / 4
			if name == "answered" {
				want = n / 2
			}
			if got < want*8/10 || got > want*12/10 {
				t.Errorf("%s: %d of %d, want about %d", name, got, n, want)
			}
		}
		if faults[FaultFail] != busy || faults[FaultLose] != reset {
			t.Errorf("Exchange.Fault counted %v; want %d fail, %d lose", faults, busy, reset)
		}
		if applied != ok+reset {
			t.Errorf("server applied %d writes, want %d: the answered and the lost, not the failed", applied, ok+reset)
		}
		ft.SetRates(Rates{}, nil)
		for range 100 {
			if _, err := bc.SetMetadata(context.Background(), nil, nil); err != nil {
				t.Fatalf("after the rates end: %v", err)
			}
		}
	})
}

// A request drawn to be its process's last is applied, its answer never
// comes, and nothing sent after it reaches the server; reads and lease
// renewals are never drawn, and Dying may hold the death back.
func TestRatesDieAppliesTheLastRequestAndSilencesTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		writes := 0
		svc := memblob.New(memblob.WithObserver(func(e memblob.Event) {
			if e.Op == memblob.OpSetMetadata {
				writes++
			}
		}))
		ft := Over(svc)
		defer ft.Close()
		var rec recorder
		ft.Observe(rec.observe)
		cc, lc := memClients(t, svc, ft)
		bc := cc.NewBlobClient("b")
		if _, err := lc.AcquireLease(context.Background(), 15, nil); err != nil {
			t.Fatal(err)
		}
		under := &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: lc.LeaseID()}}}
		asked := 0
		held := true
		ft.SetRates(Rates{Die: 1, Dying: func(*http.Request) bool { asked++; return !held }}, rand.New(rand.NewPCG(5, 6)))
		for range 3 {
			if _, err := bc.GetProperties(context.Background(), nil); err != nil {
				t.Fatalf("a read: %v", err)
			}
			if _, err := lc.RenewLease(context.Background(), nil); err != nil {
				t.Fatalf("a renewal: %v", err)
			}
		}
		if asked != 0 {
			t.Fatalf("Dying asked %d times for reads and renewals", asked)
		}
		if _, err := bc.SetMetadata(context.Background(), map[string]*string{"k": new("1")}, under); err != nil || asked != 1 || writes != 1 {
			t.Fatalf("a write Dying held back: %v, asked %d, applied %d", err, asked, writes)
		}

		held = false
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := bc.SetMetadata(ctx, map[string]*string{"k": new("2")}, under)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || writes != 2 {
			t.Fatalf("the last write: %v, %d applied; want it applied and its answer withheld", err, writes)
		}
		if ex := rec.last(t); ex.Fault != FaultDie {
			t.Fatalf("exchange's fault %q, want %q", ex.Fault, FaultDie)
		}
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		_, err = lc.RenewLease(ctx, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a renewal after the death: %v, want it held", err)
		}
		if st, _ := svc.Blob("ccc", "b"); st.Metadata["k"] != "2" {
			t.Fatalf("stored %q, want the last write's", st.Metadata["k"])
		}
	})
}

// Rates.For narrows the rates to a kind of request (OpOf): here every
// listing fails with 503 ServerBusy while reads, lease actions and writes
// go through.
func TestRatesForNarrowsTheFaultsToAKindOfRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft, cc, lc := memTransport(t)
		ops := map[string]int{}
		ft.SetRates(Rates{For: func(req *http.Request) Rates {
			ops[OpOf(req)]++
			if OpOf(req) == OpList {
				return Rates{Fail: 1, FailStatus: http.StatusServiceUnavailable, FailCode: "ServerBusy"}
			}
			return Rates{}
		}}, rand.New(rand.NewPCG(1, 2)))
		for range 3 {
			_, err := cc.NewListBlobsFlatPager(nil).NextPage(context.Background())
			if !bloberror.HasCode(err, bloberror.ServerBusy) {
				t.Fatalf("a listing: %v, want ServerBusy", err)
			}
			if _, err := cc.NewBlobClient("b").GetProperties(context.Background(), nil); err != nil {
				t.Fatalf("a read: %v", err)
			}
			if _, err := lc.AcquireLease(context.Background(), 15, nil); err != nil {
				t.Fatalf("an acquire: %v", err)
			}
			if _, err := lc.ReleaseLease(context.Background(), nil); err != nil {
				t.Fatalf("a release: %v", err)
			}
			if _, err := cc.NewBlobClient("b").SetMetadata(context.Background(), map[string]*string{"k": new("v")}, nil); err != nil {
				t.Fatalf("a write: %v", err)
			}
		}
		if want := map[string]int{OpList: 3, OpRead: 3, OpLease: 6, OpWrite: 3}; !maps.Equal(ops, want) {
			t.Fatalf("requests by kind %v, want %v", ops, want)
		}
	})
}

// Without For, each request forwarded draws from the rng as it did before
// For came (one draw, even when only Die is set and the request is a
// read), so that a seed's faults land on the same requests.
func TestRatesWithoutForDrawAsBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft, cc, _ := memTransport(t)
		rng := rand.New(rand.NewPCG(1, 2))
		ft.SetRates(Rates{Die: 1e-9}, rng)
		for range 5 {
			if _, err := cc.NewBlobClient("b").GetProperties(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
		}
		ref := rand.New(rand.NewPCG(1, 2))
		for range 5 {
			ref.Float64()
		}
		if got, want := rng.Float64(), ref.Float64(); got != want {
			t.Fatalf("the rng after 5 reads: %v, want %v (one draw a read)", got, want)
		}
	})
}
