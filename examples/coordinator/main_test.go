package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azuritetest"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envService makes the test binary run the service itself, so that the test
// can send it a real SIGTERM.
const envService = "COORDINATOR_TEST_SERVICE"

func TestMain(m *testing.M) {
	if os.Getenv(envService) != "" {
		main()
		os.Exit(0)
	}
	azuritetest.Main(m)
}

// service is the coordinator running as a child process.
type service struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
	err    error // what Wait returned, once exited is closed
}

// startService runs the service against settings' container and blob, with
// extra flags; it is killed, if still running, when the test ends.
func startService(t *testing.T, settings leaderelection.BlobSettings, flags ...string) *service {
	t.Helper()
	svc := &service{logs: &syncBuffer{}, exited: make(chan struct{})}
	svc.cmd = exec.Command(os.Args[0], append([]string{"-addr", "127.0.0.1:0", "-container", settings.Container, "-blob", settings.Blob}, flags...)...)
	svc.cmd.Env = append(os.Environ(), envService+"=1",
		"AZURE_STORAGE_CONNECTION_STRING="+settings.ConnectionString, "AZURE_STORAGE_ACCOUNT_URL=")
	svc.cmd.Stderr = svc.logs
	require.NoError(t, svc.cmd.Start())
	go func() { svc.err = svc.cmd.Wait(); close(svc.exited) }()
	t.Cleanup(func() {
		_ = svc.cmd.Process.Kill() // if the test failed before the service ended
		<-svc.exited
		t.Logf("service log:\n%s", svc.logs)
	})
	return svc
}

// With -lease-id-file on a volume that outlives it, a coordinator killed and
// restarted in place (a container restarted in its pod) leads again at once,
// with the next term, rather than after its old lease runs out.
func TestRestartedWithTheLeaseIDFileItLeadsAgainAtOnce(t *testing.T) {
	settings := exampleSettings(t, "coordinator-restart")
	tr := faults.New()
	t.Cleanup(tr.Close)
	observer := settings
	observer.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}}
	manager, err := leaderelection.NewBlobLeaseManager(observer)
	require.NoError(t, err)
	leadsWithTerm := func(n int64) func() bool {
		return func() bool {
			info, err := manager.Inspect(context.Background())
			return err == nil && info.Held() && info.Leader.Number == n
		}
	}
	idFile := t.TempDir() + "/lease-id"

	first := startService(t, settings, "-lease-id-file", idFile)
	require.Eventually(t, leadsWithTerm(1), 30*time.Second, 20*time.Millisecond, "the first run never led")
	require.NoError(t, first.cmd.Process.Kill())
	<-first.exited

	restarted := time.Now()
	startService(t, settings, "-lease-id-file", idFile)
	// The lease stands for 15 s after the killed run's last renewal; without
	// the file the restarted run would wait that out.
	require.Eventually(t, leadsWithTerm(2), 10*time.Second, 10*time.Millisecond, "the restarted run did not take its lease back")
	took := time.Since(restarted)
	t.Logf("restarted run led %v after it was started (a process under -race)", took)
	assert.Less(t, took, 5*time.Second, "it waited for its old lease to run out")
}

// The service as Kubernetes runs it: /healthz answers 200 "ok", /metrics
// carries the library's metrics once it leads, and SIGTERM makes it release
// the lease and exit 0 within StopMargin + RequestTimeout (the end-of-term
// mark and the release share it) + shutdownTimeout, the termination grace
// period the README derives.
func TestServesHealthAndMetricsThenReleasesOnSIGTERM(t *testing.T) {
	settings := exampleSettings(t, "coordinator")
	svc := startService(t, settings)
	cmd, logs, exited := svc.cmd, svc.logs, svc.exited

	var addr string
	serving := regexp.MustCompile(`msg="serving /healthz and /metrics" addr=(\S+)`)
	require.Eventually(t, func() bool {
		m := serving.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 30*time.Second, 20*time.Millisecond, "the service never said where it serves")

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		res, err := client.Get("http://" + addr + path)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}

	// Healthy from the start, leader or not: a probe needs no initial delay.
	status, body := get("/healthz")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ok", strings.TrimSpace(body))

	// It leads at once: nobody else contends for this blob.
	isLeader := regexp.MustCompile(`(?m)^leaderelection_is_leader\{[^}]*leaderelection_blob="` + settings.Blob + `"[^}]*\} 1$`)
	require.Eventually(t, func() bool {
		_, body := get("/metrics")
		return isLeader.MatchString(body)
	}, 30*time.Second, 100*time.Millisecond, "/metrics never showed leaderelection_is_leader 1")
	status, body = get("/healthz")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ok", strings.TrimSpace(body))

	// The first renewal comes a RenewInterval (5 s) after the lease was taken.
	want := []string{"leaderelection_transitions_total{", "leaderelection_acquire_attempts_total{", "leaderelection_renew_duration_seconds_bucket{"}
	// In seconds, the renewal durations land in the low buckets, not all in
	// the SDK's default first bucket, [0, 5].
	renewed := regexp.MustCompile(`(?m)^leaderelection_renew_duration_seconds_bucket\{[^}]*le="1"\} [1-9][0-9]*$`)
	require.Eventually(t, func() bool {
		_, body = get("/metrics")
		for _, name := range want {
			if !strings.Contains(body, name) {
				return false
			}
		}
		return true
	}, 20*time.Second, 200*time.Millisecond, "/metrics lacks one of %q", want)
	assert.Regexp(t, renewed, body, "a renewal against a local Azurite takes under 1 s")
	assert.Contains(t, body, `leaderelection_acquire_attempts_total{leaderelection_blob="`+settings.Blob+`",leaderelection_container="examples",otel_scope_name="github.com/blobelect/leaderelection"`)

	trs := faults.New()
	t.Cleanup(trs.Close)
	settings.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: trs}}
	manager, err := leaderelection.NewBlobLeaseManager(settings)
	require.NoError(t, err)
	info, err := manager.Inspect(context.Background())
	require.NoError(t, err)
	require.True(t, info.Held(), "the service leads, so the lease is held")

	s := manager.Settings() // the defaults, as the service has them
	grace := s.StopMargin + s.RequestTimeout + shutdownTimeout
	sent := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
	case <-time.After(grace):
		t.Fatalf("still running %v after SIGTERM", grace)
	}
	// Under -race, the child's exit alone takes 1 s (GORACE atexit_sleep_ms).
	t.Logf("exited %v after SIGTERM (grace period needed: %v)", time.Since(sent).Round(time.Millisecond), grace)
	require.NoError(t, svc.err, "exit status")
	assert.Contains(t, logs.String(), `msg="leaderelection: stopped leading"`, "the library reports the end of its term")
	assert.Contains(t, logs.String(), `msg="shut down"`)
	info, err = manager.Inspect(context.Background())
	require.NoError(t, err)
	assert.False(t, info.Held(), "the lease is released, not left to expire: state %s", info.State)
}

// A follower that never led released nothing: on SIGTERM it says only that
// it shut down, and exits 0; the leader leads on.
func TestAFollowerShutsDownWithoutClaimingARelease(t *testing.T) {
	settings := exampleSettings(t, "coordinator-follower")
	leader := startService(t, settings)
	require.Eventually(t, func() bool { return strings.Contains(leader.logs.String(), `msg=coordinating`) },
		30*time.Second, 20*time.Millisecond, "the first service never led")
	follower := startService(t, settings)
	require.Eventually(t, func() bool {
		return strings.Contains(follower.logs.String(), `msg="leaderelection: following the leader"`)
	}, 30*time.Second, 20*time.Millisecond, "the second service never followed")

	require.NoError(t, follower.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-follower.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the follower still runs 10s after SIGTERM")
	}
	require.NoError(t, follower.err, "exit status")
	logs := follower.logs.String()
	assert.Contains(t, logs, `msg="shut down"`)
	assert.NotContains(t, logs, "released", "a follower holds no lease to release")
	assert.NotContains(t, logs, "coordinating", "it never led")
	assert.NotContains(t, leader.logs.String(), "coordinator stopping", "the leader leads on")
}

// syncBuffer is the service's stderr, read while the service writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// exampleSettings are the settings of a test's services: Azurite's, and a
// blob of the test's own, named after what.
func exampleSettings(t *testing.T, what string) leaderelection.BlobSettings {
	return leaderelection.BlobSettings{
		ConnectionString: azuritetest.ConnectionString(t),
		Container:        "examples",
		Blob:             fmt.Sprintf("%s-%d", what, time.Now().UnixNano()),
	}
}
