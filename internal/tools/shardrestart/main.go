// Command shardrestart measures a ShardOwner instance restarted in place, as
// a crash loop, an OOM kill or a StatefulSet pod's restart does, with
// WithLeaseIDFile (static membership) and without it. It starts a local
// Azurite (or uses the one LEADERELECTION_AZURITE_URL names), runs
// -instances - 1 owners in this process and one as a child process (this
// executable again), all over the same -shards shards with the default
// timings, and restarts the child -restarts times with the file and
// -baseline times without, alternating SIGKILL and SIGTERM. For each
// restart it measures how long after the new process was started every
// shard the old one held runs again, how long each of those shards idled,
// and how many shard funcs started elsewhere. It prints a Markdown section
// and, with -out, replaces that section in the file (BENCHMARKS.md).
//
//	go run ./internal/tools/shardrestart -out BENCHMARKS.md
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/buildinfo"
)

// The child is this executable again, with these variables set.
const (
	envChild      = "SHARDRESTART_CHILD"
	envFile       = "SHARDRESTART_LEASE_ID_FILE" // empty: no file
	envConnection = "SHARDRESTART_CONNECTION_STRING"
	envContainer  = "SHARDRESTART_CONTAINER"
	envPrefix     = "SHARDRESTART_PREFIX"
	envShards     = "SHARDRESTART_SHARDS"
)

// heading starts the section this command writes.
const heading = "## ShardOwner restarted in place"

func main() {
	shards := flag.Int("shards", 1000, "shards in the set")
	instances := flag.Int("instances", 4, "instances, the restarted one included")
	restarts := flag.Int("restarts", 20, "restarts with the lease ID file")
	baseline := flag.Int("baseline", 4, "restarts without it")
	out := flag.String("out", "", "Markdown file whose section to replace (or append to); empty: print only")
	flag.Parse()
	var err error
	if os.Getenv(envChild) == "1" {
		err = runChild()
	} else {
		err = run(*shards, *instances, *restarts, *baseline, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shardrestart:", err)
		os.Exit(1)
	}
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("shard-%05d", i)
	}
	return out
}

// logger logs warnings, or with SHARDRESTART_LOG=info (or debug) more.
func logger() *slog.Logger {
	level := slog.LevelWarn
	_ = level.UnmarshalText([]byte(os.Getenv("SHARDRESTART_LOG")))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// runChild is the restarted instance: it prints "RUN <shard> <unix ns>" as a
// shard func starts and "END <shard> <unix ns>" as it returns, and runs
// until killed, or until SIGTERM ends its Run.
func runChild() error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	n, err := strconv.Atoi(os.Getenv(envShards))
	if err != nil {
		return err
	}
	s := leaderelection.BlobSettings{
		ConnectionString: os.Getenv(envConnection),
		Container:        os.Getenv(envContainer),
		Blob:             os.Getenv(envPrefix),
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	say := func(word, shard string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s %s %d\n", word, shard, time.Now().UnixNano())
		_ = w.Flush()
	}
	opts := []leaderelection.Option{leaderelection.WithIdentity("restarted"), leaderelection.WithLogger(logger())}
	if f := os.Getenv(envFile); f != "" {
		opts = append(opts, leaderelection.WithLeaseIDFile(f))
	}
	o, err := leaderelection.NewShardOwner(s, names(n), func(ctx context.Context, shard string) error {
		say("RUN", shard)
		<-ctx.Done()
		say("END", shard)
		return nil
	}, opts...)
	if err != nil {
		return err
	}
	err = o.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// event is a shard func's start or end, on one instance.
type event struct {
	who   string
	shard string
	start bool
	at    time.Time
}

// fleet tracks every shard func of every instance.
type fleet struct {
	mu      sync.Mutex
	running map[string]string // shard -> who runs it
	twice   int               // starts of a shard already running elsewhere
	events  []event
	changed time.Time // last start or end
}

func (f *fleet) note(e event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.start {
		if w, ok := f.running[e.shard]; ok && w != e.who {
			f.twice++
		}
		f.running[e.shard] = e.who
	} else if f.running[e.shard] == e.who {
		delete(f.running, e.shard)
	}
	f.events = append(f.events, e)
	f.changed = time.Now()
}

// held returns the shards who runs now, sorted.
func (f *fleet) held(who string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for s, w := range f.running {
		if w == who {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// settled reports whether every shard runs, who holds share of them, and
// nothing started or ended for quiet.
func (f *fleet) settled(n int, who string, share int, quiet time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.running) != n || time.Since(f.changed) < quiet {
		return false
	}
	c := 0
	for _, w := range f.running {
		if w == who {
			c++
		}
	}
	return c >= share-1 && c <= share+1
}

func (f *fleet) since(t time.Time) []event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []event
	for _, e := range f.events {
		if !e.at.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// child is the restarted instance's process.
type child struct {
	who  string
	cmd  *exec.Cmd
	done chan struct{} // its stdout closed
}

func spawn(exe, who string, env []string, fl *fleet) (*child, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = procAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{who: who, cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 {
				continue
			}
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			fl.note(event{who: who, shard: f[1], start: f[0] == "RUN", at: time.Unix(0, ns)})
		}
	}()
	return c, nil
}

// stop ends the process with sig and reaps it; with SIGKILL its funcs end
// with it, and their ends are noted at that moment.
func (c *child) stop(sig syscall.Signal, fl *fleet) error {
	at := time.Now()
	if err := c.cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-c.done:
	case <-time.After(2 * time.Minute):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	_ = c.cmd.Wait()
	if sig == syscall.SIGKILL {
		for _, s := range fl.held(c.who) {
			fl.note(event{who: c.who, shard: s, at: at})
		}
	}
	if left := fl.held(c.who); len(left) > 0 {
		return fmt.Errorf("%s exited with %d shard funcs not seen to return", c.who, len(left))
	}
	return nil
}

// restart is one restart's measurements.
type restart struct {
	file    bool
	sig     syscall.Signal
	held    int
	all     time.Duration   // new process started -> every shard the old one held runs again (anywhere)
	idle    []time.Duration // for each of them: its func's end on the old process -> its next start
	away    int             // of them, how many started elsewhere than on the new process
	starts  int             // shard func starts from the stop until settled
	resumed int             // of the shards the old process held, how many the new one runs once settled
	stopped time.Duration   // the signal -> the old process reaped
	floor   time.Duration   // the floor's work, measured after this restart (see floor.go)
}

func run(n, instances, restarts, baseline int, out string) error {
	if instances < 2 || n < instances || restarts < 0 || baseline < 0 {
		return fmt.Errorf("need -instances >= 2, -shards >= -instances, -restarts and -baseline >= 0")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	began := time.Now()
	conn, stopAzurite, err := azurite.Endpoint(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = stopAzurite() }()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "shardrestart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var all []restart
	for _, file := range []bool{true, false} {
		count := restarts
		if !file {
			count = baseline
		}
		if count == 0 {
			continue
		}
		rs, err := phase(ctx, exe, conn, dir, n, instances, count, file)
		if err != nil {
			return err
		}
		all = append(all, rs...)
	}
	pub := publication(all, n, instances, time.Since(began))
	fmt.Print(pub.Sections[0])
	if out != "" {
		return benchdoc.Publish(out, pub)
	}
	return nil
}

// publication is the command's section of BENCHMARKS.md and its row of the
// summary (the restarts by SIGKILL with the file), which replaces its row
// in place.
func publication(rs []restart, n, instances int, took time.Duration) benchdoc.Publication {
	withFile := 0
	for _, r := range rs {
		if r.file {
			withFile++
		}
	}
	g := statsOf(selectRestarts(rs, true, syscall.SIGKILL))
	row := fmt.Sprintf("| ShardOwner restarted in place with `WithLeaseIDFile`: its shards all running again | %d shards: p50 %s, p99 %s (SIGKILL; target 1 s at p99) | "+
		"%d restarts | %s: %s | %s | `go run ./internal/tools/shardrestart -restarts %d -baseline %d -out BENCHMARKS.md`, [ShardOwner restarted in place](#shardowner-restarted-in-place) |",
		g.held, secs(pct(g.alls, 50)), secs(pct(g.alls, 99)), g.n, g.floorCol, g.ratioCol, buildinfo.Revision(), withFile, len(rs)-withFile)
	return benchdoc.Publication{Sections: []string{report(rs, n, instances, took)}, Rows: []string{row}}
}

// selectRestarts are the restarts with the file or without, by sig.
func selectRestarts(rs []restart, file bool, sig syscall.Signal) []restart {
	var sel []restart
	for _, r := range rs {
		if r.file == file && r.sig == sig {
			sel = append(sel, r)
		}
	}
	return sel
}

// groupStats is what the table says of a group of restarts.
type groupStats struct {
	n, held            int
	alls, idle         []time.Duration
	away, starts, back []int
	floorCol, ratioCol string
}

func statsOf(sel []restart) groupStats {
	g := groupStats{n: len(sel), floorCol: "—", ratioCol: "—"}
	if len(sel) == 0 {
		return g
	}
	var floors []time.Duration
	var ratios []float64
	var held []int
	for _, r := range sel {
		g.alls = append(g.alls, r.all)
		if r.floor > 0 {
			floors = append(floors, r.floor)
			ratios = append(ratios, float64(r.all)/float64(r.floor))
		}
		g.idle = append(g.idle, r.idle...)
		held, g.away, g.starts, g.back = append(held, r.held), append(g.away, r.away), append(g.starts, r.starts), append(g.back, r.resumed)
	}
	g.held = median(held)
	if len(floors) > 0 {
		slices.Sort(ratios)
		g.floorCol = secs(pct(floors, 50))
		g.ratioCol = fmt.Sprintf("%.2f× [%.2f–%.2f]", ratios[(len(ratios)-1)/2], ratios[0], ratios[len(ratios)-1])
	}
	return g
}

// phase runs a fleet on a prefix of its own and restarts its child count
// times, alternating SIGKILL and SIGTERM, with the lease ID file or without.
func phase(ctx context.Context, exe, conn, dir string, n, instances, count int, file bool) ([]restart, error) {
	container, prefix := "shardrestart", fmt.Sprintf("fleet-%d", time.Now().UnixNano())
	s := leaderelection.BlobSettings{ConnectionString: conn, Container: container, Blob: prefix}
	fl := &fleet{running: map[string]string{}}
	octx, stopOwners := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopOwners(); wg.Wait() }()
	for i := 1; i < instances; i++ {
		who := fmt.Sprintf("o%d", i)
		o, err := leaderelection.NewShardOwner(s, names(n), func(ctx context.Context, shard string) error {
			fl.note(event{who: who, shard: shard, start: true, at: time.Now()})
			<-ctx.Done()
			fl.note(event{who: who, shard: shard, at: time.Now()})
			return nil
		}, leaderelection.WithIdentity(who), leaderelection.WithLogger(logger()))
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := o.Run(octx); err != nil && !errors.Is(err, context.Canceled) {
				fmt.Fprintln(os.Stderr, who, "ended:", err)
			}
		}()
	}
	path := ""
	if file {
		path = filepath.Join(dir, fmt.Sprintf("session-%d", time.Now().UnixNano()))
	}
	env := []string{envChild + "=1", envFile + "=" + path, envConnection + "=" + conn, envContainer + "=" + container,
		envPrefix + "=" + prefix, envShards + "=" + strconv.Itoa(n)}
	gen := 1
	c, err := spawn(exe, "p1", env, fl)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.stop(syscall.SIGKILL, fl) }()
	share := n / instances
	var fl0 *floor
	if file {
		if fl0, err = newFloor(ctx, conn, n, share); err != nil {
			return nil, err
		}
	}
	settle := func() error {
		deadline := time.Now().Add(5 * time.Minute)
		for !fl.settled(n, c.who, share, 3*time.Second) {
			if time.Now().After(deadline) {
				return fmt.Errorf("the fleet did not settle within 5 minutes")
			}
			if !sleep(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
		}
		return nil
	}
	if err := settle(); err != nil {
		return nil, err
	}
	var rs []restart
	for i := 0; i < count; i++ {
		r := restart{file: file, sig: syscall.SIGKILL}
		if i%2 == 1 {
			r.sig = syscall.SIGTERM
		}
		held := fl.held(c.who)
		r.held = len(held)
		stopAt := time.Now()
		if err := c.stop(r.sig, fl); err != nil {
			return nil, err
		}
		r.stopped = time.Since(stopAt)
		// The old process's funcs' ends.
		ended := map[string]time.Time{}
		for _, e := range fl.since(stopAt.Add(-time.Minute)) {
			if e.who == c.who && !e.start {
				ended[e.shard] = e.at
			}
		}
		gen++
		started := time.Now()
		c, err = spawn(exe, fmt.Sprintf("p%d", gen), env, fl)
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(5 * time.Minute)
		for {
			running := 0
			for _, s := range held {
				fl.mu.Lock()
				_, ok := fl.running[s]
				fl.mu.Unlock()
				if ok {
					running++
				}
			}
			if running == len(held) {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("restart %d: %d of %d shards not running again after 5 minutes", i+1, len(held)-running, len(held))
			}
			if !sleep(ctx, 5*time.Millisecond) {
				return nil, ctx.Err()
			}
		}
		r.all = time.Since(started)
		if err := settle(); err != nil {
			return nil, err
		}
		firstStart := map[string]event{}
		for _, e := range fl.since(stopAt) {
			if !e.start {
				continue
			}
			r.starts++
			if _, ok := firstStart[e.shard]; !ok {
				firstStart[e.shard] = e
			}
		}
		away := map[string]bool{}
		for _, e := range fl.since(stopAt) {
			if e.start && e.who != c.who && slices.Contains(held, e.shard) {
				away[e.shard] = true
			}
		}
		r.away = len(away)
		for _, s := range held {
			if e, ok := firstStart[s]; ok {
				r.idle = append(r.idle, e.at.Sub(ended[s]))
			}
		}
		if fl0 != nil {
			if r.floor, err = fl0.once(ctx); err != nil {
				return nil, err
			}
		}
		now := fl.held(c.who)
		for _, s := range held {
			if _, ok := slices.BinarySearch(now, s); ok {
				r.resumed++
			}
		}
		fmt.Fprintf(os.Stderr, "file %t, %v: %d shards, all running again %v after the new process started (floor %v); idle p50 %v p99 %v; %d ran elsewhere; %d starts; %d back on it\n",
			file, r.sig, r.held, r.all.Round(time.Millisecond), r.floor.Round(time.Millisecond), pct(r.idle, 50).Round(time.Millisecond), pct(r.idle, 99).Round(time.Millisecond), r.away, r.starts, r.resumed)
		rs = append(rs, r)
	}
	fl.mu.Lock()
	twice := fl.twice
	fl.mu.Unlock()
	if twice > 0 {
		return nil, fmt.Errorf("%d shard funcs started while the shard ran elsewhere", twice)
	}
	return rs, nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func report(rs []restart, n, instances int, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", heading)
	withFile, without := 0, 0
	for _, r := range rs {
		if r.file {
			withFile++
		} else {
			without++
		}
	}
	fmt.Fprintf(&b, "Produced by `go run ./internal/tools/shardrestart -restarts %d -baseline %d -out BENCHMARKS.md` in %v, on %s; commit %s; %s, %d cores, %s.\n\n",
		withFile, without, took.Round(time.Second), time.Now().Format("2006-01-02"), buildinfo.Revision(), runtime.Version(), runtime.NumCPU(), runtime.GOARCH)
	fmt.Fprintf(&b, "%d instances run %d shards against a local Azurite, with the default timings (lease 15 s): %d in the measuring process, "+
		"and one as a child process that is restarted in place, alternately by SIGKILL and by SIGTERM (its Run cancelled, then the process exits), "+
		"and started again at once, with `WithLeaseIDFile` and, for comparison, without it. Each restart waits until the fleet has settled again "+
		"(every shard running, the restarted instance at its share, nothing started or stopped for 3 s). "+
		"*All running again* is from starting the new process to the moment every shard the old process held runs again, anywhere; "+
		"*idle* is, for each of those shards, from its func's return on the old process (SIGKILL: the kill) to its next start; "+
		"*ran elsewhere* counts those that started on another instance; *starts* counts every shard func start from the stop until settled "+
		"(with nothing moving, it equals the shards held). "+
		"The *floor*, measured after each restart with the file, is the least work any design must do for a restarted instance to run its shards again "+
		"fenced against what its dead predecessor left in flight, under a new term: one read of a small blob that names its shards (the session's list), then for each of "+
		"the instance's shards a change of its lease's ID and a write of the next term, If-Match the ETag the change answered with, %d at a time, from a new connection pool, "+
		"done directly with the SDK against the same Azurite, in a container of %d shard blobs (the library does just this, after the session's own read and write, "+
		"then lists the shards for any its list did not name).\n\n", instances, n, instances-1, floorParallel, n)
	b.WriteString("| file | signal | restarts | shards held (median) | all running again p50 | p99 | max | floor p50 | ratio to the floor, median [range] | idle p50 | idle p99 | ran elsewhere (median, max) | starts (median) | back on the instance (median) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, file := range []bool{true, false} {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
			g := statsOf(selectRestarts(rs, file, sig))
			if g.n == 0 {
				continue
			}
			name := "none"
			if file {
				name = "`WithLeaseIDFile`"
			}
			sigName := "SIGKILL"
			if sig == syscall.SIGTERM {
				sigName = "SIGTERM"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %d, %d | %d | %d |\n", name, sigName, g.n, g.held,
				secs(pct(g.alls, 50)), secs(pct(g.alls, 99)), secs(pct(g.alls, 100)), g.floorCol, g.ratioCol, secs(pct(g.idle, 50)), secs(pct(g.idle, 99)),
				median(g.away), slices.Max(g.away), median(g.starts), median(g.back))
		}
	}
	b.WriteString("\nPercentiles are nearest-rank over the restarts (all running again) or over every shard of every restart (idle); with fewer than 100 restarts, p99 of the first is the maximum.\n")
	return b.String()
}

func median(v []int) int {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// pct is the nearest-rank percentile p of d, 0 if empty.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)]
}

func secs(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
