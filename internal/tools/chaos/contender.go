package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/baseline"
	"github.com/blobelect/leaderelection/internal/tools/reqcount"
)

// envContender carries a contender's configuration (JSON) to a process the
// harness starts. A binary that hosts contenders calls MaybeContend first.
const envContender = "LEADERELECTION_CHAOS_CONTENDER"

// The algorithms a contender can run.
const (
	AlgoLibrary  = "library"  // this module's BlobDistributedMutex, default settings
	AlgoBaseline = "baseline" // the reference sample's algorithm (package baseline)
)

// contenderConfig is what a contender process is told.
type contenderConfig struct {
	Name      string
	Algo      string
	BlobURL   string // the account's blob endpoint, through this lane's proxy
	Container string
	Blob      string
	// CountEvery is how often to report the request count.
	CountEvery time.Duration
}

// MaybeContend turns this process into a contender, and exits, if the
// harness started it as one; otherwise it returns at once. Call it first in
// main or TestMain of any binary whose path is given as Config.Command.
func MaybeContend() {
	raw := os.Getenv(envContender)
	if raw == "" {
		return
	}
	var cfg contenderConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "chaos contender: bad configuration:", err)
		os.Exit(2)
	}
	if err := contend(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "chaos contender:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// recorder writes records to stdout, one JSON object a line.
type recorder struct {
	mu  sync.Mutex
	enc *json.Encoder
	who string
}

func (r *recorder) write(rec Record) {
	if rec.Mono == 0 {
		rec.Mono = Mono()
	}
	rec.Who = r.who
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(rec)
}

func contend(cfg contenderConfig) error {
	rec := &recorder{enc: json.NewEncoder(os.Stdout), who: cfg.Name}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The harness holds our standard input open: when it dies, we stop.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	counter := &reqcount.Policy{}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	copts := azcore.ClientOptions{Transport: &http.Client{Transport: tr}, PerRetryPolicies: []policy.Policy{counter}}

	var wg sync.WaitGroup
	defer wg.Wait()
	countCtx, stopCounting := context.WithCancel(ctx)
	defer stopCounting()
	if cfg.CountEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(cfg.CountEvery)
			defer t.Stop()
			for {
				select {
				case <-countCtx.Done():
					return
				case <-t.C:
					rec.write(Record{Kind: KindRequests, Requests: counter.Count()})
				}
			}
		}()
	}
	defer func() { rec.write(Record{Kind: KindRequests, Requests: counter.Count()}) }()

	var terms atomic.Int64
	task := func(ctx context.Context) error {
		n := terms.Add(1)
		if t, ok := leaderelection.TermFromContext(ctx); ok {
			n = t.Number
		}
		rec.write(Record{Kind: KindStart, Term: n})
		<-ctx.Done()
		rec.write(Record{Kind: KindEnd, Term: n, Detail: fmt.Sprint(context.Cause(ctx))})
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
			rec.write(Record{Kind: KindStopped, Term: terms.Load(), Expires: MonoOf(expiry)})
		}
		_ = m.RunTaskWhenMutexAcquired(ctx)
		return nil
	case AlgoLibrary, "":
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		s := leaderelection.BlobSettings{
			ConnectionString: conn,
			Container:        cfg.Container,
			Blob:             cfg.Blob,
			ClientOptions:    &azblob.ClientOptions{ClientOptions: copts},
		}
		m, err := leaderelection.NewBlobDistributedMutex(s, task,
			leaderelection.WithIdentity(cfg.Name),
			leaderelection.WithLogger(logger.With("contender", cfg.Name)),
			leaderelection.WithEvents(func(e leaderelection.Event) {
				if e.Kind == leaderelection.StoppedLeading {
					rec.write(Record{Kind: KindStopped, Term: e.Term.Number, Expires: MonoOf(e.LeaseExpiry), Detail: string(e.Reason)})
				}
			}))
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
