// Command quorumbench measures what a quorum mutex (issue 39,
// leaderelection.NewQuorumMutex) costs and buys beside a mutex over one
// account, at the same lease duration, and writes its section of
// BENCHMARKS.md. In each of -runs runs, for each number of accounts: the
// failover after a crash (SIGKILL) and after a graceful stop (SIGTERM) of
// the leader, p50 and p99, and the requests an hour each account receives
// in a steady run; and the outage trial: an account's Azurite killed for
// -outage (the quorum's one of 3), beside the library's mutex over one
// account and the reference C# sample's algorithm (internal/tools/baseline)
// over one, each losing its only account: handovers, the leader's func
// cancelled, and how long no func ran. Each figure is the median of the
// runs with their range. From the repository's root:
//
//	go run ./internal/tools/quorumbench -out BENCHMARKS.md                            # 3 runs, 10 faults of each kind, 3 min steady
//	go run ./internal/tools/quorumbench -runs 1 -faults 2 -steady 1m -outage 30s      # a smoke run, printed only
//
// Every trial is the chaos harness's (internal/tools/chaos): contenders as
// processes of this binary, each behind a proxy of its own to each account,
// an account being an Azurite process on a port found free; -parallel trials
// go at once, each with its own Azurite processes and proxies. A failover
// is the time from the fault to the next func's start
// (chaos.FaultResult.Gap); requests are counted by each contender's
// pipeline policy, by account. It prints its tables; with -out, it rewrites
// its section and summary rows of that file (internal/tools/benchdoc),
// stamped with the commit it measured. It exits 1 if a trial failed or two
// funcs overlapped, and then writes nothing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/buildinfo"
	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/parallel"
)

// The defaults the command line need not repeat.
const (
	defaultLease      = 15 * time.Second
	defaultContenders = 3
)

// config is the command's flags.
type config struct {
	runs, faults, contenders, parallel int
	ks                                 []int
	steady, lease, outage, tail        time.Duration
	beside, dir, out, commit           string
	seed                               int64
}

func main() {
	chaos.MaybeContend()
	var c config
	flag.IntVar(&c.runs, "runs", 3, "runs of every trial; a figure is the median of the runs, with their range")
	flag.IntVar(&c.faults, "faults", 10, "faults of each kind (kill, graceful) per run and number of accounts")
	flag.DurationVar(&c.steady, "steady", 3*time.Minute, "each steady run's length, for the request rates")
	flag.IntVar(&c.contenders, "contenders", defaultContenders, "contender processes per trial")
	flag.DurationVar(&c.lease, "lease", defaultLease, "LeaseDuration of the library's mutexes (a quorum's is native: 15 s to 60 s)")
	accounts := flag.String("accounts", "1,3,5", "numbers of accounts to measure, side by side")
	flag.DurationVar(&c.outage, "outage", 2*time.Minute, "how long the outage trial keeps an account down; 0: no outage trial")
	flag.DurationVar(&c.tail, "tail", 20*time.Second, "how long an outage trial goes on once a func runs again after the account's return")
	flag.IntVar(&c.parallel, "parallel", 3, "trials at once, each with its own Azurite processes")
	flag.StringVar(&c.beside, "beside", "", "what else ran on the machine, said in the section (default: nothing)")
	flag.StringVar(&c.out, "out", "", "the file to write the section and summary rows into (BENCHMARKS.md); empty: print only")
	flag.StringVar(&c.dir, "dir", "", "where to keep the trials' records and logs (default a temporary directory)")
	flag.Int64Var(&c.seed, "seed", time.Now().UnixNano()%1_000_000, "seed of the first run; run r takes seed+r")
	flag.Parse()
	for _, f := range strings.Split(*accounts, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || (k != 1 && k != 3 && k != 5) {
			fail(fmt.Errorf("-accounts: %q is not 1, 3 or 5", f))
		}
		c.ks = append(c.ks, k)
	}
	switch {
	case c.runs < 1:
		fail(errors.New("-runs must be at least 1"))
	case c.faults < 1:
		fail(errors.New("-faults must be at least 1"))
	case c.parallel < 1:
		fail(errors.New("-parallel must be at least 1"))
	}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "quorumbench-")
		if err != nil {
			fail(err)
		}
		c.dir = d
	}
	c.commit = buildinfo.Revision()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res := measure(ctx, c)
	took := time.Since(start).Round(time.Second)
	pub := publication(c, res, took)
	fmt.Print(strings.Join(pub.Sections, "\n"))
	if err := errors.Join(res.failed...); err != nil {
		fmt.Println("failed:", err)
		os.Exit(1)
	}
	if c.out != "" {
		if err := benchdoc.Publish(c.out, pub); err != nil {
			fail(err)
		}
		fmt.Fprintln(os.Stderr, "quorumbench: wrote its section and summary rows of", c.out)
	}
}

// results are every run's figures, and what failed.
type results struct {
	runs   []*run
	failed []error
	// overlaps are two funcs of one election at once, over every trial;
	// faults counts the faults injected.
	overlaps, faults int
}

// run is one run's figures.
type run struct {
	byK    map[int]*perK
	outage map[string]outcome // by outageKind.key
}

// perK is one run's figures for one number of accounts.
type perK struct {
	crash, graceful []time.Duration // the failover trials' gaps
	lost            int             // faults after which nobody led again in time
	rates           []rate          // the steady run's, by account
}

// measure runs every trial, -parallel at a time.
func measure(ctx context.Context, c config) *results {
	res := &results{}
	var (
		mu   sync.Mutex
		jobs []func()
	)
	record := func(err error, rep chaos.Report) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			res.failed = append(res.failed, err)
		}
		res.overlaps += len(rep.Overlap)
		res.faults += len(rep.Faults)
	}
	for r := range c.runs {
		ru := &run{byK: map[int]*perK{}, outage: map[string]outcome{}}
		res.runs = append(res.runs, ru)
		seed := c.seed + int64(r)
		if c.outage > 0 {
			for _, o := range outageKinds(c.lease) {
				jobs = append(jobs, func() {
					dir := filepath.Join(c.dir, fmt.Sprintf("run%d", r+1), "outage-"+o.key)
					out, rep, err := outageTrial(ctx, c, o, seed, dir)
					if err == nil {
						mu.Lock()
						ru.outage[o.key] = out
						mu.Unlock()
					}
					record(err, rep)
				})
			}
		}
		for _, k := range c.ks {
			pk := &perK{}
			ru.byK[k] = pk
			jobs = append(jobs, func() {
				dir := filepath.Join(c.dir, fmt.Sprintf("run%d", r+1), fmt.Sprintf("failover-%d", k))
				rep, err := failoverTrial(ctx, c, k, seed, dir, pk)
				record(err, rep)
			}, func() {
				dir := filepath.Join(c.dir, fmt.Sprintf("run%d", r+1), fmt.Sprintf("steady-%d", k))
				rep, err := steadyTrial(ctx, c, k, seed, dir, pk)
				record(err, rep)
			})
		}
	}
	fmt.Fprintf(os.Stderr, "quorumbench: seed %d, lease %v, %d contenders, %d faults of each kind, %d runs: %d trials, %d at a time; records under %s\n",
		c.seed, c.lease, c.contenders, c.faults, c.runs, len(jobs), c.parallel, c.dir)
	_ = parallel.Each(jobs, c.parallel, func(job func()) error {
		if ctx.Err() == nil {
			job()
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		res.failed = append(res.failed, err)
	}
	return res
}

// failoverTrial SIGKILLs and SIGTERMs the leader of a fleet over k accounts
// c.faults times each, in turn, and keeps the gaps.
func failoverTrial(ctx context.Context, c config, k int, seed int64, dir string, into *perK) (chaos.Report, error) {
	var seq []string
	for range c.faults {
		seq = append(seq, chaos.FaultKill, chaos.FaultGraceful)
	}
	rep, err := chaos.Run(ctx, chaos.Config{Seed: seed, Contenders: c.contenders, Duration: 24 * time.Hour, Sequence: seq,
		Fleet: []chaos.Contender{{LeaseDuration: c.lease}}, Accounts: k, Dir: dir, Progress: progress(dir)})
	if err := judged(rep, err, dir); err != nil {
		return rep, err
	}
	for _, f := range rep.Faults {
		switch {
		case !f.Changed || f.Gap <= 0:
			into.lost++
		case f.Kind == chaos.FaultKill:
			into.crash = append(into.crash, f.Gap)
		case f.Kind == chaos.FaultGraceful:
			into.graceful = append(into.graceful, f.Gap)
		}
	}
	if len(rep.Faults) != len(seq) {
		return rep, fmt.Errorf("%s: %d faults injected of %d", dir, len(rep.Faults), len(seq))
	}
	return rep, nil
}

// steadyTrial runs a fleet over k accounts with no fault and keeps the
// requests an hour each account receives.
func steadyTrial(ctx context.Context, c config, k int, seed int64, dir string, into *perK) (chaos.Report, error) {
	rep, err := chaos.Run(ctx, chaos.Config{Seed: seed, Contenders: c.contenders, Duration: c.steady, MaxFaults: -1,
		Fleet: []chaos.Contender{{LeaseDuration: c.lease}}, Accounts: k, Dir: dir, Progress: progress(dir)})
	if err := judged(rep, err, dir); err != nil {
		return rep, err
	}
	into.rates, err = perAccount(rep, filepath.Join(dir, "records.jsonl"), k)
	return rep, err
}

// perAccount returns the requests an hour each account received in a steady
// run: from its leader, from a follower (the mean), and from all, counted
// from 10 s after the leader started until 2 s before the run ended.
func perAccount(rep chaos.Report, records string, k int) ([]rate, error) {
	recs, err := chaos.ReadRecords(records)
	if err != nil {
		return nil, err
	}
	leader, first, last, err := chaos.SteadyRequests(rep, recs)
	if err != nil {
		return nil, err
	}
	out := make([]rate, k)
	followers := 0
	for who, f := range first {
		l := last[who]
		if l.Mono-f.Mono < int64(30*time.Second) {
			return nil, fmt.Errorf("%s reported its requests over %v only", who, time.Duration(l.Mono-f.Mono))
		}
		per := float64(time.Hour) / float64(l.Mono-f.Mono)
		if who != leader {
			followers++
		}
		for a := range k {
			n := float64(l.Requests - f.Requests)
			if k > 1 {
				if len(l.Accounts) != k || len(f.Accounts) != k {
					return nil, fmt.Errorf("%s did not count its requests by account", who)
				}
				n = float64(l.Accounts[a] - f.Accounts[a])
			}
			out[a].all += n * per
			if who == leader {
				out[a].leader = n * per
			} else {
				out[a].follower += n * per
			}
		}
	}
	if _, ok := first[leader]; !ok || followers == 0 {
		return nil, errors.New("too few request counts in the steady run")
	}
	for a := range out {
		out[a].follower /= float64(followers)
	}
	return out, nil
}

// judged is a trial's error, or a failure its report shows.
func judged(rep chaos.Report, err error, dir string) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", dir, err)
	case len(rep.Overlap) > 0 || len(rep.Liveness) > 0 || len(rep.Exits) > 0:
		return fmt.Errorf("%s: %d overlaps, %d liveness violations, %d contenders exited:\n%s", dir, len(rep.Overlap), len(rep.Liveness), len(rep.Exits), rep.Summary())
	}
	return nil
}

// progress writes a trial's progress lines to standard error, each after
// the trial's directory: the trials run at once.
func progress(dir string) io.Writer {
	return prefixed{w: os.Stderr, prefix: filepath.Base(filepath.Dir(dir)) + "/" + filepath.Base(dir) + " "}
}

type prefixed struct {
	w      io.Writer
	prefix string
}

// Write writes p after the prefix, at once: the harness writes a line at a
// time.
func (p prefixed) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "quorumbench:", err)
	os.Exit(1)
}
