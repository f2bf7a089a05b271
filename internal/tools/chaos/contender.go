package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/baseline"
	"github.com/blobelect/leaderelection/internal/tools/childproc"
	"github.com/blobelect/leaderelection/internal/tools/etcdpeer"
	"github.com/blobelect/leaderelection/internal/tools/reqcount"
	"go.uber.org/zap"
)

// envContender carries a contender's configuration (JSON) to a process the
// harness starts. A binary that hosts contenders calls MaybeContend first.
const envContender = "LEADERELECTION_CHAOS_CONTENDER"

// The algorithms a contender can run.
const (
	AlgoLibrary  = "library"  // this module's BlobDistributedMutex
	AlgoBaseline = "baseline" // the reference sample's algorithm (package baseline)
	AlgoEtcd     = "etcd"     // etcd's concurrency.Election against an etcd server (package etcdpeer)
)

// contenderConfig is what a contender process is told.
type contenderConfig struct {
	Name string
	Contender
	BlobURL string // the account's blob endpoint, through this lane's proxy (Azure algorithms)
	// BlobURLs are every account's, for a quorum mutex (BlobURL first);
	// empty for one account.
	BlobURLs  []string `json:",omitempty"`
	Endpoint  string   // the etcd server's address, through this lane's proxy (etcd)
	Container string
	Blob      string
	// CountEvery is how often to report the request count.
	CountEvery time.Duration
}

// MaybeContend turns this process into a contender, and exits, if the
// harness started it as one; otherwise it returns at once. Call it first in
// main or TestMain of any binary whose path is given as Config.Command.
func MaybeContend() { childproc.Maybe(envContender, "chaos contender", contend) }

func contend(cfg contenderConfig) error {
	rec := childproc.NewRecorder(func(r *Record) {
		if r.Mono == 0 {
			r.Mono = Mono()
		}
		r.Who = cfg.Name
	})
	ctx, stop := childproc.Context()
	defer stop()
	eff, err := cfg.Contender.timings()
	if err != nil {
		return err
	}

	// The request counts, by class, reported every CountEvery and at the end.
	var counts func() reqcount.Counts
	var perAccount func() []int64 // a quorum's, by account
	report := func() {
		c := counts()
		r := Record{Kind: KindRequests, Requests: c.Total(), Leases: c.Lease, Writes: c.Write, Reads: c.Read}
		if perAccount != nil {
			r.Accounts = perAccount()
		}
		rec.Write(r)
	}

	// lead is every algorithm's leader func: it records the term's start,
	// waits until told to stop, and records its end together with the
	// earliest moment the lease could expire as this process's requests
	// show it (couldExpire, read as the func returns: a renewal confirmed
	// later does not count, though it may extend the lease further).
	lead := func(ctx context.Context, n int64, couldExpire func() int64) {
		rec.Write(Record{Kind: KindStart, Term: n})
		<-ctx.Done()
		end := Mono()
		rec.Write(Record{Mono: end, Kind: KindEnd, Term: n, Expires: couldExpire(), Detail: fmt.Sprint(context.Cause(ctx))})
	}

	if cfg.Algo == AlgoEtcd {
		meter := &etcdpeer.Meter{}
		counts = meter.Counts
		defer childproc.Every(ctx, cfg.CountEvery, report)()
		defer report()
		var terms atomic.Int64
		return etcdpeer.Contend(ctx, etcdpeer.Config{
			Endpoint: cfg.Endpoint, Prefix: "/chaos/" + cfg.Blob + "/", Name: cfg.Name, TTL: eff.LeaseDuration, Meter: meter,
			Log: etcdLogger(),
			Lead: func(ctx context.Context, rev int64, couldExpire func() time.Time) {
				terms.Store(rev)
				lead(ctx, rev, func() int64 { return monoOrZero(couldExpire()) })
				rec.Write(Record{Kind: KindStopped, Term: rev})
			},
		})
	}

	counter := &reqcount.Policy{}
	clock := &leaseClock{etag: eff.Kind == leaderelection.ETagLease, d: eff.LeaseDuration}
	couldExpire := clock.couldExpire
	counts = counter.Counts
	defer childproc.Every(ctx, cfg.CountEvery, report)()
	defer report()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	copts := azcore.ClientOptions{Transport: &http.Client{Transport: tr}, PerRetryPolicies: []policy.Policy{counter, clock}}

	var terms atomic.Int64
	task := func(ctx context.Context) error {
		n := terms.Add(1)
		if t, ok := leaderelection.TermFromContext(ctx); ok {
			n = t.Number
		}
		lead(ctx, n, couldExpire)
		return nil
	}

	conn := azurite.ConnectionStringFor(cfg.BlobURL)
	switch cfg.Algo {
	case AlgoBaseline:
		// The sample's client: the SDK's default retry policy.
		cc, err := container.NewClientFromConnectionString(conn, cfg.Container, &container.ClientOptions{ClientOptions: copts})
		if err != nil {
			return err
		}
		m := &baseline.Mutex{Container: cc, Blob: cc.NewBlockBlobClient(cfg.Blob), Task: task}
		m.OnTermEnd = func(expiry time.Time) {
			rec.Write(Record{Kind: KindStopped, Term: terms.Load(), Claimed: MonoOf(expiry)})
		}
		_ = m.RunTaskWhenMutexAcquired(ctx)
		return nil
	case AlgoLibrary, "":
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		s := cfg.Contender.settings()
		s.ConnectionString, s.Container, s.Blob = conn, cfg.Container, cfg.Blob
		s.ClientOptions = &azblob.ClientOptions{ClientOptions: copts}
		opts := []leaderelection.Option{leaderelection.WithIdentity(cfg.Name),
			leaderelection.WithLogger(logger.With("contender", cfg.Name)),
			leaderelection.WithEvents(func(e leaderelection.Event) {
				switch e.Kind {
				case leaderelection.StoppedLeading:
					rec.Write(Record{Kind: KindStopped, Term: e.Term.Number, Claimed: MonoOf(e.LeaseExpiry), Detail: string(e.Reason)})
				case leaderelection.NewLeaderObserved:
					rec.Write(Record{Kind: KindObserved, Term: e.Term.Number})
				}
			})}
		var m *leaderelection.BlobDistributedMutex
		if len(cfg.BlobURLs) > 1 {
			var q *quorumClock
			m, q, err = quorumContender(cfg, s, tr, counter, task, opts)
			if err != nil {
				return err
			}
			couldExpire, perAccount = q.couldExpire, q.requests
			defer childproc.Every(ctx, heldEvery, watchHeld(m, rec))()
		} else {
			m, err = leaderelection.NewBlobDistributedMutex(s, task, opts...)
		}
		if err != nil {
			return err
		}
		if err := m.RunTaskWhenMutexAcquired(ctx); ctx.Err() == nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("unknown algorithm %q", cfg.Algo)
}

// leaseClock is a pipeline policy that watches a contender's requests for
// those that extend its lease, and remembers the send time of the last one
// the server confirmed: the checker's own account of when the lease could
// expire, independent of what the library under test believes. A native
// lease is extended by an acquire or a renew (the server starts its clock
// when it processes one, after we sent it); an ETag lease only by a
// metadata write under the lease ID (followers time the ETag that write
// makes from when they first see it, later still). The send time is read
// before the request goes out, so it is early: the moment it gives is a
// lower bound, and a stop margin measured from it is never flattering.
type leaseClock struct {
	etag bool
	d    time.Duration // the holder's lease duration
	last atomic.Int64  // CLOCK_MONOTONIC ns; 0 none yet
}

func (c *leaseClock) Do(req *policy.Request) (*http.Response, error) {
	raw := req.Raw()
	var extends bool
	if c.etag {
		extends = raw.Method == http.MethodPut && raw.URL.Query().Get("comp") == "metadata" && header(raw.Header, "x-ms-lease-id") != ""
	} else {
		action := header(raw.Header, "x-ms-lease-action")
		extends = raw.URL.Query().Get("comp") == "lease" && (action == "acquire" || action == "renew")
	}
	sent := Mono()
	resp, err := req.Next()
	if extends && err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		for {
			old := c.last.Load()
			if sent <= old || c.last.CompareAndSwap(old, sent) {
				break
			}
		}
	}
	return resp, err
}

// header reads a request header whether it was set in canonical form or,
// as the SDK's generated code sets the x-ms- ones, verbatim.
func header(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return h.Get(name)
}

// couldExpire is the send time of the last confirmed extension + the lease
// duration, in CLOCK_MONOTONIC ns; 0 if there was none.
func (c *leaseClock) couldExpire() int64 {
	if last := c.last.Load(); last != 0 {
		return last + int64(c.d)
	}
	return 0
}

func monoOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return MonoOf(t)
}

// etcdLogger logs the etcd client's warnings to standard error (the lane's
// log file); standard output carries the records.
func etcdLogger() *zap.Logger {
	c := zap.NewProductionConfig()
	c.Level = zap.NewAtomicLevelAt(zap.WarnLevel)
	c.OutputPaths, c.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	l, err := c.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l
}
