// Command coordinator is the shape of a real worker service that runs a
// singleton coordinator on whichever instance holds the lease. Run several
// copies against one blob: one coordinates, the others wait. SIGTERM or
// SIGINT cancels the coordinator, releases the lease and exits, so another
// instance takes over within one retry interval instead of a lease duration.
//
//	AZURE_STORAGE_CONNECTION_STRING=UseDevelopmentStorage=true go run ./examples/coordinator
//	go run ./examples/coordinator -account-url https://myaccount.blob.core.windows.net/   # managed identity
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}

func run() error {
	var s leaderelection.BlobSettings
	flag.StringVar(&s.ConnectionString, "connection-string", os.Getenv("AZURE_STORAGE_CONNECTION_STRING"),
		"storage connection string (env AZURE_STORAGE_CONNECTION_STRING)")
	flag.StringVar(&s.ServiceURL, "account-url", os.Getenv("AZURE_STORAGE_ACCOUNT_URL"),
		"blob service URL, authenticated with DefaultAzureCredential (env AZURE_STORAGE_ACCOUNT_URL)")
	flag.StringVar(&s.Container, "container", envOr("LEASE_CONTAINER", "leases"), "container of the lease blob (env LEASE_CONTAINER)")
	flag.StringVar(&s.Blob, "blob", envOr("LEASE_BLOB", "coordinator"), "lease blob (env LEASE_BLOB)")
	flag.Parse()
	if s.ConnectionString != "" && s.ServiceURL != "" {
		s.ServiceURL = "" // an explicit connection string wins over the environment's URL
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	mutex, err := leaderelection.NewBlobDistributedMutex(s, coordinate(logger), leaderelection.WithLogger(logger))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger.Info("contending for the lease", "container", s.Container, "blob", s.Blob)
	err = mutex.RunTaskWhenMutexAcquired(ctx)
	if errors.Is(err, context.Canceled) {
		logger.Info("shut down; lease released")
		return nil
	}
	return err
}

// coordinate is the singleton work: it runs only while this instance leads,
// and returns as soon as its context is cancelled.
func coordinate(logger *slog.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		logger.Info("coordinating")
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				logger.Info("coordinator stopping", "cause", context.Cause(ctx))
				return nil
			case <-tick.C:
				logger.Info("coordinator tick", "n", n)
			}
		}
	}
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}
