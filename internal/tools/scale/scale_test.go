package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	leaderelection "github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azuritetest"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

func TestRunTwentyMutexes(t *testing.T) {
	conn := azuritetest.ConnectionString(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 20
	// Longer than the default RenewInterval (5 s): the mutexes all take
	// their leases within a second or so, and send nothing until their
	// first renewal, so a 3 s steady period would count 0 requests.
	const steady = 6 * time.Second
	containerName := fmt.Sprintf("scale-test-%d", time.Now().UnixNano())
	res, err := Run(ctx, Config{
		ConnectionString: conn,
		Mutexes:          n,
		Steady:           steady,
		Container:        containerName,
		Progress:         t.Output(),
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("result:\n%s", res.Summary())

	if res.Mutexes != n {
		t.Errorf("Mutexes = %d, want %d", res.Mutexes, n)
	}
	if res.AllLeading <= 0 {
		t.Errorf("AllLeading = %v, want > 0: every mutex must have led", res.AllLeading)
	}
	if res.TermsLost != 0 {
		t.Errorf("TermsLost = %d (%v), want 0", res.TermsLost, res.LostReasons)
	}
	if res.GoroutinesPerMutex <= 0 || res.GoroutinesPerMutex >= 20 {
		t.Errorf("GoroutinesPerMutex = %.2f, want in (0, 20)", res.GoroutinesPerMutex)
	}
	if res.Requests <= 0 || res.RequestsPerMutexHour <= 0 {
		t.Errorf("Requests = %d, RequestsPerMutexHour = %.0f, want > 0", res.Requests, res.RequestsPerMutexHour)
	}
	if res.PeakRSSBytes <= 0 {
		t.Errorf("PeakRSSBytes = %d, want > 0", res.PeakRSSBytes)
	}
	if res.Steady < steady {
		t.Errorf("Steady = %v, want at least the configured %v", res.Steady, steady)
	}
	if res.CPUStartup <= 0 {
		t.Errorf("CPUStartup = %v, want > 0", res.CPUStartup)
	}
	if res.LostReasons == nil {
		t.Error("LostReasons is nil; want an empty map so the JSON reads {}")
	}

	// The JSON other programs read: Go field names, durations in ns.
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"Mutexes":20`, `"AllLeading":`, `"GoroutinesPerMutex":`, `"CPUStartup":`, `"CPUSteady":`,
		`"CPUSteadyPercent":`, `"PeakRSSBytes":`, `"Steady":`, `"TermsLost":0`, `"LostReasons":{}`, `"Requests":`, `"RequestsPerMutexHour":`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("JSON %s lacks %s", b, field)
		}
	}

	// Graceful shutdown released every lease.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	copts := &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}
	for i := range n {
		lm, err := leaderelection.NewBlobLeaseManager(leaderelection.BlobSettings{
			ConnectionString: conn, Container: containerName, Blob: fmt.Sprintf("mutex-%06d", i), ClientOptions: copts,
		}, leaderelection.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		info, err := lm.Inspect(ctx)
		if err != nil {
			t.Fatalf("inspecting blob %d: %v", i, err)
		}
		if !info.Exists || info.State != lease.StateTypeAvailable || info.Leader.Number < 1 {
			t.Errorf("blob %d after Run: exists %v, lease %s, term %d; want an available lease after at least one term",
				i, info.Exists, info.State, info.Leader.Number)
		}
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no connection string", Config{}, "ConnectionString is required"},
		{"negative mutexes", Config{ConnectionString: "UseDevelopmentStorage=true", Mutexes: -1}, "Mutexes must not be negative"},
		{"negative steady", Config{ConnectionString: "UseDevelopmentStorage=true", Steady: -time.Second}, "Steady must not be negative"},
		{"bad container", Config{ConnectionString: "UseDevelopmentStorage=true", Mutexes: 1, Container: "Bad_Name"}, "Container"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg := Config{ConnectionString: "x"}
	defaulted, err := cfg.defaults()
	if err != nil {
		t.Fatal(err)
	}
	if !defaulted || cfg.Mutexes != DefaultMutexes || cfg.Steady != DefaultSteady || !strings.HasPrefix(cfg.Container, "scale-") {
		t.Errorf("defaults: defaulted %v, %+v", defaulted, cfg)
	}
	if err := (leaderelection.BlobSettings{ConnectionString: "UseDevelopmentStorage=true", Container: cfg.Container, Blob: "b"}).Validate(); err != nil {
		t.Errorf("made-up container name %q is invalid: %v", cfg.Container, err)
	}
}
