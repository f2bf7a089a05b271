package leaderelection

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/azuritetest"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

var nameCounter atomic.Int64

// testSettings returns settings for a fresh container and blob on the test
// Azurite: each test elects on a lease of its own, so tests run in parallel.
//
// In a bubble of inBubble, they are on the bubble's in-memory Blob service.
func testSettings(t testing.TB) BlobSettings {
	t.Helper()
	name := strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-"))
	s := BlobSettings{
		Container:     fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e9, nameCounter.Add(1)),
		Blob:          name,
		RetryInterval: 500 * time.Millisecond,
	}
	if svc := bubbleService(t); svc != nil {
		s.ConnectionString = memblob.ConnectionString
		s.ClientOptions = &azblob.ClientOptions{ClientOptions: svc.ClientOptions()}
	} else {
		s.ConnectionString = azuritetest.ConnectionString(t)
	}
	if onETagLease(t) {
		s.LeaseDuration, s.StopMargin = etagTestLease, etagTestMargin
	}
	return s
}

// withTransport points s at a transport of the test's own, closed when the
// test ends so that no pooled connection outlives it.
func withTransport(t testing.TB, s BlobSettings) (BlobSettings, *faults.Transport) {
	if svc := memoryOf(s); svc != nil {
		s, tr := instanceOn(s, svc)
		t.Cleanup(tr.Close)
		return s, tr
	}
	tr := faults.New()
	t.Cleanup(tr.Close)
	s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}}
	return s, tr
}

// term is one run of a leader func, as its contender saw it.
type term struct {
	who       string
	start     time.Time
	end       time.Time // zero while running
	cancelled time.Time // when the func saw ctx.Done, zero if it never did
	cause     error     // context.Cause at that moment
}

// termLog records every term of every contender in a test.
type termLog struct {
	mu    sync.Mutex
	terms []*term
	ch    chan *term // each term, when it starts
}

func newTermLog() *termLog { return &termLog{ch: make(chan *term, 1000)} }

// leaderFunc wraps body so that its runs are recorded under who.
func (l *termLog) leaderFunc(who string, body func(ctx context.Context) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		tm := &term{who: who, start: time.Now()}
		l.mu.Lock()
		l.terms = append(l.terms, tm)
		l.mu.Unlock()
		// A goroutine, not context.AfterFunc: a func that returns as soon
		// as ctx is done can call AfterFunc's stop before the cancellation
		// has reached it, and the cancellation would go unrecorded. Started
		// before the term is announced, so that a test told of the term
		// finds it among the goroutines that run (a leak check).
		returned := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			select {
			case <-ctx.Done():
			case <-returned:
				if ctx.Err() == nil {
					return
				}
			}
			l.mu.Lock()
			tm.cancelled, tm.cause = time.Now(), context.Cause(ctx)
			l.mu.Unlock()
		}()
		l.ch <- tm
		defer func() {
			end := time.Now()
			close(returned)
			<-watched // so a term seen ended has its cancellation recorded
			l.mu.Lock()
			tm.end = end
			l.mu.Unlock()
		}()
		return body(ctx)
	}
}

// next waits for the next term to start.
func (l *termLog) next(t testing.TB, within time.Duration) *term {
	t.Helper()
	select {
	case tm := <-l.ch:
		return tm
	case <-time.After(within):
		t.Fatalf("no leader func started within %v", within)
		return nil
	}
}

// snapshot returns a copy of every term, sorted by start.
func (l *termLog) snapshot() []term {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]term, len(l.terms))
	for i, tm := range l.terms {
		out[i] = *tm
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// requireNoOverlap checks that no term started before the previous one ended.
func (l *termLog) requireNoOverlap(t testing.TB) {
	t.Helper()
	terms := l.snapshot()
	for i := 1; i < len(terms); i++ {
		prev, cur := terms[i-1], terms[i]
		require.Falsef(t, prev.end.IsZero(), "term %d (%s) still running when term %d (%s) started", i-1, prev.who, i, cur.who)
		require.Falsef(t, cur.start.Before(prev.end), "term %d (%s) started %v before term %d (%s) ended",
			i, cur.who, prev.end.Sub(cur.start), i-1, prev.who)
	}
}

// running returns the terms that have started and not ended.
func (l *termLog) running() []term {
	var out []term
	for _, tm := range l.snapshot() {
		if tm.end.IsZero() {
			out = append(out, tm)
		}
	}
	return out
}

// contender runs one mutex in the background until stopped.
type contender struct {
	name   string
	mutex  *BlobDistributedMutex
	cancel context.CancelFunc
	done   chan error
}

func startContender(t testing.TB, name string, s BlobSettings, fn func(ctx context.Context) error, opts ...Option) *contender {
	t.Helper()
	m, err := NewBlobDistributedMutex(s, fn, append([]Option{WithLogger(testLogger(t, name)), clockFor(s)}, opts...)...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	c := &contender{name: name, mutex: m, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- m.RunTaskWhenMutexAcquired(ctx) }()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop cancels the contender and waits for RunTaskWhenMutexAcquired to return.
func (c *contender) stop(t testing.TB) error {
	t.Helper()
	c.cancel()
	select {
	case err, ok := <-c.done:
		if ok {
			close(c.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Errorf("%s: RunTaskWhenMutexAcquired did not return within 30s of cancellation", c.name)
		return nil
	}
}

// untilCancelled is a leader func body that leads until told to stop.
func untilCancelled(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// testLogger sends a contender's logs to the test log.
func testLogger(t testing.TB, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("contender", name)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// syncBuffer is a log sink tests can read while contenders write to it.
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

// storedValue is the value of metadata key in md, a record as the
// in-memory service stores it (names in any case), as wire.Value reads
// one from an answer; "" if absent.
func storedValue(md map[string]string, key string) string {
	for k, v := range md {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}
