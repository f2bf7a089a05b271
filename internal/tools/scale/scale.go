// Package scale measures what many mutexes cost one process: each of
// Config.Mutexes mutexes contends alone on its own blob, so each leads, and
// Run reports how long it took until all of them led, the goroutines, CPU
// and memory they use, the requests they send while all lead, and whether any
// term ended in that steady period.
//
// Run measures CPU and peak RSS of the whole process with getrusage
// (RUSAGE_SELF), so run it in a process of its own (the command in
// cmd/scale does that) for the figures to be the mutexes'. An Azurite the
// process starts is a child process and is not counted.
package scale

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	leaderelection "github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/tools/reqcount"
)

// Defaults for Config's zero values.
const (
	DefaultMutexes = 1000
	DefaultSteady  = 5 * time.Minute
)

// progressEvery is how often a progress line is written.
const progressEvery = 10 * time.Second

// Config says what to measure.
type Config struct {
	// ConnectionString is the storage account: Azurite, or any account.
	ConnectionString string
	// Mutexes is how many mutexes run, each on its own blob in one
	// container. Default 1000.
	Mutexes int
	// Steady is how long to observe once every mutex leads. Default 5 min.
	Steady time.Duration
	// Container holds the blobs. Default a fresh unique name, which Run
	// deletes at the end; a named container is left in place.
	Container string
	// Progress, if not nil, gets a line about every 10 s while Run runs,
	// and the library's warnings (slog, Warn level and above).
	Progress io.Writer
}

// Result is what Run measured. Its JSON encoding (the Go field names,
// durations in nanoseconds) is read by other programs: keep it stable.
type Result struct {
	Mutexes int
	// AllLeading is from the first RunTaskWhenMutexAcquired call until
	// every mutex's leader func is running.
	AllLeading time.Duration
	// GoroutinesPerMutex is (runtime.NumGoroutine() when all lead - before
	// starting) / Mutexes. It counts the goroutine that calls
	// RunTaskWhenMutexAcquired, the library's own and the shared transport's
	// connection goroutines.
	GoroutinesPerMutex float64
	// CPUStartup is the user+sys CPU time of the process from building the
	// mutexes until all lead.
	CPUStartup time.Duration
	// CPUSteady is the user+sys CPU time of the process during the steady
	// period, and CPUSteadyPercent that as a percentage of one core.
	CPUSteady        time.Duration
	CPUSteadyPercent float64
	// PeakRSSBytes is the process's maximum resident set size, read at the
	// end (getrusage's ru_maxrss).
	PeakRSSBytes int64
	// Steady is how long the steady period actually lasted.
	Steady time.Duration
	// TermsLost counts terms that ended during the steady period (the
	// target is 0), and LostReasons them by the library's StopReason.
	TermsLost   int
	LostReasons map[string]int
	// Requests is the number of HTTP requests sent during the steady
	// period, counted as they are sent, and RequestsPerMutexHour that per
	// mutex, scaled to an hour.
	Requests             int64
	RequestsPerMutexHour float64
}

// Run starts cfg.Mutexes mutexes with the library's default timings, each
// on its own blob, all sharing one HTTP transport; waits until every one's
// leader func runs; observes them for cfg.Steady; then cancels them all and
// waits until every RunTaskWhenMutexAcquired has returned (their leases are
// released). No goroutine it starts outlives it.
//
// It returns an error if the mutexes do not all lead within
// 2 min + Mutexes×20 ms (saying how many did), if a mutex stops contending
// with an error, or if ctx ends first (with what was measured so far).
//
// CPU and RSS are the whole process's: run it in a process of its own.
func Run(ctx context.Context, cfg Config) (Result, error) {
	defaulted, err := cfg.defaults()
	if err != nil {
		return Result{}, err
	}
	if _, err := readUsage(); err != nil {
		return Result{}, err
	}

	progress := &lockedWriter{w: cfg.Progress}
	if cfg.Progress == nil {
		progress.w = io.Discard
	}
	logger := slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// One transport for all mutexes. The default keeps only 2 idle
	// connections per host (the SDK's own, 10), so hundreds of mutexes
	// would open and close connections all the time; the cap on open ones
	// keeps a burst from exhausting file descriptors or the server.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 256
	tr.MaxIdleConnsPerHost = 256
	tr.MaxConnsPerHost = 256
	defer tr.CloseIdleConnections()
	counter := &reqcount.Policy{}
	copts := &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport:        &http.Client{Transport: tr},
		PerRetryPolicies: []policy.Policy{counter},
	}}

	var m meter
	m.n = int64(cfg.Mutexes)
	m.allLeading = make(chan struct{})
	onEvent := func(e leaderelection.Event) {
		switch e.Kind {
		case leaderelection.StartedLeading:
			m.started.Add(1)
		case leaderelection.StoppedLeading:
			m.stopped(e.Reason)
		}
	}
	task := func(ctx context.Context) error {
		if m.leading.Add(1) == m.n {
			m.allOnce.Do(func() {
				m.allAt = time.Now()
				close(m.allLeading)
			})
		}
		<-ctx.Done()
		m.leading.Add(-1)
		return nil
	}

	// The progress goroutine is not counted in the baseline: it is ours,
	// not the mutexes'.
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	phase := &atomic.Value{}
	phase.Store("starting")
	begin := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		reportProgress(runCtx, progress, &m, counter, phase, begin, cfg.Mutexes)
	}()

	goroutinesBefore := runtime.NumGoroutine()
	usageBefore, err := readUsage()
	if err != nil {
		return Result{}, err
	}
	mutexes := make([]*leaderelection.BlobDistributedMutex, cfg.Mutexes)
	for i := range mutexes {
		s := leaderelection.BlobSettings{
			ConnectionString: cfg.ConnectionString,
			Container:        cfg.Container,
			Blob:             fmt.Sprintf("mutex-%06d", i),
			ClientOptions:    copts,
		}
		mutexes[i], err = leaderelection.NewBlobDistributedMutex(s, task,
			leaderelection.WithLogger(logger), leaderelection.WithEvents(onEvent))
		if err != nil {
			return Result{}, fmt.Errorf("scale: mutex %d: %w", i, err)
		}
	}

	// failed receives the first error of a mutex that stopped contending
	// while it should not have.
	failed := make(chan error, 1)
	started := time.Now()
	for i, mu := range mutexes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := mu.RunTaskWhenMutexAcquired(runCtx)
			if runCtx.Err() == nil {
				select {
				case failed <- fmt.Errorf("scale: mutex %d stopped contending: %w", i, err):
				default:
				}
			}
		}()
	}

	res := Result{Mutexes: cfg.Mutexes, LostReasons: map[string]int{}}
	// shutdown stops every mutex, waits for them, and cleans up: it runs
	// before Run returns, whatever happened.
	shutdown := func() {
		phase.Store("stopping")
		t0 := time.Now()
		cancel()
		wg.Wait()
		fmt.Fprintf(progress, "scale: all %d mutexes stopped in %v (%d terms started in all, %d ended)\n",
			cfg.Mutexes, time.Since(t0).Round(time.Millisecond), m.started.Load(), m.stoppedTotal.Load())
		if defaulted {
			deleteContainer(cfg, copts, progress)
		}
		if u, err := readUsage(); err == nil {
			res.PeakRSSBytes = u.maxRSS
		}
	}

	bound := 2*time.Minute + time.Duration(cfg.Mutexes)*20*time.Millisecond
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-m.allLeading:
	case <-timer.C:
		n := m.leading.Load()
		shutdown()
		return res, fmt.Errorf("scale: only %d of %d mutexes led at once within %v (storage too slow to keep up?)", n, cfg.Mutexes, bound)
	case err := <-failed:
		shutdown()
		return res, err
	case <-ctx.Done():
		n := m.leading.Load()
		shutdown()
		return res, fmt.Errorf("scale: %d of %d mutexes led when the context ended: %w", n, cfg.Mutexes, ctx.Err())
	}
	goroutinesAll := runtime.NumGoroutine()
	usageAll, err := readUsage()
	if err != nil {
		shutdown()
		return res, err
	}
	res.AllLeading = m.allAt.Sub(started)
	res.GoroutinesPerMutex = float64(goroutinesAll-goroutinesBefore) / float64(cfg.Mutexes)
	res.CPUStartup = usageAll.cpu - usageBefore.cpu
	fmt.Fprintf(progress, "scale: all %d mutexes lead after %v; observing for %v\n",
		cfg.Mutexes, res.AllLeading.Round(time.Millisecond), cfg.Steady)

	// The steady period.
	phase.Store("steady")
	requestsBefore := counter.Count()
	steadyBegin := time.Now()
	m.steady.Store(true)
	steadyTimer := time.NewTimer(cfg.Steady)
	defer steadyTimer.Stop()
	var runErr error
	select {
	case <-steadyTimer.C:
	case err := <-failed:
		runErr = err
	case <-ctx.Done():
		runErr = fmt.Errorf("scale: the context ended during the steady period: %w", ctx.Err())
	}
	m.steady.Store(false)
	res.Steady = time.Since(steadyBegin)
	res.Requests = counter.Count() - requestsBefore
	if u, err := readUsage(); err == nil {
		res.CPUSteady = u.cpu - usageAll.cpu
	} else if runErr == nil {
		runErr = err
	}
	res.CPUSteadyPercent = 100 * res.CPUSteady.Seconds() / res.Steady.Seconds()
	res.RequestsPerMutexHour = float64(res.Requests) / float64(cfg.Mutexes) / res.Steady.Hours()
	res.TermsLost, res.LostReasons = m.lost()

	shutdown()
	return res, runErr
}

// defaults fills in cfg's zero values and checks the rest. It reports
// whether it made up the container's name.
func (cfg *Config) defaults() (defaulted bool, err error) {
	var errs []error
	if cfg.ConnectionString == "" {
		errs = append(errs, errors.New("scale: Config.ConnectionString is required"))
	}
	switch {
	case cfg.Mutexes < 0:
		errs = append(errs, fmt.Errorf("scale: Config.Mutexes must not be negative, got %d", cfg.Mutexes))
	case cfg.Mutexes == 0:
		cfg.Mutexes = DefaultMutexes
	}
	switch {
	case cfg.Steady < 0:
		errs = append(errs, fmt.Errorf("scale: Config.Steady must not be negative, got %v", cfg.Steady))
	case cfg.Steady == 0:
		cfg.Steady = DefaultSteady
	}
	if cfg.Container == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.Container = "scale-" + hex.EncodeToString(b[:])
		defaulted = true
	}
	return defaulted, errors.Join(errs...)
}

// deleteContainer removes the container Run made up, best effort: a
// connection string the SDK cannot parse (UseDevelopmentStorage=true) or a
// failure leaves it, and says so.
func deleteContainer(cfg Config, copts *azblob.ClientOptions, progress io.Writer) {
	cc, err := container.NewClientFromConnectionString(cfg.ConnectionString, cfg.Container,
		&container.ClientOptions{ClientOptions: copts.ClientOptions})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = cc.Delete(ctx, nil)
	}
	if err != nil {
		fmt.Fprintf(progress, "scale: container %s left in place: %v\n", cfg.Container, firstLine(err.Error()))
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// meter counts what the mutexes do.
type meter struct {
	n          int64
	leading    atomic.Int64 // leader funcs running now
	allOnce    sync.Once
	allAt      time.Time // when all first ran; written before allLeading is closed
	allLeading chan struct{}

	started      atomic.Int64
	stoppedTotal atomic.Int64
	steady       atomic.Bool

	mu         sync.Mutex
	lostSteady map[string]int
	lostCount  int
	lostOther  int // terms that ended outside the steady period, not by Run's cancellation
}

func (m *meter) stopped(reason leaderelection.StopReason) {
	m.stoppedTotal.Add(1)
	steady := m.steady.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case steady:
		if m.lostSteady == nil {
			m.lostSteady = map[string]int{}
		}
		m.lostSteady[string(reason)]++
		m.lostCount++
	case reason != leaderelection.ReasonCallerCancelled:
		m.lostOther++
	}
}

func (m *meter) lost() (int, map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	reasons := make(map[string]int, len(m.lostSteady))
	for r, n := range m.lostSteady {
		reasons[r] = n
	}
	return m.lostCount, reasons
}

func (m *meter) counts() (lostSteady, lostOther int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lostCount, m.lostOther
}

// reportProgress writes a line every progressEvery until ctx ends.
func reportProgress(ctx context.Context, w io.Writer, m *meter, counter *reqcount.Policy, phase *atomic.Value, begin time.Time, n int) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lostSteady, lostOther := m.counts()
		line := fmt.Sprintf("scale: %6.1fs %-8s %d/%d leading, %d terms started, lost %d while steady and %d otherwise, %d requests, %d goroutines",
			time.Since(begin).Seconds(), phase.Load(), m.leading.Load(), n, m.started.Load(),
			lostSteady, lostOther, counter.Count(), runtime.NumGoroutine())
		if u, err := readUsage(); err == nil {
			line += fmt.Sprintf(", cpu %v, maxrss %d MiB", u.cpu.Round(time.Millisecond), u.maxRSS>>20)
		}
		fmt.Fprintln(w, line)
	}
}

// lockedWriter serializes writes from the logger and the progress reports.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// usage is the process's resource usage so far.
type usage struct {
	cpu    time.Duration // user + system
	maxRSS int64         // bytes
}

// Summary formats r for people.
func (r Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mutexes:                 %d\n", r.Mutexes)
	fmt.Fprintf(&b, "all leading after:       %v\n", r.AllLeading.Round(time.Millisecond))
	fmt.Fprintf(&b, "goroutines per mutex:    %.2f\n", r.GoroutinesPerMutex)
	fmt.Fprintf(&b, "CPU until all lead:      %v\n", r.CPUStartup.Round(time.Millisecond))
	fmt.Fprintf(&b, "steady period:           %v\n", r.Steady.Round(time.Millisecond))
	fmt.Fprintf(&b, "CPU while steady:        %v (%.2f%% of one core)\n", r.CPUSteady.Round(time.Millisecond), r.CPUSteadyPercent)
	fmt.Fprintf(&b, "peak RSS:                %.1f MiB\n", float64(r.PeakRSSBytes)/(1<<20))
	fmt.Fprintf(&b, "terms lost while steady: %d", r.TermsLost)
	if len(r.LostReasons) > 0 {
		reasons := make([]string, 0, len(r.LostReasons))
		for reason, n := range r.LostReasons {
			reasons = append(reasons, fmt.Sprintf("%s: %d", reason, n))
		}
		sort.Strings(reasons)
		fmt.Fprintf(&b, " (%s)", strings.Join(reasons, ", "))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "requests while steady:   %d (%.0f per mutex per hour)\n", r.Requests, r.RequestsPerMutexHour)
	return b.String()
}
