package leaderelection_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection"
)

// A worker service wraps its coordinator in a mutex: whichever instance holds
// the lease runs it, and SIGTERM hands leadership over at once.
func ExampleNewBlobDistributedMutex() {
	settings := leaderelection.BlobSettings{
		ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING"),
		Container:        "leases",
		Blob:             "MyLeaderCoordinatorTask",
	}
	coordinate := func(ctx context.Context) error {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil // return promptly: another instance may lead soon
			case <-tick.C:
				// one unit of singleton work
			}
		}
	}
	mutex, err := leaderelection.NewBlobDistributedMutex(settings, coordinate)
	if err != nil {
		log.Fatal(err) // names the invalid field
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := mutex.RunTaskWhenMutexAcquired(ctx); !errors.Is(err, context.Canceled) {
		log.Fatal(err) // e.g. 403 AuthorizationFailure: fix the credentials
	}
}

// The leader's context says why it was cancelled.
func ExampleErrRenewDeadline() {
	leader := func(ctx context.Context) error {
		<-ctx.Done()
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, leaderelection.ErrRenewDeadline):
			log.Print("could not renew in time: stopping before the lease can expire")
		case errors.Is(cause, leaderelection.ErrLeaseLost):
			log.Print("the lease was taken or broken")
		default:
			log.Print("shutting down: ", cause)
		}
		return nil
	}
	_ = leader
}

// A func that winds down after its caller cancelled (draining work in hand,
// say) keeps the lease meanwhile, and stops acting when its lease context
// says the lease may pass to another instance.
func ExampleLeaseContext() {
	jobs := make(chan func(context.Context))
	coordinate := func(ctx context.Context) error {
		for ctx.Err() == nil { // lead until asked to stop
			select {
			case job := <-jobs:
				job(ctx)
			case <-ctx.Done():
			}
		}
		lease := leaderelection.LeaseContext(ctx) // ends only if the lease may pass on
		for {
			select {
			case job := <-jobs: // finish what was handed to us, as leader still
				job(lease)
			case <-lease.Done():
				return context.Cause(lease)
			case <-time.After(time.Second):
				return nil // drained
			}
		}
	}
	_ = coordinate
}

// A worker service with one singleton job per tenant runs them all through
// one ShardOwner: each tenant's job runs on exactly one instance, the jobs
// spread evenly over the instances, and the whole fleet costs one write
// and one list per instance per interval, however many tenants there are.
func ExampleNewShardOwner() {
	settings := leaderelection.BlobSettings{
		ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING"),
		Container:        "leases",
		Blob:             "tenant-jobs", // the prefix of the sessions' and shards' blobs
	}
	tenants := []string{"tenant-1", "tenant-2", "tenant-3"}
	runTenant := func(ctx context.Context, tenant string) error {
		term, _ := leaderelection.TermFromContext(ctx) // term.Number fences this tenant's writes
		log.Printf("running %s, term %d", tenant, term.Number)
		<-ctx.Done() // handed over, removed, shutting down, or the session's deadline
		return nil
	}
	owner, err := leaderelection.NewShardOwner(settings, tenants, runTenant)
	if err != nil {
		log.Fatal(err) // names the invalid field or shard
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// When tenants come and go: owner.SetShards(newList).
	if err := owner.Run(ctx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// A coordinator that survives the loss of a storage account, or of a
// region: it leads while it holds the lease on two of three accounts, each
// reached with the service's managed identity (DefaultAzureCredential when
// Credential is nil).
func ExampleNewQuorumMutex() {
	var accounts []leaderelection.BlobSettings
	for _, name := range []string{"leaseswesteurope", "leasesnortheurope", "leasesswedencentral"} {
		accounts = append(accounts, leaderelection.BlobSettings{
			ServiceURL: "https://" + name + ".blob.core.windows.net/",
			Container:  "leases",
			Blob:       "MyLeaderCoordinatorTask",
		})
	}
	coordinate := func(ctx context.Context) error {
		<-ctx.Done() // the coordinator's work, until leadership may end
		return nil
	}
	mutex, err := leaderelection.NewQuorumMutex(accounts, coordinate)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := mutex.RunTaskWhenMutexAcquired(ctx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
