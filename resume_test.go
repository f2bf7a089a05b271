package leaderelection

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// offlineSettings are valid settings for tests that make no request.
func offlineSettings() BlobSettings {
	return BlobSettings{ConnectionString: "UseDevelopmentStorage=true", Container: "leases", Blob: "b"}
}

func newFileManager(t *testing.T, s BlobSettings, path string) *BlobLeaseManager {
	t.Helper()
	m, err := NewBlobLeaseManager(s, WithLeaseIDFile(path), WithLogger(testLogger(t, "manager")))
	require.NoError(t, err)
	return m
}

// proposedFor is the lease ID a manager of s proposes while it holds a
// lease ID file that holds raw (fileLeaseID: raw itself for an ETag lease,
// one derived from it for a native one).
func proposedFor(t testing.TB, s BlobSettings, raw string) string {
	t.Helper()
	m, err := NewBlobLeaseManager(s)
	require.NoError(t, err)
	return m.fileLeaseID(raw)
}

// readIDFile returns the lease ID file's content without its newline.
func readIDFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.TrimSuffix(string(b), "\n")
}

func TestLeaseIDFileIsCreatedWithAFreshIDBeforeUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease-id")
	m := newFileManager(t, offlineSettings(), path)
	unlock, err := m.LockLeaseIDFile()
	require.NoError(t, err)

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(b), "\n"), "one GUID and a newline")
	assert.Equal(t, m.LeaseID(), m.fileLeaseID(strings.TrimSuffix(string(b), "\n")), "the proposed ID is the file's before it is ever sent")
	_, err = uuid.Parse(m.LeaseID())
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the lease ID lets its holder release the lease")

	id := m.LeaseID()
	unlock()
	assert.NotEqual(t, id, m.LeaseID(), "unlocked, the manager stops proposing the file's ID")
	assert.Equal(t, id, m.fileLeaseID(readIDFile(t, path)))

	again := newFileManager(t, offlineSettings(), path)
	unlock, err = again.LockLeaseIDFile()
	require.NoError(t, err)
	defer unlock()
	assert.Equal(t, id, again.LeaseID(), "the next holder proposes the stored ID")
}

// The ID proposed from a lease ID file is derived from the file's and the
// duration the lease asks for, the same every time (a change would cost a
// wait at every upgrade, and two durations on one ID would let a late
// acquire set its duration on another's lease); never the file's own, which
// versions before the derivation proposed for every lease.
func TestTheIDProposedFromAFileIsDerivedFromTheDurationAsked(t *testing.T) {
	const file = "6f1c1b7e-2a55-4c7e-9b3a-0c1d2e3f4a5b"
	want := map[int32]string{15: "2b2199e4-2d9d-55a1-a263-fb84e0a58f89", 60: "e8308ee3-edb9-5534-bfdc-fc8a9208684d", -1: "4fd8287d-1f9c-5ede-aecf-9ae53a7ae3d1"}
	seen := map[string]bool{file: true}
	for secs, id := range want {
		got := fileLeaseID(file, secs)
		assert.Equal(t, id, got, "%d s", secs)
		assert.False(t, seen[got], "%d s: %s proposed for another duration, or the file's own", secs, got)
		seen[got] = true
	}
	for name, s := range map[string]BlobSettings{"native 15 s": offlineSettings(), "ETag 63 s": {ConnectionString: "UseDevelopmentStorage=true", Container: "leases", Blob: "b", LeaseDuration: 63 * time.Second}} {
		m, err := NewBlobLeaseManager(s)
		require.NoError(t, err)
		secs := int32(15)
		if m.Kind() == ETagLease {
			secs = -1
		}
		assert.Equal(t, want[secs], m.fileLeaseID(file), name)
	}
}

func TestEmptyLeaseIDFileGetsAFreshID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease-id")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	m := newFileManager(t, offlineSettings(), path)
	unlock, err := m.LockLeaseIDFile()
	require.NoError(t, err)
	defer unlock()
	_, err = uuid.Parse(m.LeaseID())
	require.NoError(t, err)
	assert.Equal(t, m.LeaseID(), m.fileLeaseID(readIDFile(t, path)))
}

func TestLeaseIDFileWithGarbageIsRefusedAndKept(t *testing.T) {
	for name, content := range map[string]string{
		"text":           "not-a-guid\n",
		"two IDs":        uuid.NewString() + "\n" + uuid.NewString() + "\n",
		"GUID in braces": "{" + uuid.NewString() + "}\n",
		"long":           strings.Repeat("x", 10_000),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lease-id")
			require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
			m := newFileManager(t, offlineSettings(), path)
			before := m.LeaseID()
			_, err := m.LockLeaseIDFile()
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), "WithLeaseIDFile")
			assert.Contains(t, err.Error(), "not a lease ID")
			assert.Less(t, len(err.Error()), 400, "the content is quoted, not dumped")
			assert.NotErrorIs(t, err, ErrLeaseIDFileLocked)
			b, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			assert.Equal(t, content, string(b), "the file is left as it was")
			assert.Equal(t, before, m.LeaseID(), "nothing from the file is proposed")

			// The lock was dropped with the refusal.
			require.NoError(t, os.WriteFile(path, nil, 0o600))
			unlock, err := m.LockLeaseIDFile()
			require.NoError(t, err)
			unlock()
		})
	}
}

func TestSecondHolderOfLeaseIDFileIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease-id")
	a := newFileManager(t, offlineSettings(), path)
	b := newFileManager(t, offlineSettings(), path)
	unlock, err := a.LockLeaseIDFile()
	require.NoError(t, err)
	id := a.LeaseID()

	_, err = b.LockLeaseIDFile()
	require.ErrorIs(t, err, ErrLeaseIDFileLocked)
	assert.Contains(t, err.Error(), path)
	assert.NotEqual(t, id, b.LeaseID(), "the refused manager never proposes the holder's ID")
	_, err = a.LockLeaseIDFile()
	require.ErrorIs(t, err, ErrLeaseIDFileLocked, "one manager cannot hold the file twice either")

	unlock()
	unlock() // idempotent
	unlock, err = b.LockLeaseIDFile()
	require.NoError(t, err)
	defer unlock()
	assert.Equal(t, id, b.LeaseID())
}

func TestLeaseIDFileOptionIsValidated(t *testing.T) {
	_, err := NewBlobLeaseManager(offlineSettings(), WithLeaseIDFile(""))
	require.ErrorContains(t, err, "WithLeaseIDFile: the path is empty")
	_, err = NewBlobDistributedMutex(offlineSettings(), untilCancelled, WithLeaseIDFile(""))
	require.ErrorContains(t, err, "WithLeaseIDFile: the path is empty")

	path := filepath.Join(t.TempDir(), "no-such-dir", "lease-id")
	m := newFileManager(t, offlineSettings(), path)
	_, err = m.LockLeaseIDFile()
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), path)

	plain, err := NewBlobLeaseManager(offlineSettings())
	require.NoError(t, err)
	unlock, err := plain.LockLeaseIDFile()
	require.NoError(t, err, "without the option there is nothing to lock")
	unlock()
}

// releaseSpy sees every request before the transport sends it.
type releaseSpy struct {
	next      policy.Transporter
	onRequest func(*http.Request)
}

// header reads a request header as the SDK sets it: lower-case, straight
// into the map, where http.Header.Get does not look.
func header(req *http.Request, key string) string {
	for k, v := range req.Header {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func (s releaseSpy) Do(req *http.Request) (*http.Response, error) {
	s.onRequest(req)
	return s.next.Do(req)
}

// A process that resumes from the file must never propose an ID whose
// release its dead predecessor sent: that release could reach the server
// late and end the resumed lease. So every term runs with the file's ID, and
// every release is sent only once the file holds another.
func TestLeaseIDFileNeverHoldsAnIDWhoseReleaseWasSent(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, tr := withTransport(t, testSettings(t))
		path := filepath.Join(t.TempDir(), "lease-id")
		var (
			mu       sync.Mutex
			releases []string // "released-ID file-content" at send time
		)
		s.ClientOptions.Transport = releaseSpy{next: tr, onRequest: func(req *http.Request) {
			if header(req, "x-ms-lease-action") != "release" {
				return
			}
			b, err := os.ReadFile(path)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				releases = append(releases, "read error: "+err.Error())
				return
			}
			releases = append(releases, header(req, "x-ms-lease-id")+" "+strings.TrimSpace(string(b)))
		}}

		var (
			terms   []Term
			inFile  []string
			enough  = make(chan struct{})
			counted sync.Once
		)
		m, err := NewBlobDistributedMutex(s, func(ctx context.Context) error {
			term, _ := TermFromContext(ctx)
			terms = append(terms, term)
			b, err := os.ReadFile(path)
			inFile = append(inFile, strings.TrimSpace(string(b))+errString(err))
			if len(terms) == 3 {
				counted.Do(func() { close(enough) })
			}
			return nil // each term ends at once and releases the lease
		}, WithLeaseIDFile(path), WithLogger(testLogger(t, "a")))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.RunTaskWhenMutexAcquired(ctx) }()
		select {
		case <-enough:
		case <-time.After(30 * time.Second):
			t.Fatal("three terms did not run within 30s")
		}
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)

		ids := map[string]bool{}
		for i, term := range terms {
			assert.Equal(t, term.LeaseID, proposedFor(t, s, inFile[i]), "term %d runs with the file's ID", term.Number)
			ids[term.LeaseID] = true
		}
		assert.Len(t, ids, len(terms), "each term has a fresh ID: the last one's was released")
		mu.Lock()
		defer mu.Unlock()
		require.GreaterOrEqual(t, len(releases), len(terms), "every term's lease was released")
		for _, r := range releases {
			f := strings.Fields(r)
			require.Len(t, f, 2, r)
			assert.NotEqual(t, f[0], proposedFor(t, s, f[1]), "a release was sent while the file still held its ID")
		}
	})
}

// With the file held, the manager moves on to a fresh ID before a release,
// so one whose outcome is unknown needs no second change: the manager and
// the file agree on the new ID, and the old one is gone from both.
func TestReleaseWithUnknownOutcomeWithLeaseIDFile(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		s, tr := withTransport(t, testSettings(t))
		path := filepath.Join(t.TempDir(), "lease-id")
		m := newFileManager(t, s, path)
		unlock, err := m.LockLeaseIDFile()
		require.NoError(t, err)
		defer unlock()
		_, err = m.Acquire(ctx)
		require.NoError(t, err)
		old := m.LeaseID()

		tr.Blackhole()
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, m.Release(short), ErrTransient)
		tr.Heal()
		assert.NotEqual(t, old, m.LeaseID())
		assert.Equal(t, m.LeaseID(), m.fileLeaseID(readIDFile(t, path)), "the manager proposes the file's ID")
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}
