package shardchaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/childproc"
	"github.com/blobelect/leaderelection/internal/tools/reqcount"
)

// envInstance carries an instance's configuration (JSON) to a process the
// harness starts. A binary that hosts instances calls MaybeInstance first.
const envInstance = "LEADERELECTION_SHARDCHAOS_INSTANCE"

// The algorithms an instance can run.
const (
	AlgoOwner = "owner" // one leaderelection.ShardOwner for every shard
	AlgoMutex = "mutex" // one leaderelection.BlobDistributedMutex per shard: what the ShardOwner replaces
)

// instanceConfig is what an instance process is told.
type instanceConfig struct {
	Lane      string
	Algo      string
	BlobURL   string // the account's blob endpoint, through this lane's proxy
	Container string
	Prefix    string
	Shards    int      // the set is the first Shards shard names (ShardName) ...
	Names     []string // ... unless Names is set
	Timings   Timings
	// CountEvery is how often to report the request count.
	CountEvery time.Duration
	// LeaseIDFile, if set, is the owner's lease ID file: its session
	// outlives the process (see Config.Static).
	LeaseIDFile string
	// Brief is the chance that a shard's run returns by itself, 1 to 3 s
	// after it started (see Config.Brief).
	Brief float64
}

// control is a line the harness sends an instance (Harness.SetShards).
type control struct {
	Set []string `json:"set"` // call SetShards with it
}

// ShardName is the name of shard i of a run.
func ShardName(i int) string { return fmt.Sprintf("shard-%05d", i) }

// MaybeInstance turns this process into an instance, and exits, if the
// harness started it as one; otherwise it returns at once. Call it first in
// main or TestMain of any binary whose path is given as Config.Command.
func MaybeInstance() { childproc.Maybe(envInstance, "shardchaos instance", instance) }

func instance(cfg instanceConfig) error {
	rec := childproc.NewRecorder(func(r *Record) {
		if r.Mono == 0 {
			r.Mono = chaos.Mono()
		}
		r.Who = cfg.Lane
	})
	// The harness's lines queue until the owner exists; the reader blocks
	// while the queue is full.
	ctl := make(chan control, 16)
	ctx, stop := childproc.ContextWithInput(func(line string) {
		var c control
		if json.Unmarshal([]byte(line), &c) == nil {
			ctl <- c
		}
	})
	defer stop()

	counter := &reqcount.Policy{}
	copts := azcore.ClientOptions{PerRetryPolicies: []policy.Policy{counter}}
	if cfg.Algo == AlgoMutex {
		// A thousand mutexes share one client: keep their connections.
		// A ShardOwner builds its own transports (one for its session's
		// lease), as it does for a user who brings none.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		defer tr.CloseIdleConnections()
		copts.Transport = &http.Client{Transport: tr}
	}
	if os.Getenv("SHARDCHAOS_PROFILE") != "" {
		// Each second, what requests this instance sent and how long they
		// took, by operation: where a benchmark's time goes.
		prof := &reqcount.Profile{Slow: func(s string) { fmt.Fprintf(os.Stderr, "slow lane=%s %s\n", cfg.Lane, s) }}
		copts.PerRetryPolicies = append(copts.PerRetryPolicies, prof)
		defer childproc.Every(ctx, time.Second, func() {
			for op, s := range prof.Take() {
				fmt.Fprintf(os.Stderr, "profile t=%s lane=%s op=%q n=%d total=%s max=%s\n", time.Now().UTC().Format(time.RFC3339Nano), cfg.Lane, op, s.Count, s.Total, s.Max)
			}
		})()
	}

	if dir := os.Getenv("SHARDCHAOS_CPUPROFILE"); dir != "" {
		// Where this instance's CPU goes, over its life (a SIGKILLed one
		// writes nothing): go tool pprof DIR/LANE-PID.pprof.
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", cfg.Lane, os.Getpid())))
		if err == nil {
			if err = pprof.StartCPUProfile(f); err == nil {
				defer f.Close()
				defer pprof.StopCPUProfile()
			} else {
				f.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "shardchaos: no CPU profile: %v\n", err)
		}
	}

	report := func() { rec.Write(Record{Kind: chaos.KindRequests, Requests: counter.Count()}) }
	defer childproc.Every(ctx, cfg.CountEvery, report)()
	defer report()

	fn := func(ctx context.Context, shard string) error {
		var n int64
		if t, ok := leaderelection.TermFromContext(ctx); ok {
			n = t.Number
		}
		rec.Write(Record{Kind: chaos.KindStart, Shard: shard, Term: n})
		if rand.Float64() < cfg.Brief {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(1000+rand.IntN(2000)) * time.Millisecond):
			}
		} else {
			<-ctx.Done()
		}
		rec.Write(Record{Kind: chaos.KindEnd, Shard: shard, Term: n, Detail: fmt.Sprint(context.Cause(ctx))})
		return nil
	}
	events := leaderelection.WithEvents(func(e leaderelection.Event) {
		switch e.Kind {
		case leaderelection.StoppedLeading:
			rec.Write(Record{Kind: chaos.KindStopped, Shard: e.Shard, Term: e.Term.Number, Expires: chaos.MonoOf(e.LeaseExpiry), Detail: string(e.Reason)})
		case leaderelection.SessionStarted:
			rec.Write(Record{Kind: KindSession, Session: e.Session})
		case leaderelection.SessionEnded:
			rec.Write(Record{Kind: KindSessionEnd, Session: e.Session, Detail: string(e.Reason)})
		}
	})
	level := slog.LevelInfo
	if os.Getenv("SHARDCHAOS_DEBUG") != "" {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("lane", cfg.Lane)
	t := cfg.Timings
	s := leaderelection.BlobSettings{
		ConnectionString: azurite.ConnectionStringFor(cfg.BlobURL),
		Container:        cfg.Container,
		Blob:             cfg.Prefix,
		LeaseDuration:    t.LeaseDuration,
		RenewInterval:    t.RenewInterval,
		RetryInterval:    t.RetryInterval,
		StopMargin:       t.StopMargin,
		ClientOptions:    &azblob.ClientOptions{ClientOptions: copts},
	}
	names := cfg.Names
	if names == nil {
		names = make([]string, cfg.Shards)
		for i := range names {
			names[i] = ShardName(i)
		}
	}
	names = slices.Sorted(slices.Values(names))
	rec.Write(Record{Kind: KindSet, Set: names})
	switch cfg.Algo {
	case AlgoMutex:
		defer applySets(ctx, ctl, rec, logger, func([]string) error {
			return errors.New("the mutex-per-shard algorithm takes no new set")
		})()
		// Only leadership changes are logged: a thousand followers polling
		// would drown the log otherwise.
		quiet := leaderelection.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("lane", cfg.Lane))
		errs := make(chan error, len(names))
		var runs sync.WaitGroup
		for _, name := range names {
			ms := s
			ms.Blob = cfg.Prefix + "-" + name
			m, err := leaderelection.NewBlobDistributedMutex(ms, func(ctx context.Context) error { return fn(ctx, name) },
				leaderelection.WithIdentity(cfg.Lane), quiet, events)
			if err != nil {
				return err
			}
			runs.Add(1)
			go func() {
				defer runs.Done()
				if err := m.RunTaskWhenMutexAcquired(ctx); ctx.Err() == nil {
					errs <- err
				}
			}()
		}
		runs.Wait()
		close(errs)
		return <-errs
	default:
		opts := []leaderelection.Option{leaderelection.WithIdentity(cfg.Lane), leaderelection.WithLogger(logger), events}
		if cfg.LeaseIDFile != "" {
			opts = append(opts, leaderelection.WithLeaseIDFile(cfg.LeaseIDFile))
		}
		o, err := leaderelection.NewShardOwner(s, names, fn, opts...)
		if err != nil {
			return err
		}
		defer applySets(ctx, ctl, rec, logger, o.SetShards)()
		if err := o.Run(ctx); ctx.Err() == nil {
			return err
		}
		return nil
	}
}

// applySets calls set with each set the harness sends, in order, from a
// goroutine of its own, and records the instance's set after each (or why
// it was refused), until ctx is done or stop is called; stop waits for it.
func applySets(ctx context.Context, ctl <-chan control, rec *childproc.Recorder[Record], logger *slog.Logger, set func([]string) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case c := <-ctl:
				names := slices.Sorted(slices.Values(c.Set))
				if err := set(names); err != nil {
					rec.Write(Record{Kind: KindSet, Detail: err.Error()})
					continue
				}
				logger.Info("shardchaos: set of shards changed", "shards", len(names))
				rec.Write(Record{Kind: KindSet, Set: names})
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
