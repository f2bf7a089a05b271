// Command coordinator is the shape of a production worker service that runs a
// singleton coordinator on whichever instance holds the lease. Run several
// copies against one blob: one coordinates, the others wait. It serves
// /healthz, for a liveness probe, and /metrics, the library's metrics through
// the OpenTelemetry Prometheus exporter. SIGTERM or SIGINT cancels the
// coordinator, releases the lease once it has returned, and exits, so another
// instance takes over within a retry interval instead of a lease duration.
//
// From the repository's root (a module of its own, so that the exporter stays
// out of the library's dependencies):
//
//	AZURE_STORAGE_CONNECTION_STRING=UseDevelopmentStorage=true go run ./examples/coordinator
//	go run ./examples/coordinator -account-url https://myaccount.blob.core.windows.net/   # managed identity
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// shutdownTimeout bounds the HTTP server's shutdown, which comes after the
// lease is released: it only waits for a probe or a scrape in flight.
const shutdownTimeout = 2 * time.Second

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, logger, os.Args[1:])
	stop()
	if err != nil {
		logger.Error("coordinator failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("coordinator", flag.ExitOnError)
	var s leaderelection.BlobSettings
	fs.StringVar(&s.ConnectionString, "connection-string", os.Getenv("AZURE_STORAGE_CONNECTION_STRING"),
		"storage connection string (env AZURE_STORAGE_CONNECTION_STRING)")
	fs.StringVar(&s.ServiceURL, "account-url", os.Getenv("AZURE_STORAGE_ACCOUNT_URL"),
		"blob service URL, authenticated with DefaultAzureCredential (env AZURE_STORAGE_ACCOUNT_URL)")
	fs.StringVar(&s.Container, "container", envOr("LEASE_CONTAINER", "leases"), "container of the lease blob (env LEASE_CONTAINER)")
	fs.StringVar(&s.Blob, "blob", envOr("LEASE_BLOB", "coordinator"), "lease blob (env LEASE_BLOB)")
	addr := fs.String("addr", envOr("HTTP_ADDR", ":8080"), "address to serve /healthz and /metrics on (env HTTP_ADDR)")
	idFile := fs.String("lease-id-file", os.Getenv("LEASE_ID_FILE"),
		"file on a local volume that outlives the process, to take the lease straight back after a restart (env LEASE_ID_FILE)")
	_ = fs.Parse(args) // ExitOnError: exits on a bad flag
	if s.ConnectionString != "" && s.ServiceURL != "" {
		s.ServiceURL = "" // an explicit connection string wins over the environment's URL
	}

	// The exporter registers with Prometheus's default registry, beside its
	// Go runtime and process collectors; promhttp.Handler serves them all.
	exporter, err := otelprom.New()
	if err != nil {
		return err
	}
	// The SDK's default histogram buckets suit milliseconds; the library
	// records seconds.
	seconds := sdkmetric.NewView(
		sdkmetric.Instrument{Name: "leaderelection.*", Kind: sdkmetric.InstrumentKindHistogram},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: prometheus.DefBuckets}})
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(seconds))
	opts := []leaderelection.Option{leaderelection.WithLogger(logger), leaderelection.WithMeterProvider(meters)}
	if *idFile != "" {
		opts = append(opts, leaderelection.WithLeaseIDFile(*idFile))
	}
	mutex, err := leaderelection.NewBlobDistributedMutex(s, coordinate(logger), opts...)
	if err != nil {
		return err
	}

	// Listen before contending, so that a taken port fails the start.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", mutex.HealthHandler())
	mux.Handle("GET /metrics", promhttp.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("serving /healthz and /metrics", "addr", ln.Addr().String())

	// The library says what it contends for, as whom, and who leads.
	// Returns once ctx is done and, if this instance led, the coordinator
	// has returned and the lease is released; or at once if storage refuses
	// us for good.
	err = mutex.RunTaskWhenMutexAcquired(ctx)
	if errors.Is(err, context.Canceled) {
		// Only that it shut down: a follower had no lease to release, and
		// for a leader the library has logged the end of its term, and
		// warned if the release failed or ran out of time.
		logger.Info("shut down")
		err = nil
	}

	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); serr != nil {
		err = errors.Join(err, serr)
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, meters.Shutdown(shutdownCtx))
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
				logger.Debug("coordinator tick", "n", n)
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
