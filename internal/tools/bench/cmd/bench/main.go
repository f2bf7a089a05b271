// Command bench measures failover and cost of the library's leases (ETag
// leases of 3 s and 5 s, and the native 15 s lease at the defaults), side by
// side with the reference sample's algorithm (internal/tools/baseline) and
// etcd's own election (internal/tools/etcdpeer) under the same faults,
// prints the tables and writes them to BENCHMARKS.md. From the repository's
// root:
//
//	go run ./internal/tools/bench/cmd/bench                          # the full run, about 21 minutes on 2 cores
//	go run ./internal/tools/bench/cmd/bench -quick -out /tmp/b.md    # a smoke run
//
// Every trial is a fault injected by the chaos harness (internal/tools/chaos)
// into contenders running as separate processes, each behind its own proxy,
// against a local Azurite (or etcd); independent runs go in parallel, each
// with its own server. etcd is Debian's etcd-server package: the bench
// installs it with apt-get if it is missing (as root), or says how to.
// It rewrites only its own sections of the output file (ownSections) and
// its rows of the summary table, and keeps the rest byte for byte
// (internal/tools/benchdoc).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/buildinfo"
	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/etcdpeer"
	"github.com/blobelect/leaderelection/internal/tools/scale"
)

// envScaleWorker makes this binary run the scale benchmark in a process of
// its own (its CPU and RSS are then the mutexes' alone) and print JSON.
const envScaleWorker = "LEADERELECTION_BENCH_SCALE"

type options struct {
	trials, parallel       int
	chaosFaults, chaosRuns int
	etagFaults, etagRuns   int
	mixedFaults, mixedRuns int
	crowd, crowdFaults     int
	etcd                   bool
	steady                 time.Duration
	scaleMutexes           int
	scaleSteady            time.Duration
	out, svg, dir          string
	commit                 string // what is measured, read before the run writes its files
	seed                   int64
}

func main() {
	chaos.MaybeContend()
	if raw := os.Getenv(envScaleWorker); raw != "" {
		scaleWorker(raw)
		return
	}
	var o options
	quick := flag.Bool("quick", false, "a smoke run: few trials, short steady periods")
	flag.IntVar(&o.trials, "trials", 30, "faults per scenario and configuration")
	flag.IntVar(&o.parallel, "parallel", 6, "independent runs per scenario and configuration, in parallel")
	flag.IntVar(&o.chaosFaults, "chaos-faults", 200, "faults of every kind in the chaos runs of native leases")
	flag.IntVar(&o.chaosRuns, "chaos-runs", 8, "chaos runs of native leases, in parallel")
	flag.IntVar(&o.etagFaults, "etag-chaos-faults", 150, "faults of every kind in the chaos runs of each ETag lease length (3 s, 5 s)")
	flag.IntVar(&o.etagRuns, "etag-chaos-runs", 5, "chaos runs of each ETag lease length, in parallel")
	flag.IntVar(&o.mixedFaults, "mixed-chaos-faults", 100, "faults in the chaos runs of fleets mixing ETag and native leases")
	flag.IntVar(&o.mixedRuns, "mixed-chaos-runs", 4, "chaos runs of mixed fleets, in parallel")
	flag.IntVar(&o.crowd, "crowd", 50, "contenders on one blob in the crowd scenario")
	flag.IntVar(&o.crowdFaults, "crowd-faults", 12, "faults in the crowd scenario")
	flag.BoolVar(&o.etcd, "etcd", true, "measure etcd's election too (installs Debian's etcd-server if missing)")
	flag.DurationVar(&o.steady, "steady", 3*time.Minute, "fault-free period over which requests are counted")
	flag.IntVar(&o.scaleMutexes, "scale-mutexes", 1000, "mutexes in one process")
	flag.DurationVar(&o.scaleSteady, "scale-steady", 5*time.Minute, "steady state observed once all of them lead")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "where to write the tables (only the bench's own sections and summary rows are rewritten)")
	flag.StringVar(&o.svg, "svg", "docs/chaos-timeline.svg", "where to draw one chaos run of a mixed fleet")
	flag.StringVar(&o.dir, "dir", "", "where to keep the runs' records and logs (default a temporary directory)")
	flag.Int64Var(&o.seed, "seed", time.Now().Unix()%100000*1000, "first seed; every run's seed is printed")
	flag.Parse()
	if *quick {
		o.trials, o.parallel, o.chaosFaults, o.chaosRuns, o.crowd, o.crowdFaults = 2, 2, 4, 2, 8, 2
		o.etagFaults, o.etagRuns, o.mixedFaults, o.mixedRuns = 4, 2, 4, 2
		o.steady, o.scaleMutexes, o.scaleSteady = 30*time.Second, 50, 10*time.Second
	}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "bench-")
		check(err)
		o.dir = d
	}
	o.commit = buildinfo.Revision()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.etcd {
		_, err := etcdpeer.Install(ctx, os.Stderr)
		check(err)
	}
	start := time.Now()
	res, err := run(ctx, o)
	check(err)
	pub, err := publication(o, res, time.Since(start))
	check(err)
	fmt.Print(strings.Join(pub.Sections, "\n"))
	check(benchdoc.Publish(o.out, pub))
	fmt.Fprintln(os.Stderr, "bench: wrote its sections and summary rows of", o.out)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// ownSections are the "## " sections the bench writes, in its order.
var ownSections = []string{"Failover", "Targets", "Requests per hour", "Scale", "Chaos"}

// publication is what the bench writes into the output file: its sections,
// as writeDoc writes them, and its summary rows.
func publication(o options, res results, took time.Duration) (benchdoc.Publication, error) {
	var doc strings.Builder
	writeDoc(&doc, o, res)
	text := strings.Replace(doc.String(), "{{ELAPSED}}", took.Round(time.Second).String(), 1)
	var pub benchdoc.Publication
	for _, part := range strings.SplitAfter(text, "\n## ")[1:] {
		heading, _, _ := strings.Cut(part, "\n")
		if !slices.Contains(ownSections, heading) {
			return pub, fmt.Errorf("writeDoc wrote a section %q that is not the bench's own", heading)
		}
	}
	for _, sec := range strings.Split("\n"+text, "\n## ")[1:] {
		pub.Sections = append(pub.Sections, "## "+strings.TrimRight(sec, "\n")+"\n")
	}
	if len(pub.Sections) != len(ownSections) {
		return pub, fmt.Errorf("writeDoc wrote %d sections, not the bench's %d", len(pub.Sections), len(ownSections))
	}
	pub.Rows = summaryRows(o, res)
	return pub, nil
}

// summaryRows are the bench's rows of the summary table, each named as in
// BENCHMARKS.md's summary so that it replaces its row in place.
func summaryRows(o options, res results) []string {
	gaps := func(kind, key string) string {
		g := res.failover[kind][key].gaps()
		if len(g) == 0 {
			return "-"
		}
		return fmt.Sprintf("p50 %s, p99 %s", secs(chaos.Percentile(g, 50)), secs(chaos.Percentile(g, 99)))
	}
	trials := func(kind, key string) string {
		return fmt.Sprintf("%d trials, one run", len(res.failover[kind][key].faults()))
	}
	margin := func(key string) string {
		b := res.failover[chaos.FaultBlackhole][key]
		ms := b.margins()
		if len(ms) == 0 {
			return "-"
		}
		return fmt.Sprintf("%s in %d of %d", secs(slices.Min(ms)), len(ms), len(b.faults()))
	}
	t := totalsOf(res)
	reqs := "-"
	if l, f, err := requestRates(res.steady["native15"]); err == nil {
		reqs = fmt.Sprintf("leader %s, follower %s", benchdoc.Thousands(l.total()), benchdoc.Thousands(f.total()))
	}
	row := func(figure, value, runs, command string) string {
		return fmt.Sprintf("| %s | %s | %s | | %s | %s |", figure, value, runs, o.commit, command)
	}
	return []string{
		row("crash failover (SIGKILL), defaults (native lease 15 s)", gaps(chaos.FaultKill, "native15"), trials(chaos.FaultKill, "native15"),
			"`go run ./internal/tools/bench/cmd/bench`, [Failover](#failover)"),
		row("graceful handover (SIGTERM), defaults", gaps(chaos.FaultGraceful, "native15"), trials(chaos.FaultGraceful, "native15"), "the same"),
		row("crash failover, ETag lease 5 s, RetryInterval 1 s", gaps(chaos.FaultKill, "etag5"), trials(chaos.FaultKill, "etag5"), "the same"),
		row("a cut-off leader stopped before its lease could pass to another",
			fmt.Sprintf("by at least %s partition trials (native), %s (ETag 5 s)", margin("native15"), margin("etag5")), "one run", "the same"),
		row("two leader funcs at once", fmt.Sprintf("%d in %s faults (%s into fleets holding ETag leases)", t.libOverlaps, benchdoc.Thousands(float64(t.libFaults)), benchdoc.Thousands(float64(t.etagFaults))),
			"one run", "the same, [Chaos](#chaos)"),
		row("requests an hour, defaults", reqs, fmt.Sprintf("%v, 3 contenders", o.steady), "the same, [Requests per hour](#requests-per-hour)"),
	}
}

// totals counts the faults and overlaps of a run, over the fleets holding
// ETag leases and over the library's contenders of every kind.
type totals struct{ etagFaults, etagOverlaps, libFaults, libOverlaps int }

func totalsOf(res results) totals {
	var t totals
	for _, sc := range res.scenarios {
		for _, su := range res.sus {
			if su.etag {
				t.etagFaults += len(res.failover[sc.kind][su.key].faults())
				t.etagOverlaps += res.failover[sc.kind][su.key].overlaps()
			}
		}
	}
	for _, b := range res.chaos {
		if b.setup.etag {
			t.etagFaults += len(b.faults())
			t.etagOverlaps += b.overlaps()
		}
	}
	t.libFaults, t.libOverlaps = t.etagFaults, t.etagOverlaps
	for _, sc := range res.scenarios {
		t.libFaults += len(res.failover[sc.kind]["native15"].faults())
		t.libOverlaps += res.failover[sc.kind]["native15"].overlaps()
	}
	t.libFaults += len(res.crowd.faults()) + len(res.chaos[0].faults())
	t.libOverlaps += res.crowd.overlaps() + res.chaos[0].overlaps()
	return t
}

// setup is one configuration under test: what every lane of its runs runs.
type setup struct {
	key, title string
	fleet      []chaos.Contender
	etag       bool // the library's ETag lease
}

func setups(o options) []setup {
	s := []setup{
		{key: "etag3", title: "ETag lease 3 s", fleet: []chaos.Contender{{LeaseDuration: 3 * time.Second, RetryInterval: time.Second}}, etag: true},
		{key: "etag5", title: "ETag lease 5 s", fleet: []chaos.Contender{{LeaseDuration: 5 * time.Second, RetryInterval: time.Second}}, etag: true},
		{key: "native15", title: "native lease 15 s", fleet: []chaos.Contender{{}}},
		{key: "baseline", title: "reference sample", fleet: []chaos.Contender{{Algo: chaos.AlgoBaseline}}},
	}
	if o.etcd {
		s = append(s,
			setup{key: "etcd5", title: "etcd election, TTL 5 s", fleet: []chaos.Contender{{Algo: chaos.AlgoEtcd, LeaseDuration: 5 * time.Second}}},
			setup{key: "etcd15", title: "etcd election, TTL 15 s", fleet: []chaos.Contender{{Algo: chaos.AlgoEtcd, LeaseDuration: 15 * time.Second}}})
	}
	return s
}

// The chaos fleets: every fault kind, against leases of one kind or mixed.
var (
	nativeFleet = []chaos.Contender{{}}
	etag3Fleet  = []chaos.Contender{{LeaseDuration: 3 * time.Second, RetryInterval: time.Second}}
	etag5Fleet  = []chaos.Contender{{LeaseDuration: 5 * time.Second, RetryInterval: time.Second}}
	// Lanes alternate: ETag 3 s, native 15 s, ETag 5 s, native 15 s, ETag 5 s.
	mixedFleet = []chaos.Contender{etag3Fleet[0], {}, etag5Fleet[0], {}, etag5Fleet[0]}
)

// batch is the runs of one scenario and configuration.
type batch struct {
	name    string
	setup   setup
	reports []chaos.Report
	dirs    []string
	err     error
}

// runBatch runs `runs` chaos runs in parallel with `faults` faults in total.
func runBatch(ctx context.Context, o options, name string, su setup, kinds []string, runs, faults, contenders int, d time.Duration, seed int64) *batch {
	b := &batch{name: name, setup: su}
	b.reports = make([]chaos.Report, runs)
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i := range runs {
		dir := filepath.Join(o.dir, fmt.Sprintf("%s-%s-%d", name, su.key, i))
		b.dirs = append(b.dirs, dir)
		n := -1 // no faults
		if faults >= 0 {
			n = faults / runs
			if i < faults%runs {
				n++
			}
			if n == 0 {
				n = -1 // 0 would mean no limit
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.reports[i], errs[i] = chaos.Run(ctx, chaos.Config{
				Seed: seed + int64(i), Contenders: contenders, Duration: d, MaxFaults: n, Kinds: kinds, Fleet: su.fleet,
				Dir: dir, Progress: os.Stderr,
			})
		}()
	}
	wg.Wait()
	b.err = errors.Join(errs...)
	if b.err != nil {
		b.err = fmt.Errorf("%s %s: %w", name, su.key, b.err)
	}
	return b
}

func (b *batch) faults() []chaos.FaultResult {
	var fs []chaos.FaultResult
	for _, r := range b.reports {
		fs = append(fs, r.Faults...)
	}
	return fs
}

func (b *batch) overlaps() (n int) {
	for _, r := range b.reports {
		n += len(r.Overlap)
	}
	return n
}

// missed counts faults after which no successor started: they are not in
// gaps, and are shown beside them.
func (b *batch) missed() (n int) {
	for _, f := range b.faults() {
		if !f.Changed || f.Gap == 0 {
			n++
		}
	}
	return n
}

func (b *batch) gaps() []time.Duration {
	var gs []time.Duration
	for _, f := range b.faults() {
		if f.Changed && f.Gap > 0 {
			gs = append(gs, f.Gap)
		}
	}
	return gs
}

func (b *batch) margins() []time.Duration {
	var ms []time.Duration
	for _, f := range b.faults() {
		if f.Changed && f.StopMarginOK {
			ms = append(ms, f.StopMargin)
		}
	}
	return ms
}

// parallelBatches runs f for every setup at once and returns the batches
// by setup key.
func parallelBatches(sus []setup, f func(setup) *batch) (map[string]*batch, error) {
	out := map[string]*batch{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, su := range sus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := f(su)
			mu.Lock()
			out[su.key] = b
			mu.Unlock()
		}()
	}
	wg.Wait()
	var errs []error
	for _, b := range out {
		errs = append(errs, b.err)
	}
	return out, errors.Join(errs...)
}

// results is everything a run measured.
type results struct {
	sus       []setup
	failover  map[string]map[string]*batch // scenario kind -> setup key
	steady    map[string]*batch
	crowd     *batch
	chaos     []*batch // native, etag 3 s, etag 5 s, mixed
	scale     scale.Result
	scenarios []scenario
}

func run(ctx context.Context, o options) (results, error) {
	seed := o.seed
	var seedMu sync.Mutex
	nextSeed := func() int64 { seedMu.Lock(); defer seedMu.Unlock(); seed += 100; return seed }
	say := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }
	res := results{sus: setups(o), failover: map[string]map[string]*batch{}}
	res.scenarios = scenarios

	// 1. Failover, every configuration side by side, one fault kind at a
	// time; the runs of all configurations go in parallel.
	for _, sc := range res.scenarios {
		say("scenario %s: %d trials per configuration, %d runs each in parallel", sc.kind, o.trials, o.parallel)
		bs, err := parallelBatches(res.sus, func(su setup) *batch {
			return runBatch(ctx, o, sc.kind, su, []string{sc.kind}, o.parallel, o.trials, 3, 30*time.Minute, nextSeed())
		})
		if err != nil {
			return res, err
		}
		res.failover[sc.kind] = bs
	}

	// 2. Requests per hour, counted, in a fault-free period; and the crowd:
	// many contenders on one blob, with kills and graceful handovers.
	say("steady state %v for request counts; %d contenders on one blob", o.steady, o.crowd)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res.crowd = runBatch(ctx, o, "crowd", setup{key: "native15", fleet: nativeFleet}, []string{chaos.FaultKill, chaos.FaultGraceful, chaos.FaultBlackhole},
			1, o.crowdFaults, o.crowd, 30*time.Minute, nextSeed())
	}()
	var err error
	res.steady, err = parallelBatches(res.sus, func(su setup) *batch {
		return runBatch(ctx, o, "steady", su, nil, 1, -1, 3, o.steady, nextSeed())
	})
	wg.Wait()
	if err = errors.Join(err, res.crowd.err); err != nil {
		return res, err
	}

	// 3. Chaos: every fault kind, against native leases, ETag leases of 3 s
	// and 5 s, and fleets that mix the kinds.
	say("chaos: %d faults on native leases, %d on each ETag lease length, %d on mixed fleets", o.chaosFaults, o.etagFaults, o.mixedFaults)
	chaosSetups := []struct {
		su           setup
		runs, faults int
		contenders   int
	}{
		{setup{key: "native15", title: "native lease 15 s", fleet: nativeFleet}, o.chaosRuns, o.chaosFaults, 5},
		{setup{key: "etag3", title: "ETag lease 3 s", fleet: etag3Fleet, etag: true}, o.etagRuns, o.etagFaults, 5},
		{setup{key: "etag5", title: "ETag lease 5 s", fleet: etag5Fleet, etag: true}, o.etagRuns, o.etagFaults, 5},
		{setup{key: "mixed", title: "mixed: ETag 3 s, native 15 s, ETag 5 s, native 15 s, ETag 5 s", fleet: mixedFleet, etag: true}, o.mixedRuns, o.mixedFaults, 5},
	}
	res.chaos = make([]*batch, len(chaosSetups))
	for i, cs := range chaosSetups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.chaos[i] = runBatch(ctx, o, "chaos", cs.su, chaos.AllFaults, cs.runs, cs.faults, cs.contenders, 60*time.Minute, nextSeed())
		}()
	}
	wg.Wait()
	for _, b := range res.chaos {
		if b.err != nil {
			return res, b.err
		}
	}
	mixed := res.chaos[len(res.chaos)-1]
	if o.svg != "" && len(mixed.reports) > 0 {
		if err := os.MkdirAll(filepath.Dir(o.svg), 0o755); err != nil {
			return res, err
		}
		f, err := os.Create(o.svg)
		if err != nil {
			return res, err
		}
		werr := chaos.WriteSVG(f, mixed.reports[0])
		if err := errors.Join(werr, f.Close()); err != nil {
			return res, err
		}
	}

	// 4. Scale, in a process of its own.
	say("scale: %d mutexes, %v steady", o.scaleMutexes, o.scaleSteady)
	res.scale, err = runScale(ctx, o)
	if err != nil {
		return res, fmt.Errorf("scale: %w", err)
	}

	return res, nil
}

// scenario is one failover benchmark: a fault kind and what it measures.
type scenario struct{ title, kind string }

// scenarios are the failover benchmarks, in their order.
var scenarios = []scenario{
	{"graceful handover (SIGTERM)", chaos.FaultGraceful},
	{"crash (SIGKILL)", chaos.FaultKill},
	{"partition (blackhole)", chaos.FaultBlackhole},
}

func runScale(ctx context.Context, o options) (scale.Result, error) {
	var res scale.Result
	srv, err := azurite.Start(ctx, azurite.Options{})
	if err != nil {
		return res, err
	}
	defer func() { _ = srv.Stop() }()
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	cfg, _ := json.Marshal(scale.Config{ConnectionString: srv.ConnectionString(), Mutexes: o.scaleMutexes, Steady: o.scaleSteady})
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), envScaleWorker+"="+string(cfg))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return res, err
	}
	return res, json.Unmarshal(out, &res)
}

func scaleWorker(raw string) {
	var cfg scale.Config
	check(json.Unmarshal([]byte(raw), &cfg))
	cfg.Progress = os.Stderr
	res, err := scale.Run(context.Background(), cfg)
	check(err)
	check(json.NewEncoder(os.Stdout).Encode(res))
}

// rates is requests per hour, by class.
type rates struct{ lease, write, read float64 }

func (r rates) total() float64 { return r.lease + r.write + r.read }

// requestRates returns requests per hour of the steady run's leader, and the
// mean of its followers, from the counts the contenders reported.
func requestRates(b *batch) (leader, follower rates, err error) {
	recs, err := chaos.ReadRecords(filepath.Join(b.dirs[0], "records.jsonl"))
	if err != nil {
		return leader, follower, err
	}
	lead, first, last, err := chaos.SteadyRequests(b.reports[0], recs)
	if err != nil {
		return leader, follower, err
	}
	var fs []rates
	found := false
	for who, f := range first {
		l := last[who]
		if l.Mono-f.Mono < int64(30*time.Second) {
			continue
		}
		per := float64(time.Hour) / float64(l.Mono-f.Mono)
		r := rates{lease: float64(l.Leases-f.Leases) * per, write: float64(l.Writes-f.Writes) * per, read: float64(l.Reads-f.Reads) * per}
		if who == lead {
			leader, found = r, true
		} else {
			fs = append(fs, r)
		}
	}
	if !found || len(fs) == 0 {
		return leader, follower, errors.New("too few request counts in the steady run")
	}
	for _, f := range fs {
		follower.lease += f.lease / float64(len(fs))
		follower.write += f.write / float64(len(fs))
		follower.read += f.read / float64(len(fs))
	}
	return leader, follower, nil
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func stats(ds []time.Duration) (p50, p99, mx string) {
	if len(ds) == 0 {
		return "-", "-", "-"
	}
	return secs(chaos.Percentile(ds, 50)), secs(chaos.Percentile(ds, 99)), secs(slices.Max(ds))
}

func metMissed(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

// settingsOf describes a setup's timings for the settings paragraph.
var settingsOf = map[string]string{
	"etag3":    "the library, LeaseDuration 3 s and RetryInterval 1 s, the other timings their defaults for that lease (StopMargin 1 s, RenewInterval 1 s, RequestTimeout 1 s): an ETag lease",
	"etag5":    "the library, LeaseDuration 5 s and RetryInterval 1 s (StopMargin 1 s, RenewInterval 1.67 s, RequestTimeout 2.33 s): an ETag lease",
	"native15": "the library at its defaults (a native lease of 15 s, renewed every 5 s, StopMargin 3 s, RetryInterval 2 s, RequestTimeout 4 s)",
	"baseline": "the reference C# sample's algorithm (`internal/tools/baseline`: lease 15 s, renew every 10 s, acquire retry every 20 s, the SDK's default retries, the leader task cancelled only when a renew call fails)",
	"etcd5":    "etcd's `concurrency.Election` over a `concurrency.Session` with TTL 5 s (keepalive every TTL/3 by the client; followers wait on a watch), against a single-node etcd on 127.0.0.1 (`internal/tools/etcdpeer`); the leader stops when `Session.Done()` closes, and on SIGTERM resigns and revokes its lease",
	"etcd15":   "the same with TTL 15 s",
}

// stopMarginOf is each setup's StopMargin, the target the partition trials
// are read against ("" none).
var stopMarginOf = map[string]time.Duration{"etag3": time.Second, "etag5": time.Second, "native15": 3 * time.Second}

func writeDoc(w io.Writer, o options, res results) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Failover\n\n")
	p("Produced by `%s` in {{ELAPSED}}, on %s; commit %s.\n\n", strings.Join(append([]string{"go run ./internal/tools/bench/cmd/bench"}, os.Args[1:]...), " "),
		time.Now().UTC().Format("2006-01-02"), o.commit)
	p("Machine: %s, %d cores, %s. %s, %s, Azurite %s", cpuModel(), runtime.NumCPU(), memTotal(), runtime.Version(), nodeVersion(), azurite.Version)
	if o.etcd {
		p(", %s (Debian's etcd-server)", etcdpeer.Version())
	}
	p(".\n\nModule versions: %s.\n\n", depVersions())
	p("Configurations:\n\n")
	for _, su := range res.sus {
		p("- **%s**: %s.\n", su.title, settingsOf[su.key])
	}
	p("\nEvery trial is a fault injected by the chaos harness (`internal/tools/chaos`) into contenders running as separate processes ")
	p("against a local Azurite (or etcd), each behind its own toxiproxy; %d runs of each configuration go in parallel, each with its own ", o.parallel)
	p("server and 3 contenders, and the runs of all configurations go at the same time, so every configuration shares one loaded machine. ")
	p("Times are between CLOCK_MONOTONIC stamps written by the processes themselves. Failover is from the fault to the next leader's func starting. ")
	p("Percentiles are nearest-rank: with up to 100 trials, p99 is the maximum.\n\n")
	p("| scenario | configuration | faults | no successor | p50 | p99 | max | overlaps |\n|---|---|---|---|---|---|---|---|\n")
	for _, sc := range res.scenarios {
		for _, su := range res.sus {
			b := res.failover[sc.kind][su.key]
			p50, p99, mx := stats(b.gaps())
			p("| %s | %s | %d | %d | %s | %s | %s | %d |\n", sc.title, su.title, len(b.faults()), b.missed(), p50, p99, mx, b.overlaps())
		}
	}
	p("\n**Stop margin in the partition trials**: how long before its lease could pass to another instance the cut-off leader's func returned ")
	p("(negative: it kept acting after another instance could lead). That moment is the checker's own, from the leader process's requests, ")
	p("not what the algorithm believes: the send time of the last acquire or renewal the server confirmed (for an ETag lease, of the last ")
	p("write under the lease; for etcd, of the last grant or keepalive answered) + the lease duration (TTL). Trials where the old leader ")
	p("had not returned before the next fault are not counted.\n\n")
	p("| configuration | trials | min | p50 | max | StopMargin |\n|---|---|---|---|---|---|\n")
	for _, su := range res.sus {
		ms := res.failover[chaos.FaultBlackhole][su.key].margins()
		sm := "-"
		if d, ok := stopMarginOf[su.key]; ok {
			sm = secs(d)
		}
		if len(ms) == 0 {
			p("| %s | 0 | - | - | - | %s |\n", su.title, sm)
			continue
		}
		p("| %s | %d | %s | %s | %s | %s |\n", su.title, len(ms), secs(slices.Min(ms)), secs(chaos.Percentile(ms, 50)), secs(slices.Max(ms)), sm)
	}

	// The targets, for the 5 s ETag lease.
	e5 := func(kind string) *batch { return res.failover[kind]["etag5"] }
	crashP99 := chaos.Percentile(e5(chaos.FaultKill).gaps(), 99)
	partP99 := chaos.Percentile(e5(chaos.FaultBlackhole).gaps(), 99)
	pm := e5(chaos.FaultBlackhole).margins()
	pmMin := time.Duration(0)
	if len(pm) > 0 {
		pmMin = slices.Min(pm)
	}
	partTrials := len(e5(chaos.FaultBlackhole).faults())
	t := totalsOf(res)
	p("\n## Targets\n\n")
	p("For an ETag lease of 5 s with RetryInterval 1 s (StopMargin 1 s), in this run:\n\n")
	p("| target | measured | |\n|---|---|---|\n")
	p("| crash failover p99 at most 6.5 s | %s (%d trials) | %s |\n", secs(crashP99), len(e5(chaos.FaultKill).gaps()), metMissed(crashP99 > 0 && crashP99 <= 6500*time.Millisecond))
	p("| partition failover p99 at most 6.5 s | %s (%d trials) | %s |\n", secs(partP99), len(e5(chaos.FaultBlackhole).gaps()), metMissed(partP99 > 0 && partP99 <= 6500*time.Millisecond))
	p("| stop margin at least StopMargin − 0.25 s = 0.75 s in every partition trial | min %s over %d of %d trials | %s |\n", secs(pmMin), len(pm), partTrials,
		metMissed(len(pm) == partTrials && pmMin >= 750*time.Millisecond))
	p("| 0 overlaps, every fleet with ETag leases (failover trials and chaos runs) | %d overlaps in %d faults | %s |\n", t.etagOverlaps, t.etagFaults, metMissed(t.etagOverlaps == 0))
	p("\nA 5 s ETag lease fails over in at most D + RetryInterval + a few round trips: a follower times the ETag from the first answer that shows it, ")
	p("so up to one RetryInterval after the leader's last write, and breaks D later, at once (its wait is cut to the due time), then acquires the lease ")
	p("and writes its term record before its func starts. The leader's last write precedes the fault by up to one RenewInterval, which the gap does not count.\n")

	p("\n## Requests per hour\n\nCounted in each contender (Azure: a pipeline policy, every HTTP request, retries included; etcd: a gRPC interceptor, every ")
	p("unary call and every message sent on the keepalive stream, and each watch created; events pushed to a watcher are not requests) over %v without faults, 3 contenders. ", o.steady)
	p("Lease operations are acquire, renew, release and break (etcd: grant, keepalive, revoke); writes are the other writes (Azure: metadata writes, ")
	p("which renew an ETag lease, and term records; etcd: put, txn, delete); reads are a follower's look at the lease (Azure: GET/HEAD; etcd: range, watch).\n\n")
	p("| configuration | leader: lease ops | writes | reads | total | follower (mean): lease ops | writes | reads | total |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, su := range res.sus {
		l, f, err := requestRates(res.steady[su.key])
		if err != nil {
			p("| %s | %v | | | | | | | |\n", su.title, err)
			continue
		}
		p("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", su.title, l.lease, l.write, l.read, l.total(), f.lease, f.write, f.read, f.total())
	}

	sr := res.scale
	p("\n## Scale\n\n%d mutexes on %d blobs in one process, against one Azurite, default settings, one shared HTTP transport.\n\n", sr.Mutexes, sr.Mutexes)
	p("| measure | value |\n|---|---|\n")
	p("| time until all lead | %s |\n", secs(sr.AllLeading))
	p("| CPU until all lead (user+sys) | %s |\n", secs(sr.CPUStartup))
	p("| CPU in steady state | %.1f %% of one core (%s over %s) |\n", sr.CPUSteadyPercent, secs(sr.CPUSteady), sr.Steady.Round(time.Second))
	p("| peak RSS | %.0f MiB |\n", float64(sr.PeakRSSBytes)/(1<<20))
	p("| goroutines per mutex | %.2f |\n", sr.GoroutinesPerMutex)
	if sr.TermsLost == 0 {
		p("| terms lost in steady state | 0 |\n")
	} else {
		p("| terms lost in steady state | %d %v |\n", sr.TermsLost, sr.LostReasons)
	}
	p("| requests per mutex per hour | %.0f |\n", sr.RequestsPerMutexHour)

	crowd := res.crowd
	p("\n**%d contenders on one blob** (separate processes, native lease at the defaults), %d faults (kill, graceful, blackhole of the leader):\n\n", o.crowd, len(crowd.faults()))
	p("| fault | trials | p50 | p99 | max |\n|---|---|---|---|---|\n")
	for _, kind := range []string{chaos.FaultKill, chaos.FaultGraceful, chaos.FaultBlackhole} {
		var gs []time.Duration
		for _, f := range crowd.faults() {
			if f.Kind == kind && f.Changed && f.Gap > 0 {
				gs = append(gs, f.Gap)
			}
		}
		p50, p99, mx := stats(gs)
		p("| %s | %d | %s | %s | %s |\n", kind, len(gs), p50, p99, mx)
	}
	p("\nOverlaps (two leader funcs running at once): %d.\n", crowd.overlaps())

	p("\n## Chaos\n\nRuns of 5 contenders, every fault kind drawn at random: SIGKILL, SIGSTOP for the leader's lease duration + 2-6 s, ")
	p("blackhole and connection resets for as long, latency of 5 s (every request times out) for as long, latency of 300 ± 150 ms for 6-12 s, ")
	p("connection resets for 1/7 to 4/7 of how long the leader can go without a confirmed renewal (LeaseDuration − StopMargin − RenewInterval: ")
	p("1-4 s at the defaults, 0.14-0.57 s for a 3 s ETag lease), an Azurite restart with its data on disk, and SIGTERM. ")
	p("Each fault hits the current leader (or storage). Replay a run with `go run ./internal/tools/chaos/cmd/chaos -seed N -faults F -duration 60m` ")
	p("and the fleet's flags (`-lease 3s -retry 1s`; the mixed fleet: `-lease 3s,15s,5s,15s,5s -retry 1s,2s,1s,2s,1s`).\n")
	for _, b := range res.chaos {
		p("\n**%s** (%d runs, seeds", b.setup.title, len(b.reports))
		for _, r := range b.reports {
			p(" %d", r.Seed)
		}
		p("):\n\n")
		writeChaosTable(w, b)
	}
	p("\nIn all, %d faults were injected into fleets holding ETag leases in this run (failover trials and chaos, the mixed fleets included), with %d overlaps; ", t.etagFaults, t.etagOverlaps)
	p("%d into the library's contenders of every kind (with the native failover trials, the crowd and the native chaos runs), with %d overlaps.\n", t.libFaults, t.libOverlaps)
	if o.svg != "" {
		p("\nThe first mixed run, a lane per contender (labelled with its lease), terms as bars with their numbers, faults shaded, ")
		p("the leaderless gaps in the bottom row:\n\n![Timeline of a chaos run](%s)\n", o.svg)
	}
}

func writeChaosTable(w io.Writer, b *batch) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("| fault | injected | leadership moved | gap p50 | gap max | stop margin min |\n|---|---|---|---|---|---|\n")
	byKind := map[string][]chaos.FaultResult{}
	for _, f := range b.faults() {
		byKind[f.Kind] = append(byKind[f.Kind], f)
	}
	for _, kind := range chaos.AllFaults {
		fs := byKind[kind]
		var gs, ms []time.Duration
		moved := 0
		for _, f := range fs {
			if f.Changed {
				moved++
				if f.Gap > 0 {
					gs = append(gs, f.Gap)
				}
				// A frozen leader cannot stop while frozen: its wake is
				// reported below instead.
				if f.StopMarginOK && kind != chaos.FaultFreeze {
					ms = append(ms, f.StopMargin)
				}
			}
		}
		p50, _, mx := stats(gs)
		mn := "-"
		if len(ms) > 0 {
			mn = secs(slices.Min(ms))
		}
		p("| %s | %d | %d | %s | %s | %s |\n", kind, len(fs), moved, p50, mx, mn)
	}
	var wakes []time.Duration
	live := 0
	for _, r := range b.reports {
		for _, wk := range r.Frozen {
			wakes = append(wakes, wk.AfterCont)
		}
		live += len(r.Liveness)
	}
	// One forgotten lease can overlap more than one successor term; count
	// the leases, and the pairs apart.
	amnesia, pairs := 0, 0
	for _, r := range b.reports {
		forgotten := map[chaos.TermSpan]bool{}
		for _, o := range r.Amnesia {
			forgotten[o.A] = true
		}
		amnesia += len(forgotten)
		pairs += len(r.Amnesia)
	}
	etagHits := 0
	for _, f := range b.faults() {
		if strings.HasPrefix(f.TargetRuns, "etag") {
			etagHits++
		}
	}
	p("\nOverlaps: %d. Liveness violations (no leader within the longest lease + retry interval + 5 s of a fault healing): %d.", b.overlaps(), live)
	if b.setup.etag && !strings.HasPrefix(b.setup.key, "etag") {
		p(" Faults that hit a leader holding an ETag lease: %d of %d.", etagHits, len(b.faults()))
	}
	if amnesia > 0 {
		p(" Apart from those: %d times Azurite came back from a restart without a lease it had granted (it saves its data to disk only every few seconds), ", amnesia)
		p("another instance took it while its holder still led (%d pairs of terms ran together), and the holder stopped at its next renewal; ", pairs)
		p("Azure Storage does not lose acknowledged writes, and the terms (fencing tokens) still increased.")
	}
	if len(wakes) > 0 {
		p(" A leader frozen by SIGSTOP across its deadline returned %v at most after SIGCONT (%d cases): the time to deliver its cancelled context.",
			slices.Max(wakes).Round(time.Millisecond), len(wakes))
	}
	p("\n")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "? memory"
	}
	var kb int64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
		}
	}
	return fmt.Sprintf("%.0f GiB memory", float64(kb)/(1<<20))
}

func nodeVersion() string {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return "node ?"
	}
	return "node " + strings.TrimSpace(string(out))
}

func depVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	var vs []string
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob", "github.com/Azure/azure-sdk-for-go/sdk/azcore", "github.com/Shopify/toxiproxy/v2",
			"go.etcd.io/etcd/client/v3":
			vs = append(vs, d.Path+" "+d.Version)
		}
	}
	return strings.Join(vs, ", ")
}
