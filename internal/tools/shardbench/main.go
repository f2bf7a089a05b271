// Command shardbench measures leaderelection.ShardOwner at scale, side by
// side with what it replaces, one BlobDistributedMutex per shard: instance
// processes (this executable again) against one local Azurite, driven by the
// shardchaos harness. It measures a cold start, a new instance joining, a
// SIGKILL, the steady state (requests, CPU, memory per instance) at two
// numbers of shards, and a chaos run of instance faults checked shard by
// shard; it prints a Markdown section and, with -out, replaces that section
// in the file (BENCHMARKS.md) or appends it; with -svg it draws how many
// shards each instance ran through the cold start, the join and the kill.
//
//	go run ./internal/tools/shardbench -out BENCHMARKS.md -svg docs/shards-timeline.svg
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/buildinfo"
	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/procstat"
	"github.com/blobelect/leaderelection/internal/tools/shardchaos"
)

// heading starts this command's section of BENCHMARKS.md.
const heading = "## Shard ownership: ShardOwner, side by side with a mutex per shard"

func main() {
	shardchaos.MaybeInstance()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shardbench:", err)
		os.Exit(1)
	}
}

type config struct {
	instances, shards, small, baseline, faults, repeat int
	steady                                             time.Duration
	dir, out, svg                                      string
}

func run() error {
	var c config
	flag.IntVar(&c.instances, "instances", 10, "instance processes")
	flag.IntVar(&c.shards, "shards", 10000, "shards of the main run")
	flag.IntVar(&c.small, "small", 1000, "shards of the second steady-state run (0: skip)")
	flag.IntVar(&c.baseline, "baseline", 100, "shards of the mutex-per-shard run (0: skip): each is a mutex on every instance")
	flag.IntVar(&c.faults, "faults", 300, "instance faults of the chaos run (0: skip)")
	flag.IntVar(&c.repeat, "repeat", 3, "runs of the main scenarios (cold start, join, kill, SIGTERM), each with its floors")
	flag.DurationVar(&c.steady, "steady", 3*time.Minute, "steady-state measuring window")
	flag.StringVar(&c.dir, "dir", "", "where runs keep their records and logs (default: a temporary directory)")
	flag.StringVar(&c.out, "out", "", "Markdown file whose section to replace or append (e.g. BENCHMARKS.md)")
	flag.StringVar(&c.svg, "svg", "", "where to write the timeline of the main run")
	flag.Parse()
	if c.dir == "" {
		d, err := os.MkdirTemp("", "shardbench-")
		if err != nil {
			return err
		}
		c.dir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	progress("records and logs in %s", c.dir)

	var runs []*result
	for i := range c.repeat {
		progress("run %d of %d", i+1, c.repeat)
		r, err := ownerRun(ctx, c, c.shards, true, i+1)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	main := runs[0]
	var err error
	var small, base *result
	if c.small > 0 {
		if small, err = ownerRun(ctx, c, c.small, false, 0); err != nil {
			return err
		}
	}
	if c.baseline > 0 {
		if base, err = mutexRun(ctx, c); err != nil {
			return err
		}
	}
	var ch *shardchaos.ChaosResult
	if c.faults > 0 {
		if ch, err = chaosRun(ctx, c); err != nil {
			return err
		}
	}
	pub := publication(c, main, small, base, ch, runs, time.Since(began))
	fmt.Println(pub.Sections[0])
	if c.svg != "" {
		svg := shardchaos.OwnershipSVG(main.records, fmt.Sprintf("ShardOwner: %d shards on %d instance processes, one more joins, one is SIGKILLed", c.shards, c.instances), main.markers)
		if err := os.WriteFile(c.svg, svg, 0o644); err != nil {
			return err
		}
	}
	if c.out != "" {
		return benchdoc.Publish(c.out, pub)
	}
	return nil
}

// publication is the command's section of BENCHMARKS.md. (Its rows of the
// summary are written by hand: they quote the repeated runs' figures in
// words of their own.)
func publication(c config, main, small, base *result, ch *shardchaos.ChaosResult, runs []*result, took time.Duration) benchdoc.Publication {
	return benchdoc.Publication{Sections: []string{report(c, main, small, base, ch, took) + repeated(c, runs)}}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s shardbench: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// result is what one run of instances measured.
type result struct {
	shards, instances int
	cold              time.Duration // until every shard ran, spread within one
	coldStarts        int           // shard func starts until then
	coldSpread        int           // for the mutexes: the spread when every shard ran
	coldHolders       int           // for the mutexes: instances that ran a shard then
	join              time.Duration // until the new instance held its share, spread within one
	joinShare         int
	joinMoved         int             // shard func starts from the join until then
	joinGaps          []time.Duration // for each shard handed over: from its func's return to its next start
	killHeld          int             // shards the killed instance ran
	killAll           time.Duration   // until every shard it ran ran elsewhere
	killSpread        time.Duration   // until the spread was within one again
	termHeld          int             // shards the SIGTERMed instance ran
	termAll           time.Duration   // until every shard it ran ran elsewhere
	termGaps          []time.Duration // for each of them: from its func's return to its start elsewhere
	floorCold         time.Duration   // the floors, measured against the same Azurite after the scenarios (floor.go)
	floorJoin         time.Duration
	floorKill         time.Duration
	steady            steady
	records           []shardchaos.Record
	markers           []shardchaos.Marker
}

// steady is the steady state's cost per instance.
type steady struct {
	window     time.Duration
	reqPerHour []float64
	cpuPercent []float64 // of one core
	rssMiB     []float64
	peakMiB    []float64
	azurite    float64   // Azurite's CPU, percent of one core
	azuriteBy  []float64 // and in each sixth of the window, in order
}

var defaultTimings = shardchaos.Timings{} // the library's defaults: lease 15 s, renew 5 s, retry 2 s, stop margin 3 s

// ownerRun runs ShardOwner instances: a cold start, a join (full only), the
// steady state, and a SIGKILL (full only). A repeated run (run > 0) keeps its
// records and logs in a directory of its own.
func ownerRun(ctx context.Context, c config, shards int, full bool, run int) (*result, error) {
	name := fmt.Sprintf("owner-%d", shards)
	if run > 0 {
		name = fmt.Sprintf("owner-%d-run%d", shards, run)
	}
	progress("%s: %d instances, %d shards", name, c.instances, shards)
	h, err := shardchaos.Start(ctx, shardchaos.Config{Shards: shards, Timings: defaultTimings, Dir: filepath.Join(c.dir, name), CountEvery: 5 * time.Second, Direct: true})
	if err != nil {
		return nil, err
	}
	r := &result{shards: shards, instances: c.instances}
	defer func() {
		if err := h.Close(); err != nil {
			progress("%s: closing: %v", name, err)
		}
		r.records = h.Records()
	}()
	mark := func(label string) int64 {
		m := h.Note("phase", "", "", label)
		r.markers = append(r.markers, shardchaos.Marker{Mono: m, Label: label})
		return m
	}
	t0 := mark(fmt.Sprintf("cold start: %d instances", c.instances))
	for range c.instances {
		if _, err := h.AddLane(); err != nil {
			return r, err
		}
	}
	lanes := h.Lanes()
	took, ok := h.WaitCounts(ctx, 5*time.Minute, func(c shardchaos.Counts) bool { return c.Converged(shards, lanes) })
	if !ok {
		return r, fmt.Errorf("%s: no convergence within 5 min of the cold start: %+v", name, h.State())
	}
	r.cold, r.coldStarts = took, starts(h.Records(), t0)
	progress("%s: cold start %v, %d starts", name, took.Round(time.Millisecond), r.coldStarts)

	if full {
		chaos.Sleep(ctx, 20*time.Second)
		t1 := mark(fmt.Sprintf("instance %d starts", c.instances+1))
		j, err := h.AddLane()
		if err != nil {
			return r, err
		}
		all := append(slices.Clone(lanes), j)
		took, ok := h.WaitCounts(ctx, 3*time.Minute, func(c shardchaos.Counts) bool { return c.Converged(shards, all) })
		if !ok {
			return r, fmt.Errorf("%s: no convergence within 3 min of the join: %+v", name, h.State())
		}
		r.join, r.joinShare, r.joinMoved = took, h.State().Owned[j], starts(h.Records(), t1)
		r.joinGaps = gaps(h.Records(), t1)
		progress("%s: join %v, share %d, %d moved", name, took.Round(time.Millisecond), r.joinShare, r.joinMoved)
		lanes = all
	}

	// The steady state: every instance has listed the shards once after
	// the last movement (they take turns) before the window opens.
	chaos.Sleep(ctx, 60*time.Second)
	r.steady, err = measure(ctx, h, lanes, c.steady)
	if err != nil {
		return r, err
	}
	progress("%s: steady %.0f requests/h per instance", name, mean(r.steady.reqPerHour))

	if full {
		victim := lanes[2]
		r.killHeld = h.State().Owned[victim]
		mark("SIGKILL " + victim)
		h.Kill(victim)
		rest := slices.DeleteFunc(slices.Clone(lanes), func(l string) bool { return l == victim })
		took, ok := h.WaitCounts(ctx, 3*time.Minute, func(c shardchaos.Counts) bool { return c.Running == shards && c.Owned[victim] == 0 })
		if !ok {
			return r, fmt.Errorf("%s: %s's shards did not all run elsewhere within 3 min: %+v", name, victim, h.State())
		}
		r.killAll = took
		more, ok := h.WaitCounts(ctx, 3*time.Minute, func(c shardchaos.Counts) bool { return c.Converged(shards, rest) })
		if !ok {
			return r, fmt.Errorf("%s: no convergence within 3 min of the kill: %+v", name, h.State())
		}
		r.killSpread = took + more
		progress("%s: kill: %d shards ran elsewhere %v after, spread within one %v after", name, r.killHeld, took.Round(time.Millisecond), r.killSpread.Round(time.Millisecond))
		chaos.Sleep(ctx, 20*time.Second)

		// A graceful stop: SIGTERM, as a pod's deletion does.
		leaving := rest[3]
		r.termHeld = h.State().Owned[leaving]
		t3 := mark("SIGTERM " + leaving)
		if err := h.Terminate(leaving, time.Minute); err != nil {
			return r, err
		}
		if _, ok := h.WaitCounts(ctx, 3*time.Minute, func(c shardchaos.Counts) bool { return c.Running == shards && c.Owned[leaving] == 0 }); !ok {
			return r, fmt.Errorf("%s: %s's shards did not all run elsewhere within 3 min of its SIGTERM: %+v", name, leaving, h.State())
		}
		r.termAll, r.termGaps = movedAfter(h.Records(), t3, leaving)
		progress("%s: SIGTERM: %d shards ran elsewhere %v after", name, r.termHeld, r.termAll.Round(time.Millisecond))

		// The floors, against the same Azurite, the instances idle.
		conn := azurite.ConnectionStringFor(h.Azurite().URL())
		if r.floorCold, err = coldFloor(ctx, conn, "floor-cold", shards, c.instances); err != nil {
			return r, fmt.Errorf("cold floor: %w", err)
		}
		if r.floorJoin, err = joinFloor(ctx, conn, "floor-join", r.joinShare, c.instances); err != nil {
			return r, fmt.Errorf("join floor: %w", err)
		}
		if r.floorKill, err = killFloor(ctx, conn, "floor-kill", r.killHeld, c.instances-1); err != nil {
			return r, fmt.Errorf("kill floor: %w", err)
		}
		progress("%s: floors: cold %v, join %v, kill %v", name, r.floorCold.Round(time.Millisecond), r.floorJoin.Round(time.Millisecond), r.floorKill.Round(time.Millisecond))
	}
	return r, nil
}

// mutexRun runs one BlobDistributedMutex per shard in every instance.
func mutexRun(ctx context.Context, c config) (*result, error) {
	name := fmt.Sprintf("mutex-%d", c.baseline)
	progress("%s: %d instances, %d shards, a mutex per shard in each", name, c.instances, c.baseline)
	h, err := shardchaos.Start(ctx, shardchaos.Config{Algo: shardchaos.AlgoMutex, Shards: c.baseline, Timings: defaultTimings, Direct: true,
		Dir: filepath.Join(c.dir, name), CountEvery: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	r := &result{shards: c.baseline, instances: c.instances}
	defer func() {
		if err := h.Close(); err != nil {
			progress("%s: closing: %v", name, err)
		}
	}()
	t0 := h.Note("phase", "", "", "cold start")
	for range c.instances {
		if _, err := h.AddLane(); err != nil {
			return r, err
		}
	}
	lanes := h.Lanes()
	took, ok := h.WaitCounts(ctx, 3*time.Minute, func(n shardchaos.Counts) bool { return n.Running == c.baseline && n.Doubled == 0 })
	if !ok {
		return r, fmt.Errorf("%s: not every shard ran within 3 min: %+v", name, h.State())
	}
	r.cold, r.coldStarts, r.coldSpread = took, starts(h.Records(), t0), h.State().Spread(lanes)
	for _, n := range h.State().Owned {
		if n > 0 {
			r.coldHolders++
		}
	}
	progress("%s: every shard ran after %v, spread %d", name, took.Round(time.Millisecond), r.coldSpread)
	// As long after the last movement as the full run's window opens.
	chaos.Sleep(ctx, 60*time.Second)
	if r.steady, err = measure(ctx, h, lanes, c.steady); err != nil {
		return r, err
	}
	progress("%s: steady %.0f requests/h per instance", name, mean(r.steady.reqPerHour))
	st := h.State()
	victim := lanes[0]
	for _, l := range lanes {
		if st.Owned[l] > st.Owned[victim] {
			victim = l
		}
	}
	r.killHeld = st.Owned[victim]
	h.Kill(victim)
	took, ok = h.WaitCounts(ctx, 3*time.Minute, func(n shardchaos.Counts) bool { return n.Running == c.baseline && n.Owned[victim] == 0 })
	if !ok {
		return r, fmt.Errorf("%s: %s's shards did not all run elsewhere within 3 min", name, victim)
	}
	r.killAll = took
	progress("%s: kill: %d shards ran elsewhere %v after", name, r.killHeld, took.Round(time.Millisecond))
	return r, nil
}

// chaosRun injects instance faults into ShardOwner processes, several at
// once, and checks every shard's runs.
func chaosRun(ctx context.Context, c config) (*shardchaos.ChaosResult, error) {
	progress("chaos: %d faults", c.faults)
	tm := shardchaos.Timings{LeaseDuration: 4 * time.Second, RetryInterval: 500 * time.Millisecond, StopMargin: 1500 * time.Millisecond}
	res, err := shardchaos.RunChaos(ctx, shardchaos.ChaosConfig{
		Config:    shardchaos.Config{Shards: 200, Timings: tm, Dir: filepath.Join(c.dir, "chaos")},
		Instances: 5,
		Seed:      time.Now().UnixNano() % 1_000_000,
		Faults:    c.faults,
		Overlap:   true,
		Settle:    2 * time.Minute,
	})
	if err != nil {
		return &res, err
	}
	progress("chaos:\n%s", res.Summary())
	return &res, nil
}

// gaps is, for each shard whose func returned since mono and started again,
// how long it did not run.
func gaps(recs []shardchaos.Record, since int64) []time.Duration {
	ended := map[string]int64{}
	var out []time.Duration
	for _, r := range recs {
		if r.Mono < since || r.Shard == "" {
			continue
		}
		switch r.Kind {
		case chaos.KindEnd:
			ended[r.Shard] = r.Mono
		case chaos.KindStart:
			if at, ok := ended[r.Shard]; ok {
				out = append(out, time.Duration(r.Mono-at))
				delete(ended, r.Shard)
			}
		}
	}
	return out
}

// starts counts the shard func starts since mono.
func starts(recs []shardchaos.Record, since int64) int {
	n := 0
	for _, r := range recs {
		if r.Kind == chaos.KindStart && r.Mono >= since {
			n++
		}
	}
	return n
}

// measure reads, over window, each instance's requests (from its own
// counter), CPU and memory (from /proc), and Azurite's CPU.
func measure(ctx context.Context, h *shardchaos.Harness, lanes []string, window time.Duration) (steady, error) {
	s := steady{window: window}
	type sample struct {
		cpu  time.Duration
		mono int64
	}
	before := map[string]sample{}
	for _, l := range lanes {
		cpu, err := procstat.CPU(h.PID(l))
		if err != nil {
			return s, err
		}
		before[l] = sample{cpu, chaos.Mono()}
	}
	azBefore, err := procstat.CPU(h.Azurite().PID())
	if err != nil {
		return s, err
	}
	from := chaos.Mono()
	// Azurite's CPU in each sixth of the window too: whether it settles
	// as the window goes on, after the movements before it.
	azPrev, prev := azBefore, from
	for range 6 {
		if !chaos.Sleep(ctx, window/6) {
			return s, ctx.Err()
		}
		now := chaos.Mono()
		az, err := procstat.CPU(h.Azurite().PID())
		if err != nil {
			return s, err
		}
		s.azuriteBy = append(s.azuriteBy, 100*(az-azPrev).Seconds()/time.Duration(now-prev).Seconds())
		azPrev, prev = az, now
	}
	to := chaos.Mono()
	azAfter := azPrev
	s.azurite = 100 * (azAfter - azBefore).Seconds() / time.Duration(to-from).Seconds()
	recs := h.Records()
	for _, l := range lanes {
		cpu, err := procstat.CPU(h.PID(l))
		if err != nil {
			return s, err
		}
		s.cpuPercent = append(s.cpuPercent, 100*(cpu-before[l].cpu).Seconds()/time.Duration(chaos.Mono()-before[l].mono).Seconds())
		rss, peak, err := procMem(h.PID(l))
		if err != nil {
			return s, err
		}
		s.rssMiB, s.peakMiB = append(s.rssMiB, rss), append(s.peakMiB, peak)
		// The rate between the first and the last count the instance
		// reported within the window.
		var first, last *shardchaos.Record
		for i := range recs {
			r := &recs[i]
			if r.Who == l && r.Kind == chaos.KindRequests && r.Mono >= from && r.Mono <= to {
				if first == nil {
					first = r
				}
				last = r
			}
		}
		if first == nil || last == first {
			return s, fmt.Errorf("%s reported no request counts in the window", l)
		}
		s.reqPerHour = append(s.reqPerHour, float64(last.Requests-first.Requests)/time.Duration(last.Mono-first.Mono).Hours())
	}
	return s, nil
}

// procMem is a process's resident memory now and at its peak, in MiB.
func procMem(pid int) (rss, peak float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak, nil
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func span(v []float64, format string) string {
	if len(v) == 0 {
		return "-"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	return fmt.Sprintf(format+" (%s–%s)", mean(v), fmt.Sprintf(format, lo), fmt.Sprintf(format, hi))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func report(c config, main, small, base *result, ch *shardchaos.ChaosResult, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", heading)
	fmt.Fprintf(&b, "Produced by `go run ./internal/tools/shardbench -out BENCHMARKS.md -svg docs/shards-timeline.svg` in %v, on %s; commit %s; %s, %d cores, %s. "+
		"Every instance is a process of its own, against one local Azurite (in memory), on the same machine as the measuring process; "+
		"the library's default timings (session lease 15 s, renewed every 5 s, sessions listed every 2 s, stop margin 3 s). "+
		"Requests are counted in each instance by a pipeline policy (every HTTP request); CPU and memory are read from `/proc`. "+
		"Azurite serves every request on one thread: it, not the instances, sets the pace of a cold start here.\n\n",
		took.Round(time.Second), time.Now().Format("2006-01-02"), buildinfo.Revision(), runtime.Version(), runtime.NumCPU(), runtime.GOARCH)

	fmt.Fprintf(&b, "| | ShardOwner, %d shards | ShardOwner, %s shards | a BlobDistributedMutex per shard, %s shards |\n|---|---|---|---|\n",
		main.shards, smallShards(small), baseShards(base))
	row := func(name string, f func(*result) string) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, f(main), orDash(small, f), orDash(base, f))
	}
	row(fmt.Sprintf("cold start of %d instances: until every shard runs", c.instances), func(r *result) string {
		if r.coldSpread > 0 {
			return fmt.Sprintf("%s, spread %d", secs(r.cold), r.coldSpread)
		}
		return secs(r.cold) + ", spread within one"
	})
	row("shard func starts during the cold start", func(r *result) string { return fmt.Sprint(r.coldStarts) })
	row(fmt.Sprintf("instance %d starts: until it holds its share", c.instances+1), func(r *result) string {
		if r.join == 0 {
			return "-"
		}
		return fmt.Sprintf("%s (%d shards; %d moved)", secs(r.join), r.joinShare, r.joinMoved)
	})
	row(fmt.Sprintf("instance %d starts: a shard handed over does not run, from its func's return to its next start, p50 / p99 / max", c.instances+1), func(r *result) string {
		if len(r.joinGaps) == 0 {
			return "-"
		}
		return fmt.Sprintf("%s / %s / %s", secs(chaos.Percentile(r.joinGaps, 50)), secs(chaos.Percentile(r.joinGaps, 99)), secs(chaos.Percentile(r.joinGaps, 100)))
	})
	row("SIGKILL of an instance: until all its shards run elsewhere", func(r *result) string {
		if r.killAll == 0 {
			return "-"
		}
		if r.killSpread == 0 {
			return fmt.Sprintf("%s (%d shards)", secs(r.killAll), r.killHeld)
		}
		return fmt.Sprintf("%s (%d shards); spread within one after %s", secs(r.killAll), r.killHeld, secs(r.killSpread))
	})
	row("steady state: requests per hour per instance, mean (min–max)", func(r *result) string { return span(r.steady.reqPerHour, "%.0f") })
	row("steady state: CPU per instance, % of one core", func(r *result) string { return span(r.steady.cpuPercent, "%.1f") })
	row("steady state: RSS per instance, MiB (peak)", func(r *result) string {
		return fmt.Sprintf("%s (peak %.0f)", span(r.steady.rssMiB, "%.0f"), slices.Max(r.steady.peakMiB))
	})
	row("steady state: Azurite's CPU, % of one core", func(r *result) string { return fmt.Sprintf("%.1f", r.steady.azurite) })
	row("steady state: Azurite's CPU in each sixth of the window", func(r *result) string {
		var parts []string
		for _, p := range r.steady.azuriteBy {
			parts = append(parts, fmt.Sprintf("%.1f", p))
		}
		return strings.Join(parts, " ")
	})
	fmt.Fprintf(&b, "\nThe steady state is measured over %v, a minute after the last movement, with %d instances for the %d shards (after the join) and %d for the others.",
		main.steady.window, main.instances+1, main.shards, c.instances)
	if base != nil {
		per := mean(base.steady.reqPerHour) / float64(base.shards)
		fmt.Fprintf(&b, " A mutex per shard costs every instance about %.0f requests per hour per shard (a renewal every 5 s where it leads, a read every 2 s where it follows), so %d shards would cost each instance about %.1f million an hour, %.0f a second: far more than one Azurite serves, hence the %d shards measured.",
			per, main.shards, per*float64(main.shards)/1e6, per*float64(main.shards)/3600, base.shards)
		fmt.Fprintf(&b, " When every one of its shards ran (%s after the start) they ran on %s, %d apart at most: a mutex goes to whichever instance asks first, and nothing spreads them. SIGKILL of the instance running the most left its %d shards waiting for their 15 s leases.", secs(base.cold), plural(base.coldHolders), base.coldSpread, base.killHeld)
	}
	b.WriteString("\n\n")
	b.WriteString("Targets: cold start within 60 s; a new instance's share within 30 s; a SIGKILLed instance's shards elsewhere within lease + RetryInterval + 5 s = 22 s; steady requests the same at 1,000 and 10,000 shards.\n\n")

	if ch != nil {
		kinds := map[string]int{}
		for _, f := range ch.Faults {
			kinds[f.Kind]++
		}
		var wakes []time.Duration
		for _, w := range ch.Frozen {
			wakes = append(wakes, w.AfterCont)
		}
		fmt.Fprintf(&b, "**Chaos.** %d instance faults (SIGKILL %d, SIGSTOP past the lease %d, partition %d, SIGTERM %d), drawn at random and overlapping (a new one every 1 to 3 s, up to half the instances hit at once), into 5 ShardOwner processes sharing 200 shards, each behind a proxy of its own; session lease 4 s, RetryInterval 0.5 s, stop margin 1.5 s. "+
			"The chaos harness's checker, run shard by shard: **%d times two funcs of one shard ran at once**, over %d shard runs; term numbers grew on every shard (%d exceptions). "+
			"%d runs of a frozen instance still ran when another instance started the shard, and returned at most %v after SIGCONT, as the process could not act before (the same limit as the mutex). "+
			"Every run ended by its session's deadline (a partition) returned %v to %v before its session could be broken. "+
			"After the last fault every shard ran again, spread within one: %s.\n\n",
			len(ch.Faults), kinds[shardchaos.FaultKill], kinds[shardchaos.FaultFreeze], kinds[shardchaos.FaultPartition], kinds[shardchaos.FaultGraceful],
			len(ch.Overlaps), ch.Runs, len(ch.Unordered), len(ch.Frozen), chaos.Percentile(wakes, 100).Round(time.Millisecond),
			chaos.Percentile(ch.CutOffMargins, 0).Round(time.Millisecond), chaos.Percentile(ch.CutOffMargins, 100).Round(time.Millisecond),
			map[bool]string{true: "yes", false: "no"}[ch.Unsettled == 0])
	}
	b.WriteString("![Shards running on each instance](docs/shards-timeline.svg)\n")
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return "one instance"
	}
	return fmt.Sprintf("%d instances", n)
}

func smallShards(r *result) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprint(r.shards)
}

func baseShards(r *result) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprint(r.shards)
}

func orDash(r *result, f func(*result) string) string {
	if r == nil {
		return "-"
	}
	return f(r)
}

// movedAfter follows the shards whose func returned on who since mono: when
// the last of them started elsewhere, counted from mono, and each one's
// idle time.
func movedAfter(recs []shardchaos.Record, since int64, who string) (time.Duration, []time.Duration) {
	ended := map[string]int64{}
	var last int64
	var idle []time.Duration
	for _, r := range recs {
		if r.Mono < since || r.Shard == "" {
			continue
		}
		switch {
		case r.Kind == chaos.KindEnd && r.Who == who:
			ended[r.Shard] = r.Mono
		case r.Kind == chaos.KindStart && r.Who != who:
			if at, ok := ended[r.Shard]; ok {
				idle = append(idle, time.Duration(r.Mono-at))
				last = max(last, r.Mono)
				delete(ended, r.Shard)
			}
		}
	}
	if last == 0 {
		return 0, idle
	}
	return time.Duration(last - since), idle
}
