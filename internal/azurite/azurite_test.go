//go:build unix

// The tests signal processes by PID (syscall.Kill), which exists only on
// Unix; the suite is not run on Windows.

package azurite

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: the
// supervising goroutine of a Server that was not stopped, an exec output
// copier, or an HTTP connection that was not closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newClient returns an azblob client for conn on a transport of its own, so
// the test can close its pooled connections (and their goroutines) at the end
// instead of telling goleak to ignore them.
func newClient(t *testing.T, conn string) *azblob.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	client, err := azblob.NewClientFromConnectionString(conn, &azblob.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}},
	})
	noErr(t, err)
	return client
}

// start starts a Server and makes sure it is stopped at the end of the test.
func start(t *testing.T, ctx context.Context, opts Options) *Server {
	t.Helper()
	begin := time.Now()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Azurite did not start: %v", err)
	}
	t.Logf("Azurite pid %d answering at %s after %s", s.PID(), s.URL(), time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// portOf returns host:port of a blob endpoint URL.
func portOf(t *testing.T, blobURL string) string {
	t.Helper()
	u, err := url.Parse(blobURL)
	noErr(t, err)
	return u.Host
}

// requireClosed fails unless nothing accepts connections at addr within a few
// seconds (the kernel closes a dead process's sockets at once, but a zombie
// may take a moment to be collected when its parent died).
func requireClosed(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStartInMemoryAndStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := start(t, ctx, Options{})

	check(t, strings.HasPrefix(s.URL(), "http://127.0.0.1:"), "URL %s", s.URL())
	check(t, strings.HasSuffix(s.URL(), "/"+AccountName), "URL %s", s.URL())
	check(t, ConnectionStringFor(s.URL()) == s.ConnectionString(), "ConnectionString %s", s.ConnectionString())

	client := newClient(t, s.ConnectionString())
	_, err := client.CreateContainer(ctx, "created-in-memory", nil)
	noErr(t, err)

	// Goroutines that lock their thread and exit make the runtime destroy
	// that thread. Were Azurite forked from such a recycled thread, its
	// Pdeathsig would kill it now.
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() { runtime.LockOSThread() })
	}
	wg.Wait()
	_, err = client.CreateContainer(ctx, "after-thread-churn", nil)
	noErr(t, err, "Azurite died when unrelated OS threads exited")
	select {
	case <-s.Done():
		t.Fatal("Done closed while Azurite runs")
	default:
	}

	// The client still holds idle keep-alive connections: Azurite closes
	// those itself on SIGTERM, so Stop should not need SIGKILL.
	pid := s.PID()
	begin := time.Now()
	noErr(t, s.Stop())
	t.Logf("Stop took %s", time.Since(begin).Round(time.Millisecond))
	check(t, time.Since(begin) < stopTimeout, "Stop took %s: Azurite ignored SIGTERM", time.Since(begin))
	requireClosed(t, portOf(t, s.URL()))
	check(t, errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), "Azurite's process %d still exists after Stop", pid)
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	noErr(t, s.Stop(), "Stop is idempotent")
	check(t, pid == s.PID(), "PID after Stop: %d, want %d", s.PID(), pid)
}

// KeepAlive holds an idle connection open past Azurite's default 5 s: the
// flag azurite-blob declares for it is one it does not read.
func TestKeepAliveKeepsAnIdleConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := start(t, ctx, Options{KeepAlive: time.Minute})
	client := newClient(t, s.ConnectionString())
	reused := func() bool {
		var got bool
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { got = i.Reused }}
		_, err := client.ServiceClient().GetProperties(httptrace.WithClientTrace(ctx, trace), nil)
		noErr(t, err)
		return got
	}
	reused()
	time.Sleep(7 * time.Second)
	check(t, reused(), "a connection idle for 7 s was closed: Azurite's keep-alive is its default 5 s, not KeepAlive's minute")
}

func TestRestartKeepsDataWithLocation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log bytes.Buffer
	var logMu sync.Mutex
	s := start(t, ctx, Options{Location: t.TempDir(), Log: lockedWriter{&logMu, &log}})
	blobURL, firstPID := s.URL(), s.PID()

	client := newClient(t, s.ConnectionString())
	_, err := client.CreateContainer(ctx, "kept", nil)
	noErr(t, err)
	_, err = client.UploadBuffer(ctx, "kept", "blob", []byte("before restart"), nil)
	noErr(t, err)

	requireBlob := func() {
		t.Helper()
		resp, err := client.DownloadStream(ctx, "kept", "blob", nil)
		noErr(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		noErr(t, err)
		check(t, string(b) == "before restart", "blob content %q", b)
	}

	begin := time.Now()
	noErr(t, s.Restart(ctx))
	t.Logf("Restart took %s", time.Since(begin).Round(time.Millisecond))
	check(t, blobURL == s.URL(), "Restart moved from %s to %s", blobURL, s.URL())
	check(t, firstPID != s.PID(), "same PID %d after Restart", firstPID)
	requireBlob()

	// A crash: Stop reports it, Restart recovers from it.
	noErr(t, syscall.Kill(s.PID(), syscall.SIGKILL))
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after Azurite was killed")
	}
	err = s.Stop()
	check(t, err != nil && strings.Contains(err.Error(), "already exited"), "Stop after a crash: %v", err)
	noErr(t, s.Restart(ctx))
	requireBlob()

	noErr(t, s.Stop())
	requireClosed(t, portOf(t, blobURL))
	logMu.Lock()
	defer logMu.Unlock()
	check(t, strings.Contains(log.String(), "Azurite Blob service successfully closed"), "Options.Log got %q", log.String())
}

// lockedWriter lets the test read a buffer that Azurite's output copier
// writes to.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestStartOnBusyPortSaysSo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	noErr(t, err)
	defer l.Close()
	s, err := Start(ctx, Options{Port: l.Addr().(*net.TCPAddr).Port})
	if err == nil {
		_ = s.Stop()
		t.Fatal("Start succeeded on a port that is in use")
	}
	check(t, errors.Is(err, syscall.EADDRINUSE), "error is not EADDRINUSE: %v", err)
	t.Logf("error: %v", err)
}

func TestEndpointUsesEnvURL(t *testing.T) {
	t.Setenv(EnvURL, "http://127.0.0.1:10000/devstoreaccount1/")
	conn, stop, err := Endpoint(context.Background())
	noErr(t, err)
	want := "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + AccountKey +
		";BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
	check(t, conn == want, "connection string\n got %s\nwant %s", conn, want)
	noErr(t, stop())
	check(t, strings.HasPrefix(ConnectionStringFor("https://example.invalid/x"), "DefaultEndpointsProtocol=https;"), "https endpoint: %s", ConnectionStringFor("https://example.invalid/x"))
}

func TestEndpointStartsAzurite(t *testing.T) {
	t.Setenv(EnvURL, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, stop, err := Endpoint(ctx)
	if err != nil {
		t.Fatalf("Endpoint: %v", err)
	}
	client := newClient(t, conn)
	_, err = client.CreateContainer(ctx, "via-endpoint", nil)
	noErr(t, err)
	noErr(t, stop())
	u := conn[strings.Index(conn, "BlobEndpoint=")+len("BlobEndpoint="):]
	requireClosed(t, portOf(t, strings.TrimSuffix(u, ";")))
}

func TestInstallIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	paths := make([]string, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = Install(ctx) })
	}
	wg.Wait()
	for i := range paths {
		noErr(t, errs[i])
		check(t, paths[0] == paths[i], "Install returned %s and %s", paths[0], paths[i])
	}
	_, err := os.Stat(paths[0])
	noErr(t, err)
	check(t, strings.HasSuffix(paths[0], "main.js"), "script %s", paths[0])
}

func TestInstallWithoutNPMSaysSo(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir()) // not installed there
	t.Setenv("PATH", t.TempDir()) // no npm
	_, err := Install(context.Background())
	check(t, err != nil && strings.Contains(err.Error(), "npm is not in PATH"), "Install without npm: %v", err)
}
