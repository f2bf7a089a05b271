// Command bench measures failover and cost at the library's default settings,
// side by side with the reference sample's algorithm (internal/tools/baseline)
// under the same faults, prints the tables and writes them to BENCHMARKS.md.
// From the repository's root:
//
//	go run ./internal/tools/bench/cmd/bench                          # the full run, about 21 minutes
//	go run ./internal/tools/bench/cmd/bench -quick -out /tmp/b.md    # a smoke run
//
// Every trial is a fault injected by the chaos harness (internal/tools/chaos)
// into contenders running as separate processes, each behind its own proxy,
// against a local Azurite; independent runs go in parallel, each with its own
// Azurite.
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
	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/scale"
)

// envScaleWorker makes this binary run the scale benchmark in a process of
// its own (its CPU and RSS are then the mutexes' alone) and print JSON.
const envScaleWorker = "LEADERELECTION_BENCH_SCALE"

type options struct {
	trials, parallel       int
	chaosFaults, chaosRuns int
	crowd, crowdFaults     int
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
	flag.IntVar(&o.trials, "trials", 30, "faults per scenario and algorithm")
	flag.IntVar(&o.parallel, "parallel", 6, "independent runs per scenario and algorithm, in parallel")
	flag.IntVar(&o.chaosFaults, "chaos-faults", 200, "faults of every kind in the mixed chaos runs")
	flag.IntVar(&o.chaosRuns, "chaos-runs", 8, "mixed chaos runs in parallel")
	flag.IntVar(&o.crowd, "crowd", 50, "contenders on one blob in the crowd scenario")
	flag.IntVar(&o.crowdFaults, "crowd-faults", 12, "faults in the crowd scenario")
	flag.DurationVar(&o.steady, "steady", 3*time.Minute, "fault-free period over which requests are counted")
	flag.IntVar(&o.scaleMutexes, "scale-mutexes", 1000, "mutexes in one process")
	flag.DurationVar(&o.scaleSteady, "scale-steady", 5*time.Minute, "steady state observed once all of them lead")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "where to write the tables")
	flag.StringVar(&o.svg, "svg", "docs/chaos-timeline.svg", "where to draw one mixed chaos run")
	flag.StringVar(&o.dir, "dir", "", "where to keep the runs' records and logs (default a temporary directory)")
	flag.Int64Var(&o.seed, "seed", time.Now().Unix()%100000*1000, "first seed; every run's seed is printed")
	flag.Parse()
	if *quick {
		o.trials, o.parallel, o.chaosFaults, o.chaosRuns, o.crowd, o.crowdFaults = 2, 2, 4, 2, 8, 2
		o.steady, o.scaleMutexes, o.scaleSteady = 30*time.Second, 50, 10*time.Second
	}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "bench-")
		check(err)
		o.dir = d
	}
	o.commit = revision()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	doc, err := run(ctx, o)
	check(err)
	doc = strings.Replace(doc, "{{ELAPSED}}", time.Since(start).Round(time.Second).String(), 1)
	fmt.Print(doc)
	check(os.WriteFile(o.out, []byte(doc), 0o644))
	fmt.Fprintln(os.Stderr, "bench: wrote", o.out)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// batch is the runs of one scenario and algorithm.
type batch struct {
	name, algo string
	reports    []chaos.Report
	dirs       []string
	err        error
}

// runBatch runs `runs` chaos runs in parallel with `faults` faults in total.
func runBatch(ctx context.Context, o options, name, algo string, kinds []string, runs, faults, contenders int, d time.Duration, seed int64) *batch {
	b := &batch{name: name, algo: algo}
	b.reports = make([]chaos.Report, runs)
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i := range runs {
		dir := filepath.Join(o.dir, fmt.Sprintf("%s-%s-%d", name, algo, i))
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
				Seed: seed + int64(i), Contenders: contenders, Duration: d, MaxFaults: n, Kinds: kinds, Algo: algo,
				Dir: dir, Progress: os.Stderr,
			})
		}()
	}
	wg.Wait()
	b.err = errors.Join(errs...)
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

func run(ctx context.Context, o options) (string, error) {
	var doc strings.Builder
	seed := o.seed
	nextSeed := func() int64 { seed += 100; return seed }
	say := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }
	libFaults := 0

	// 1. Failover, library and baseline side by side, one fault kind at a
	// time. The runs of both algorithms go in parallel.
	scenarios := []scenario{
		{"graceful handover (leader's context cancelled by SIGTERM -> next leader's func starts)", chaos.FaultGraceful},
		{"crash failover (leader SIGKILLed -> next leader's func starts)", chaos.FaultKill},
		{"partition failover (leader's network blackholed -> next leader's func starts)", chaos.FaultBlackhole},
	}
	results := map[string]map[string]*batch{}
	for _, sc := range scenarios {
		say("scenario %s: %d trials per algorithm, %d runs each in parallel", sc.kind, o.trials, o.parallel)
		results[sc.kind] = map[string]*batch{}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, algo := range []string{chaos.AlgoLibrary, chaos.AlgoBaseline} {
			s := nextSeed()
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := runBatch(ctx, o, sc.kind, algo, []string{sc.kind}, o.parallel, o.trials, 3, 30*time.Minute, s)
				mu.Lock()
				results[sc.kind][algo] = b
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, b := range results[sc.kind] {
			if b.err != nil {
				return "", fmt.Errorf("%s %s: %w", b.name, b.algo, b.err)
			}
		}
		libFaults += len(results[sc.kind][chaos.AlgoLibrary].faults())
	}

	// 2. Requests per hour, counted, in a fault-free period; and the crowd:
	// many contenders on one blob, with kills and graceful handovers.
	say("steady state %v for request counts; %d contenders on one blob", o.steady, o.crowd)
	var steady [2]*batch
	var crowd *batch
	var wg sync.WaitGroup
	for i, algo := range []string{chaos.AlgoLibrary, chaos.AlgoBaseline} {
		s := nextSeed()
		wg.Add(1)
		go func() {
			defer wg.Done()
			steady[i] = runBatch(ctx, o, "steady", algo, nil, 1, -1, 3, o.steady, s)
		}()
	}
	cs := nextSeed()
	wg.Add(1)
	go func() {
		defer wg.Done()
		crowd = runBatch(ctx, o, "crowd", chaos.AlgoLibrary, []string{chaos.FaultKill, chaos.FaultGraceful, chaos.FaultBlackhole}, 1, o.crowdFaults, o.crowd, 30*time.Minute, cs)
	}()
	wg.Wait()
	for _, b := range []*batch{steady[0], steady[1], crowd} {
		if b.err != nil {
			return "", fmt.Errorf("%s %s: %w", b.name, b.algo, b.err)
		}
	}
	libFaults += len(crowd.faults())

	// 3. The mixed chaos runs: every fault kind.
	say("mixed chaos: %d faults over %d runs", o.chaosFaults, o.chaosRuns)
	mixed := runBatch(ctx, o, "mixed", chaos.AlgoLibrary, chaos.AllFaults, o.chaosRuns, o.chaosFaults, 5, 60*time.Minute, nextSeed())
	if mixed.err != nil {
		return "", fmt.Errorf("mixed chaos: %w", mixed.err)
	}
	libFaults += len(mixed.faults())
	if o.svg != "" && len(mixed.reports) > 0 {
		if err := os.MkdirAll(filepath.Dir(o.svg), 0o755); err != nil {
			return "", err
		}
		f, err := os.Create(o.svg)
		if err != nil {
			return "", err
		}
		werr := chaos.WriteSVG(f, mixed.reports[0])
		if err := errors.Join(werr, f.Close()); err != nil {
			return "", err
		}
	}

	// 4. Scale, in a process of its own.
	say("scale: %d mutexes, %v steady", o.scaleMutexes, o.scaleSteady)
	sr, err := runScale(ctx, o)
	if err != nil {
		return "", fmt.Errorf("scale: %w", err)
	}

	writeDoc(&doc, o, results, scenarios, steady, crowd, mixed, sr, libFaults)
	return doc.String(), nil
}

// scenario is one failover benchmark: a fault kind and what it measures.
type scenario struct{ title, kind string }

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

// requestRates returns requests per hour of the steady run's leader, and the
// mean of its followers, from the counts the contenders reported.
func requestRates(b *batch) (leader, follower float64, err error) {
	recs, err := chaos.ReadRecords(filepath.Join(b.dirs[0], "records.jsonl"))
	if err != nil {
		return 0, 0, err
	}
	rep := b.reports[0]
	if len(rep.Terms) == 0 {
		return 0, 0, errors.New("nobody led in the steady run")
	}
	lead := rep.Terms[0]
	// From 10 s after the leader started until 2 s before the run ended.
	from, to := lead.Start+int64(10*time.Second), rep.End-int64(2*time.Second)
	if lead.End != 0 {
		to = min(to, lead.End)
	}
	first, last := map[string]chaos.Record{}, map[string]chaos.Record{}
	for _, r := range recs {
		if r.Kind != chaos.KindRequests || r.Mono < from || r.Mono > to {
			continue
		}
		if _, ok := first[r.Who]; !ok {
			first[r.Who] = r
		}
		last[r.Who] = r
	}
	var fs []float64
	for who, f := range first {
		l := last[who]
		if l.Mono-f.Mono < int64(30*time.Second) {
			continue
		}
		rate := float64(l.Requests-f.Requests) / float64(l.Mono-f.Mono) * float64(time.Hour)
		if who == lead.Who {
			leader = rate
		} else {
			fs = append(fs, rate)
		}
	}
	if leader == 0 || len(fs) == 0 {
		return 0, 0, errors.New("too few request counts in the steady run")
	}
	var sum float64
	for _, f := range fs {
		sum += f
	}
	return leader, sum / float64(len(fs)), nil
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func stats(ds []time.Duration) (p50, p99, mx string) {
	if len(ds) == 0 {
		return "-", "-", "-"
	}
	return secs(chaos.Percentile(ds, 50)), secs(chaos.Percentile(ds, 99)), secs(slices.Max(ds))
}

func ratio(a, b []time.Duration, p float64) string {
	x, y := chaos.Percentile(a, p), chaos.Percentile(b, p)
	if x <= 0 || y <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f×", y.Seconds()/x.Seconds())
}

func writeDoc(w io.Writer, o options, results map[string]map[string]*batch, scenarios []scenario,
	steady [2]*batch, crowd, mixed *batch, sr scale.Result, libFaults int) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Benchmarks\n\n")
	p("Produced by `go run ./internal/tools/bench/cmd/bench` (%s), in {{ELAPSED}}, on %s.\n\n", strings.Join(os.Args[1:], " "), time.Now().UTC().Format("2006-01-02"))
	p("Machine: %s, %d cores, %s. %s, %s, Azurite %s.\n\n", cpuModel(), runtime.NumCPU(), memTotal(), runtime.Version(), nodeVersion(), azurite.Version)
	p("Module versions: %s. Commit: %s.\n\n", depVersions(), o.commit)
	p("Settings: the library's defaults (lease 15 s, renew every 5 s, stop margin 3 s, follower retry every 2 s, request timeout 4 s); ")
	p("the baseline is the reference C# sample's algorithm (`internal/tools/baseline`: lease 15 s, renew every 10 s, acquire retry every 20 s, ")
	p("the SDK's default retries, the leader task cancelled only when a renew call fails). Every trial is a fault injected by the chaos ")
	p("harness (`internal/tools/chaos`) into contenders running as separate processes against a local Azurite, each behind its own ")
	p("toxiproxy; %d runs of each algorithm go in parallel, each with its own Azurite and 3 contenders. Times are between ", o.parallel)
	p("CLOCK_MONOTONIC stamps written by the processes themselves. Percentiles are nearest-rank: with up to 100 trials, p99 is the maximum.\n\n")

	p("## Failover\n\n")
	p("| scenario | algorithm | faults | no successor | p50 | p99 | max | overlaps |\n|---|---|---|---|---|---|---|---|\n")
	for _, sc := range scenarios {
		for _, algo := range []string{chaos.AlgoLibrary, chaos.AlgoBaseline} {
			b := results[sc.kind][algo]
			p50, p99, mx := stats(b.gaps())
			p("| %s | %s | %d | %d | %s | %s | %s | %d |\n", sc.title, algo, len(b.faults()), b.missed(), p50, p99, mx, b.overlaps())
		}
	}
	lm := results[chaos.FaultBlackhole][chaos.AlgoLibrary].margins()
	bm := results[chaos.FaultBlackhole][chaos.AlgoBaseline].margins()
	p("\n**Stop margin in the partition trials**: how long before its lease could expire on the server the cut-off leader's func returned ")
	p("(negative: it kept acting after another instance could lead).\n\n")
	p("| algorithm | trials | min | p50 | max |\n|---|---|---|---|---|\n")
	for _, row := range []struct {
		algo string
		ms   []time.Duration
	}{{chaos.AlgoLibrary, lm}, {chaos.AlgoBaseline, bm}} {
		if len(row.ms) == 0 {
			p("| %s | 0 | - | - | - |\n", row.algo)
			continue
		}
		p("| %s | %d | %s | %s | %s |\n", row.algo, len(row.ms), secs(slices.Min(row.ms)), secs(chaos.Percentile(row.ms, 50)), secs(slices.Max(row.ms)))
	}
	p("\n**Baseline / library** (how many times longer the baseline is leaderless):\n\n| scenario | p50 | p99 |\n|---|---|---|\n")
	for _, sc := range scenarios {
		l, b := results[sc.kind][chaos.AlgoLibrary].gaps(), results[sc.kind][chaos.AlgoBaseline].gaps()
		p("| %s | %s | %s |\n", sc.kind, ratio(l, b, 50), ratio(l, b, 99))
	}

	p("\n## Requests per hour\n\nCounted by a pipeline policy in each contender (every HTTP request, retries included) over %v without faults, 3 contenders.\n\n", o.steady)
	p("| algorithm | leader | follower (mean) |\n|---|---|---|\n")
	for _, b := range steady {
		l, f, err := requestRates(b)
		if err != nil {
			p("| %s | %v | |\n", b.algo, err)
			continue
		}
		p("| %s | %.0f | %.0f |\n", b.algo, l, f)
	}

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

	p("\n**%d contenders on one blob** (separate processes), %d faults (kill, graceful, blackhole of the leader):\n\n", o.crowd, len(crowd.faults()))
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

	p("\n## Chaos\n\n%d mixed runs of 5 contenders, every fault kind drawn at random (seeds", len(mixed.reports))
	for _, r := range mixed.reports {
		p(" %d", r.Seed)
	}
	p("; replay one with `go run ./internal/tools/chaos/cmd/chaos -seed N -faults %d -duration 60m`).\n\n", (o.chaosFaults+o.chaosRuns-1)/o.chaosRuns)
	p("| fault | injected | leadership moved | gap p50 | gap max | stop margin min |\n|---|---|---|---|---|---|\n")
	byKind := map[string][]chaos.FaultResult{}
	for _, f := range mixed.faults() {
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
	for _, r := range mixed.reports {
		for _, wk := range r.Frozen {
			wakes = append(wakes, wk.AfterCont)
		}
		live += len(r.Liveness)
	}
	// One forgotten lease can overlap more than one successor term; count
	// the leases, and the pairs apart.
	amnesia, pairs := 0, 0
	for _, r := range mixed.reports {
		forgotten := map[chaos.TermSpan]bool{}
		for _, o := range r.Amnesia {
			forgotten[o.A] = true
		}
		amnesia += len(forgotten)
		pairs += len(r.Amnesia)
	}
	p("\nOverlaps: %d. Liveness violations (no leader within lease + retry interval + 5 s of a fault healing): %d.\n", mixed.overlaps(), live)
	if amnesia > 0 {
		p("Apart from those: %d times Azurite came back from a restart without a lease it had granted (it saves its data to disk only every few seconds), ", amnesia)
		p("another instance took it while its holder still led (%d pairs of terms ran together), and the holder stopped at its next renewal. ", pairs)
		p("Azure Storage does not lose acknowledged writes; no client-side algorithm can prevent this, and the terms (fencing tokens) still increased.\n")
	}
	if len(wakes) > 0 {
		p("A leader frozen by SIGSTOP across its deadline returned %v at most after SIGCONT (%d cases): the time to deliver its cancelled context.\n",
			slices.Max(wakes).Round(time.Millisecond), len(wakes))
	}
	p("\nIn all, %d faults were injected into the library's contenders in this run (failover trials, crowd and chaos), with %d overlaps.\n",
		libFaults, results[chaos.FaultGraceful][chaos.AlgoLibrary].overlaps()+results[chaos.FaultKill][chaos.AlgoLibrary].overlaps()+
			results[chaos.FaultBlackhole][chaos.AlgoLibrary].overlaps()+crowd.overlaps()+mixed.overlaps())
	if o.svg != "" {
		p("\n![Timeline of a chaos run](%s)\n", o.svg)
	}
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
		case "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob", "github.com/Azure/azure-sdk-for-go/sdk/azcore", "github.com/Shopify/toxiproxy/v2":
			vs = append(vs, d.Path+" "+d.Version)
		}
	}
	return strings.Join(vs, ", ")
}

// revision is the commit the binary was built from, as go build stamps it,
// or else (GOFLAGS=-buildvcs=false) the work tree's, as git tells it.
func revision() string {
	rev, modified := "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, st := range bi.Settings {
			switch {
			case st.Key == "vcs.revision" && len(st.Value) >= 7:
				rev = st.Value[:7]
			case st.Key == "vcs.modified":
				modified = st.Value == "true"
			}
		}
	}
	if rev == "" {
		out, err := exec.Command("git", "rev-parse", "--short=7", "HEAD").Output()
		if err != nil {
			return "unknown"
		}
		rev = strings.TrimSpace(string(out))
		status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
		modified = err != nil || len(strings.TrimSpace(string(status))) > 0
	}
	if modified {
		return rev + " (with uncommitted changes)"
	}
	return rev
}
