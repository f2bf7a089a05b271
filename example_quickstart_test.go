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

// Whichever instance holds the lease runs coordinate; the others wait to
// take over. SIGTERM or SIGINT cancels coordinate and releases the lease
// once it has returned, so another instance leads within a retry interval.
func Example() {
	settings := leaderelection.BlobSettings{
		ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING"),
		Container:        "leases",
		Blob:             "MyLeaderCoordinatorTask",
	}
	mutex, err := leaderelection.NewBlobDistributedMutex(settings, coordinate)
	if err != nil {
		log.Fatal(err) // e.g. "leaderelection: invalid BlobSettings.Container: may contain only lowercase letters, digits and hyphens, got "Leases""
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// RunTaskWhenMutexAcquired blocks until ctx is done (and returns
	// ctx.Err()) or storage refuses us for good (a wrong key, say).
	if err := mutex.RunTaskWhenMutexAcquired(ctx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// jobs is the coordinator's work: whatever feeds it (a queue, a schedule)
// keeps feeding it whoever leads.
var jobs = make(chan string)

// coordinate runs only while this instance holds the lease.
func coordinate(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil // must return promptly: within StopMargin of cancellation
		case job := <-jobs:
			handle(ctx, job)
		}
	}
}

// handle does one job, as leader: ctx is cancelled if leadership may end.
func handle(ctx context.Context, job string) {
	log.Printf("handling %s", job)
}
