// Command rollbench measures a rolling update of a fleet of mutex
// contenders, each a process of its own (this executable again), against a
// local Azurite (or the one LEADERELECTION_AZURITE_URL names): how many times
// leadership moves, and how long the leader's work stands still in all,
// without and with WithPriority (the new version preferred). A rolling
// update here is what a Deployment with maxSurge 1 and maxUnavailable 0 does:
// for each old instance, start a new one, let it settle, then SIGTERM the
// old one and wait for it to exit. It prints a Markdown section and, with
// -out, replaces that section in the file (BENCHMARKS.md) or appends it.
//
//	go run ./internal/tools/rollbench -out BENCHMARKS.md
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
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
	"github.com/blobelect/leaderelection/internal/tools/chaos"
)

// The contender process is this executable again, with these variables set.
const (
	envIdentity   = "ROLLBENCH_IDENTITY"
	envPriority   = "ROLLBENCH_PRIORITY" // unset: no WithPriority
	envConnection = "ROLLBENCH_CONNECTION_STRING"
	envContainer  = "ROLLBENCH_CONTAINER"
)

const heading = "## Rolling update: leadership moves"

func main() {
	if id := os.Getenv(envIdentity); id != "" {
		if err := runContender(id); err != nil {
			fmt.Fprintln(os.Stderr, "rollbench contender:", err)
			os.Exit(1)
		}
		return
	}
	instances := flag.Int("instances", 5, "instances in the fleet")
	rounds := flag.Int("rounds", 3, "rolling updates per mode")
	settle := flag.Duration("settle", 3*time.Second, "how long a new instance runs before the next old one is stopped")
	out := flag.String("out", "", "Markdown file whose section to replace (or append to); empty: print only")
	flag.Parse()
	if err := run(*instances, *rounds, *settle, *out); err != nil {
		fmt.Fprintln(os.Stderr, "rollbench:", err)
		os.Exit(1)
	}
}

// runContender leads with the library's default timings until SIGTERM,
// printing "START <mono ns>" as its func starts and "END <mono ns>" as it
// returns (CLOCK_MONOTONIC: comparable across the processes).
func runContender(id string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	opts := []leaderelection.Option{leaderelection.WithIdentity(id),
		leaderelection.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	if p := os.Getenv(envPriority); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return err
		}
		opts = append(opts, leaderelection.WithPriority(n))
	}
	var mu sync.Mutex
	say := func(word string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%s %d\n", word, chaos.Mono())
	}
	m, err := leaderelection.NewBlobDistributedMutex(leaderelection.BlobSettings{
		ConnectionString: os.Getenv(envConnection), Container: os.Getenv(envContainer), Blob: "leader",
	}, func(ctx context.Context) error {
		say("START")
		defer say("END")
		<-ctx.Done()
		return nil
	}, opts...)
	if err != nil {
		return err
	}
	return ignoreCancel(m.RunTaskWhenMutexAcquired(ctx))
}

func ignoreCancel(err error) error {
	if err == context.Canceled {
		return nil
	}
	return err
}

// event is a func's start or end in one process.
type event struct {
	who   string
	start bool
	mono  int64
}

type fleet struct {
	mu     sync.Mutex
	events []event
	wg     sync.WaitGroup
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (f *fleet) spawn(exe, conn, container, id string, priority int) (*proc, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envIdentity+"="+id, envConnection+"="+conn, envContainer+"="+container)
	if priority > 0 {
		cmd.Env = append(cmd.Env, envPriority+"="+strconv.Itoa(priority))
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w := strings.Fields(sc.Text())
			if len(w) != 2 {
				continue
			}
			mono, err := strconv.ParseInt(w[1], 10, 64)
			if err != nil {
				continue
			}
			f.mu.Lock()
			f.events = append(f.events, event{who: id, start: w[0] == "START", mono: mono})
			f.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	return p, nil
}

// stop SIGTERMs the process and waits for it to exit.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// outcome is one rolling update: how many times leadership moved, how long
// no func ran in all (from a func's end to the next one's start), and on
// which version it ended.
type outcome struct {
	moves   int
	stopped time.Duration
	onNew   bool
}

// roll runs one rolling update of n instances; old and new are their
// priorities (0: no WithPriority).
// The old instances are stopped in the order given (a permutation of 0..n-1).
func roll(ctx context.Context, exe, conn, container string, n, oldP, newP int, order []int, settle time.Duration) (outcome, error) {
	f := &fleet{}
	var olds, news []*proc
	defer func() {
		for _, p := range append(olds, news...) {
			p.stop()
		}
		f.wg.Wait()
	}()
	for i := range n {
		p, err := f.spawn(exe, conn, container, fmt.Sprintf("old-%d", i), oldP)
		if err != nil {
			return outcome{}, err
		}
		olds = append(olds, p)
	}
	first := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.events) > 0
	}
	for !first() {
		if !chaos.Sleep(ctx, 50*time.Millisecond) {
			return outcome{}, ctx.Err()
		}
	}
	chaos.Sleep(ctx, settle)
	f.mu.Lock()
	from := len(f.events) - 1 // the fleet's first term, running
	f.mu.Unlock()
	for i := range n {
		p, err := f.spawn(exe, conn, container, fmt.Sprintf("new-%d", i), newP)
		if err != nil {
			return outcome{}, err
		}
		news = append(news, p)
		chaos.Sleep(ctx, settle)
		olds[order[i]].stop()
		chaos.Sleep(ctx, settle)
	}
	if ctx.Err() != nil {
		return outcome{}, ctx.Err()
	}
	f.mu.Lock()
	evs := slices.Clone(f.events[from:])
	f.mu.Unlock()
	slices.SortStableFunc(evs, func(a, b event) int { return int(a.mono - b.mono) })
	var o outcome
	var lastEnd int64
	running := 0
	for _, e := range evs {
		switch {
		case e.start:
			if running == 0 && lastEnd != 0 {
				o.stopped += time.Duration(e.mono - lastEnd)
			}
			if lastEnd != 0 || running > 0 {
				o.moves++
			}
			running++
			o.onNew = strings.HasPrefix(e.who, "new-")
		default:
			running--
			lastEnd = e.mono
		}
	}
	return o, nil
}

func run(n, rounds int, settle time.Duration, out string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	began := time.Now()
	conn, stop, err := azurite.Endpoint(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = stop() }()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	results := make([][]outcome, len(modes))
	for r := range rounds {
		// Which old instance leads is up to the race; the order in which
		// they are stopped, drawn per round, is the same for both modes.
		order := rand.New(rand.NewPCG(uint64(r), 1)).Perm(n)
		for i, m := range modes {
			container := fmt.Sprintf("roll-%d-%d-%d", time.Now().UnixNano()%1e9, r, i)
			o, err := roll(ctx, exe, conn, container, n, m.old, m.newP, order, settle)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "rollbench: round %d, %s: %d moves, stopped %v, ends on new: %t\n", r+1, m.name, o.moves, o.stopped.Round(time.Millisecond), o.onNew)
			results[i] = append(results[i], o)
		}
	}
	pub := publication(n, rounds, settle, time.Since(began), modes, results)
	fmt.Println(pub.Sections[0])
	if out != "" {
		return benchdoc.Publish(out, pub)
	}
	return nil
}

// mode is a kind of rolling update: without priorities, or with the new
// instances preferred.
type mode struct {
	name      string
	old, newP int
}

var modes = []mode{{"today: no priority", 0, 0}, {"WithPriority: old 1, new 2", 1, 2}}

// publication is the command's section of BENCHMARKS.md and its row of the
// summary, which replaces its row in place: for each mode, the medians and
// ranges of its rounds' outcomes.
func publication(n, rounds int, settle, took time.Duration, modes []mode, results [][]outcome) benchdoc.Publication {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nProduced by `go run ./internal/tools/rollbench -rounds %d -out BENCHMARKS.md` in %v, on %s; commit %s; %s, %d cores, %s.\n\n",
		heading, rounds, took.Round(time.Second), time.Now().Format("2006-01-02"), buildinfo.Revision(), runtime.Version(), runtime.NumCPU(), runtime.GOARCH)
	fmt.Fprintf(&b, "%d mutex contenders, each a process of its own, at the library's default timings (native lease 15 s, RetryInterval 2 s), against a local Azurite, are updated as a Deployment with maxSurge 1 and maxUnavailable 0 does: for each old instance, a new one starts, runs %v, then an old one gets SIGTERM and exits, and %v pass before the next; the old ones are stopped in an order drawn for each round (the same for both kinds), so the leader may be stopped first, last or between. Counted from the fleet's first term: how many times leadership moved, and how long no leader func ran in all (from one func's return to the next one's start, CLOCK_MONOTONIC stamps the processes wrote). %d rolling updates of each kind, in turn; medians, [min–max].\n\n",
		n, settle, settle, rounds)
	b.WriteString("| | moves | leader's work stopped, in all | ended on a new instance |\n|---|---|---|---|\n")
	for i, m := range modes {
		rs := results[i]
		onNew := 0
		for _, o := range rs {
			if o.onNew {
				onNew++
			}
		}
		mm, ms := movesAndStops(rs)
		fmt.Fprintf(&b, "| %s | %.0f [%.0f–%.0f] | %.2f s [%.2f–%.2f] | %d of %d |\n", m.name, mm[0], mm[1], mm[2], ms[0], ms[1], ms[2], onNew, len(rs))
	}
	m0, s0 := movesAndStops(results[0])
	m1, s1 := movesAndStops(results[1])
	row := fmt.Sprintf("| a rolling update of %d instances: leadership moves / work stood still | %.0f [%.0f–%.0f] / %.2f s [%.2f–%.2f]; "+
		"with `WithPriority` %.0f [%.0f–%.0f] / %.2f s [%.2f–%.2f] | %d rounds each | | %s | "+
		"`go run ./internal/tools/rollbench -rounds %d -out BENCHMARKS.md`, [Rolling update](#rolling-update-leadership-moves) |",
		n, m0[0], m0[1], m0[2], s0[0], s0[1], s0[2], m1[0], m1[1], m1[2], s1[0], s1[1], s1[2], rounds, buildinfo.Revision(), rounds)
	return benchdoc.Publication{Sections: []string{b.String()}, Rows: []string{row}}
}

// movesAndStops are the median, min and max of the rounds' leadership
// moves and seconds of work stood still.
func movesAndStops(rs []outcome) (moves, stopped [3]float64) {
	m, st := make([]float64, len(rs)), make([]float64, len(rs))
	for j, o := range rs {
		m[j], st[j] = float64(o.moves), o.stopped.Seconds()
	}
	return stat(m), stat(st)
}

// stat is the median, min and max of v.
func stat(v []float64) [3]float64 {
	s := slices.Sorted(slices.Values(v))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return [3]float64{med, s[0], s[len(s)-1]}
}
