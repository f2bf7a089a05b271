// Package azuritetest shares one Azurite between the tests of a test binary:
// started lazily by the first test that needs it (unit tests run without
// it), stopped when the tests end, before goroutine leaks are looked for.
package azuritetest

import (
	"context"
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
	stop = func() error { return nil }
)

// Main runs the tests, stops Azurite, fails the run if any goroutine is left
// (every test must close its transports' connections), and exits. Call it
// from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping Azurite:", err)
	}
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
		var s func() error
		conn, s, err = azurite.Endpoint(ctx)
		if s != nil {
			stop = s
		}
	})
	if err != nil {
		t.Fatalf("integration test needs Azurite, which could not be started: %v "+
			"(needs Node.js and npm on PATH to install azurite@%s, or set %s to a running blob endpoint)",
			err, azurite.Version, azurite.EnvURL)
	}
	return conn
}
