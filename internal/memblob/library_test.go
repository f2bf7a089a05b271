package memblob_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	leaderelection "github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/memblob"
)

// TestLibraryLeaseManager runs the library's own lease manager, through
// the SDK, against the fake: what the package is for.
func TestLibraryLeaseManager(t *testing.T) {
	svc := memblob.New()
	settings := leaderelection.BlobSettings{
		ConnectionString: memblob.ConnectionString,
		Container:        "elect",
		Blob:             "leader",
		ClientOptions:    &azblob.ClientOptions{ClientOptions: svc.ClientOptions()},
	}
	quiet := leaderelection.WithLogger(slog.New(slog.DiscardHandler))
	a, err := leaderelection.NewBlobLeaseManager(settings, quiet)
	if err != nil {
		t.Fatal(err)
	}
	b, err := leaderelection.NewBlobLeaseManager(settings, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	grant, err := a.Acquire(ctx)
	if err != nil {
		t.Fatalf("a acquires: %v", err)
	}
	if grant.LeaseID != a.LeaseID() {
		t.Errorf("grant for %s, want %s", grant.LeaseID, a.LeaseID())
	}
	if _, err := b.Acquire(ctx); !errors.Is(err, leaderelection.ErrLeaseHeld) {
		t.Errorf("b acquires a held lease: %v, want ErrLeaseHeld", err)
	}
	if _, err := a.Renew(ctx); err != nil {
		t.Errorf("a renews: %v", err)
	}
	info, err := b.Inspect(ctx)
	if err != nil {
		t.Fatalf("b inspects: %v", err)
	}
	if !info.Exists || info.State != lease.StateTypeLeased {
		t.Errorf("b sees %+v", info)
	}
	st, ok := svc.Blob("elect", "leader")
	if !ok || st.LeaseID != a.LeaseID() {
		t.Errorf("the service holds the lease for %q, want a's %s", st.LeaseID, a.LeaseID())
	}
	if err := a.Release(ctx); err != nil {
		t.Errorf("a releases: %v", err)
	}
	if _, err := a.Renew(ctx); !errors.Is(err, leaderelection.ErrLeaseLost) {
		t.Errorf("a renews after releasing: %v, want ErrLeaseLost", err)
	}
	if _, err := b.Acquire(ctx); err != nil {
		t.Errorf("b acquires after the release: %v", err)
	}
}
