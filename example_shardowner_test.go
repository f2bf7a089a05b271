package leaderelection_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/blobelect/leaderelection"
)

// Every instance runs the same program. Each tenant's job runs on exactly
// one instance at a time, and the tenants spread evenly over the instances:
// no instance runs more than one above another. SIGTERM or SIGINT hands
// this instance's tenants straight on to the others.
func ExampleShardOwner() {
	settings := leaderelection.BlobSettings{
		ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING"),
		Container:        "leases",
		Blob:             "tenant-jobs", // the prefix of the owner's blobs
	}
	tenants := []string{"tenant-1", "tenant-2", "tenant-3"}
	owner, err := leaderelection.NewShardOwner(settings, tenants, runTenant)
	if err != nil {
		log.Fatal(err) // names the invalid field or shard
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Run blocks until ctx is done (and returns ctx.Err()) or storage
	// refuses us for good. When tenants come and go: owner.SetShards(list).
	if err := owner.Run(ctx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// runTenant runs one tenant's job, on one instance at a time. ctx is
// cancelled when the tenant is handed to another instance, removed from the
// set, or this instance stops, or may lose it.
func runTenant(ctx context.Context, tenant string) error {
	term, _ := leaderelection.TermFromContext(ctx) // term.Number fences this tenant's writes
	log.Printf("running %s, term %d", tenant, term.Number)
	<-ctx.Done()
	return nil // must return promptly: within StopMargin of cancellation
}
