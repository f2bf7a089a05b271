// Command quorumbench measures what a quorum mutex (issue 39,
// leaderelection.NewQuorumMutex) costs beside a mutex over one account, at
// the same lease duration: the failover after a crash (SIGKILL) and after a
// graceful stop (SIGTERM) of the leader, p50, p99 and max, and the requests
// an hour each account receives in a steady run, from the leader, from each
// follower and from the whole fleet. From the repository's root:
//
//	go run ./internal/tools/quorumbench                          # 20 faults of each kind, 5 min steady, over 1 and 3 accounts
//	go run ./internal/tools/quorumbench -faults 4 -steady 1m     # a smoke run
//
// Every trial is the chaos harness's (internal/tools/chaos): contenders as
// processes of this binary, each behind a proxy of its own to each account,
// an account being an Azurite process; the runs go one after another (the
// machine may be shared). A failover is the time from the fault to the
// next func's start (chaos.FaultResult.Gap); requests are counted by each
// contender's pipeline policy, by account. It prints its tables; it exits
// 1 if a run failed or two funcs overlapped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
)

func main() {
	chaos.MaybeContend()
	var (
		faults     = flag.Int("faults", 20, "faults of each kind (kill, graceful) per number of accounts")
		steady     = flag.Duration("steady", 5*time.Minute, "the steady run's length, for the request rates")
		contenders = flag.Int("contenders", 3, "contender processes per run")
		lease      = flag.Duration("lease", 15*time.Second, "LeaseDuration, every run's (a quorum's is native: 15 s to 60 s)")
		accounts   = flag.String("accounts", "1,3", "numbers of accounts to measure, side by side")
		dir        = flag.String("dir", "", "where to keep the runs' records and logs (default a temporary directory)")
		seed       = flag.Int64("seed", time.Now().UnixNano()%1_000_000, "seed of the runs")
	)
	flag.Parse()
	var ks []int
	for _, f := range strings.Split(*accounts, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fail(fmt.Errorf("-accounts: %w", err))
		}
		ks = append(ks, k)
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "quorumbench-")
		if err != nil {
			fail(err)
		}
		*dir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Printf("quorumbench: seed %d, lease %v, %d contenders, %d faults of each kind; records under %s\n", *seed, *lease, *contenders, *faults, *dir)
	var bad []error
	fleet := []chaos.Contender{{LeaseDuration: *lease}}
	var failover, rates strings.Builder
	fmt.Fprintf(&failover, "%-8s %-9s %5s %8s %8s %8s\n", "accounts", "failover", "n", "p50", "p99", "max")
	fmt.Fprintf(&rates, "%-8s %-7s %12s %14s %12s\n", "accounts", "account", "leader/h", "a follower/h", "all/h")
	for _, k := range ks {
		var seq []string
		for range *faults {
			seq = append(seq, chaos.FaultKill, chaos.FaultGraceful)
		}
		run := filepath.Join(*dir, fmt.Sprintf("failover-%d", k))
		rep, err := chaos.Run(ctx, chaos.Config{Seed: *seed, Contenders: *contenders, Duration: 24 * time.Hour, Sequence: seq,
			Fleet: fleet, Accounts: k, Dir: run, Progress: os.Stderr})
		bad = append(bad, judged(rep, err, run))
		for _, kind := range []string{chaos.FaultKill, chaos.FaultGraceful} {
			var gaps []time.Duration
			for _, f := range rep.Faults {
				if f.Kind == kind && f.Changed && f.Gap > 0 {
					gaps = append(gaps, f.Gap)
				}
			}
			fmt.Fprintf(&failover, "%-8d %-9s %5d %8s %8s %8s\n", k, label(kind), len(gaps),
				secs(chaos.Percentile(gaps, 50)), secs(chaos.Percentile(gaps, 99)), secs(chaos.Percentile(gaps, 100)))
		}

		run = filepath.Join(*dir, fmt.Sprintf("steady-%d", k))
		rep, err = chaos.Run(ctx, chaos.Config{Seed: *seed, Contenders: *contenders, Duration: *steady, MaxFaults: -1,
			Fleet: fleet, Accounts: k, Dir: run, Progress: os.Stderr})
		bad = append(bad, judged(rep, err, run))
		if err == nil {
			r, err := perAccount(rep, filepath.Join(run, "records.jsonl"), k)
			bad = append(bad, err)
			for a, x := range r {
				fmt.Fprintf(&rates, "%-8d %-7d %12.0f %14.0f %12.0f\n", k, a, x.leader, x.follower, x.all)
			}
		}
	}
	fmt.Println()
	fmt.Print(failover.String())
	fmt.Println()
	fmt.Print(rates.String())
	if err := errors.Join(bad...); err != nil {
		fmt.Println("failed:", err)
		os.Exit(1)
	}
}

// judged is a run's error, or a failure its report shows.
func judged(rep chaos.Report, err error, dir string) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", dir, err)
	case len(rep.Overlap) > 0 || len(rep.Liveness) > 0 || len(rep.Exits) > 0:
		return fmt.Errorf("%s: %d overlaps, %d liveness violations, %d contenders exited:\n%s", dir, len(rep.Overlap), len(rep.Liveness), len(rep.Exits), rep.Summary())
	}
	return nil
}

// rate is requests an hour to one account.
type rate struct{ leader, follower, all float64 }

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

func label(kind string) string {
	if kind == chaos.FaultKill {
		return "crash"
	}
	return kind
}

func secs(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "quorumbench:", err)
	os.Exit(1)
}
