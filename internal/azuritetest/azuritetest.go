// Package azuritetest shares Azurite between the tests of a test binary:
// started lazily by the first test that needs it (unit tests run without
// it), stopped when the tests end, before goroutine leaks are looked for.
package azuritetest

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/azurite"
	"go.uber.org/goleak"
)

var (
	once sync.Once
	conn string
	err  error

	httpsOnce   sync.Once
	httpsServer *azurite.Server
	httpsPool   *x509.CertPool
	httpsErr    error

	stopMu sync.Mutex
	stops  []func() error
)

func atEnd(stop func() error) {
	stopMu.Lock()
	defer stopMu.Unlock()
	stops = append(stops, stop)
}

// Main runs the tests, stops Azurite, fails the run if any goroutine is left
// (every test must close its transports' connections), and exits. Call it
// from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	stopMu.Lock()
	for i := len(stops) - 1; i >= 0; i-- { // the last started first
		if err := stops[i](); err != nil {
			fmt.Fprintln(os.Stderr, "stopping Azurite:", err)
		}
	}
	stopMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ConnectionString returns the shared Azurite's connection string, or fails
// the test saying why Azurite could not be had.
func ConnectionString(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var stop func() error
		conn, stop, err = azurite.Endpoint(ctx)
		if stop != nil {
			atEnd(stop)
		}
	})
	if err != nil {
		t.Fatalf("integration test needs Azurite, which could not be started: %v "+
			"(needs Node.js and npm on PATH to install azurite@%s, or set %s to a running blob endpoint)",
			err, azurite.Version, azurite.EnvURL)
	}
	return conn
}

// HTTPS returns a second shared Azurite, in memory, that serves https with a
// self-signed certificate and accepts bearer tokens (azurite.Options.OAuth:
// see azurite.Token), and a pool that trusts its certificate. It is always
// started here, whatever azurite.EnvURL says, and fails the test saying why
// it could not be.
func HTTPS(t testing.TB) (*azurite.Server, *x509.CertPool) {
	t.Helper()
	httpsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "leaderelection-azurite-tls-")
		if err != nil {
			httpsErr = err
			return
		}
		atEnd(func() error { return os.RemoveAll(dir) })
		cert, key, pool, err := azurite.SelfSignedCert(dir)
		if err != nil {
			httpsErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s, err := azurite.Start(ctx, azurite.Options{TLSCert: cert, TLSKey: key, OAuth: true})
		if err != nil {
			httpsErr = err
			return
		}
		atEnd(s.Stop)
		httpsServer, httpsPool = s, pool
	})
	if httpsErr != nil {
		t.Fatalf("integration test needs an https Azurite, which could not be started: %v "+
			"(needs Node.js and npm on PATH to install azurite@%s)", httpsErr, azurite.Version)
	}
	return httpsServer, httpsPool
}
