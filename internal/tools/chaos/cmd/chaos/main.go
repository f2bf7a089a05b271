// Command chaos runs the chaos harness: contenders as separate processes
// against a local Azurite, each behind a fault proxy, faults drawn from a
// seed, and a check of every term. It prints the seed (replay a run with
// -seed), a summary per fault kind, and exits 1 if two leaders overlapped or
// leadership was not restored in time.
//
//	go run ./internal/tools/chaos/cmd/chaos -duration 10m -runs 4 -svg timeline.svg
//	go run ./internal/tools/chaos/cmd/chaos -lease 5s -retry 1s               # ETag leases of 5 s
//	go run ./internal/tools/chaos/cmd/chaos -lease 3s,5s,15s -retry 1s,1s,2s  # a fleet mixing kinds
//	go run ./internal/tools/chaos/cmd/chaos -faults 300 -duration 3h -malformed -deletes  # and the messy world
//
// With -malformed and -deletes every -messy-every-th fault is, in turn, a
// malformed record written into the lease blob by another writer (and
// repaired seconds later), or the blob or its container deleted, every
// fourth deletion the container under a leader cut off from storage
// (cutoff-delete, which -kinds may also name); the run then also fails if a
// term did not grow, a func started under a malformed record, a record
// stayed unrepaired or a contender exited by itself.
//
// The timing flags are comma-separated lists, cycled over the lanes (lane i
// takes element i of each list, modulo its length); each may also be given
// in the environment as LEADERELECTION_CHAOS_LEASE, _RENEW, _RETRY,
// _STOP_MARGIN and _REQUEST_TIMEOUT, which a flag overrides.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
)

func main() {
	chaos.MaybeContend()
	var (
		seed       = flag.Int64("seed", time.Now().UnixNano()%1_000_000, "seed of the first run; run i uses seed+i")
		runs       = flag.Int("runs", 1, "independent runs in parallel, each with its own Azurite, contenders and blob")
		duration   = flag.Duration("duration", 3*time.Minute, "no fault starts after this")
		maxFaults  = flag.Int("faults", 0, "stop each run after this many faults (0: no limit)")
		contenders = flag.Int("contenders", 5, "contender processes per run")
		kinds      = flag.String("kinds", strings.Join(chaos.AllFaults, ","), "fault kinds to draw from; "+chaos.FaultCutOffDelete+" (the leader cut off from storage while the container is deleted) may be added")
		algo       = flag.String("algo", chaos.AlgoLibrary, "library, baseline (the reference sample's algorithm) or etcd (etcd's election; needs Debian's etcd-server); a comma list is cycled over the lanes")
		lease      = flag.String("lease", os.Getenv("LEADERELECTION_CHAOS_LEASE"), "LeaseDuration per lane (etcd: the session TTL); empty: the default")
		renew      = flag.String("renew", os.Getenv("LEADERELECTION_CHAOS_RENEW"), "RenewInterval per lane")
		retry      = flag.String("retry", os.Getenv("LEADERELECTION_CHAOS_RETRY"), "RetryInterval per lane")
		margin     = flag.String("stop-margin", os.Getenv("LEADERELECTION_CHAOS_STOP_MARGIN"), "StopMargin per lane")
		timeout    = flag.String("request-timeout", os.Getenv("LEADERELECTION_CHAOS_REQUEST_TIMEOUT"), "RequestTimeout per lane")
		dir        = flag.String("dir", "", "where to keep records and logs (default a temporary directory)")
		svg        = flag.String("svg", "", "write the first run's timeline here")
		recheck    = flag.String("check", "", "check an earlier run's records.jsonl (with -algo) instead of running")
		malformed  = flag.Bool("malformed", false, "another writer writes malformed records into the lease blob (each repaired seconds later)")
		deletes    = flag.Bool("deletes", false, "another writer deletes the lease blob, or its container, while it is unleased, and the container under a leader cut off from storage")
		messyEvery = flag.Int("messy-every", 3, "with -malformed or -deletes, every this many faults one is theirs")
		accounts   = flag.Int("accounts", 1, "storage accounts, each an Azurite process: 3 or 5 make every contender a quorum mutex, and allow the faults "+strings.Join(chaos.QuorumFaults, ",")+" ("+chaos.FaultAccountDown+" on one account too)")
		down       = flag.Duration("account-down", 2*time.Minute, "how long "+chaos.FaultAccountDown+" keeps an account down")
	)
	flag.Parse()
	fleet, err := chaos.ParseFleet(*contenders, *algo, *lease, *renew, *retry, *margin, *timeout)
	if err != nil {
		fail(err)
	}
	if *recheck != "" {
		recs, err := chaos.ReadRecords(*recheck)
		if err != nil {
			fail(err)
		}
		timings, err := chaos.TimingsOf(fleet)
		if err != nil {
			fail(err)
		}
		rep := chaos.Check(recs, timings)
		fmt.Print(rep.Summary())
		if failed(rep, fleet) {
			os.Exit(1)
		}
		return
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "chaos-")
		if err != nil {
			fail(err)
		}
		*dir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	fmt.Printf("chaos: seed %d, %d run(s), records under %s\n", *seed, *runs, *dir)
	reports := make([]chaos.Report, *runs)
	errs := make([]error, *runs)
	var wg sync.WaitGroup
	for i := range *runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i], errs[i] = chaos.Run(ctx, chaos.Config{
				Seed: *seed + int64(i), Contenders: *contenders, Duration: *duration, MaxFaults: *maxFaults,
				Kinds: strings.Split(*kinds, ","), Fleet: fleet,
				Dir: runDir(*dir, *seed+int64(i)), Progress: os.Stderr,
				Malformed: *malformed, Deletes: *deletes, MessyEvery: *messyEvery,
				Accounts: *accounts, AccountDown: *down,
			})
		}()
	}
	wg.Wait()
	bad := false
	for i, rep := range reports {
		fmt.Println()
		fmt.Print(rep.Summary())
		if errs[i] != nil && ctx.Err() == nil {
			fmt.Println("error:", errs[i])
			bad = true
		}
		bad = bad || failed(rep, fleet)
		if *accounts > 1 {
			bad = quorumFailed(rep, filepath.Join(runDir(*dir, rep.Seed), "records.jsonl"), fleet) || bad
		}
	}
	if *svg != "" && len(reports) > 0 {
		f, err := os.Create(*svg)
		if err != nil {
			fail(err)
		}
		if err := chaos.WriteSVG(f, reports[0]); err != nil {
			fail(err)
		}
		if err := f.Close(); err != nil {
			fail(err)
		}
		fmt.Println("timeline:", *svg)
	}
	if bad {
		os.Exit(1)
	}
}

// failed reports whether a run's report shows a failure: an overlap, no
// leader in time, a term that did not grow (but the baseline's, which
// counts its terms per process), a func under a malformed record, a
// malformed record left unrepaired, or a contender that gave up.
func failed(rep chaos.Report, fleet []chaos.Contender) bool {
	counted := true
	for _, c := range fleet {
		if c.Algo == chaos.AlgoBaseline {
			counted = false
		}
	}
	return len(rep.Overlap) > 0 || len(rep.Liveness) > 0 || (counted && len(rep.TermOrder) > 0) ||
		len(rep.UnderMalformed) > 0 || len(rep.Messy.Unrepaired) > 0 || len(rep.Exits) > 0
}

// quorumFailed prints the failures of a quorum run's own faults
// (chaos.QuorumFailures) and their stop margins, and reports whether there
// was one.
func quorumFailed(rep chaos.Report, records string, fleet []chaos.Contender) bool {
	margin, err := chaos.StopMarginOf(fleet)
	if err != nil {
		fail(err)
	}
	recs, err := chaos.ReadRecords(records)
	if err != nil {
		fail(err)
	}
	var margins []time.Duration
	for _, f := range rep.Faults {
		if f.Kind == chaos.FaultCutMajority && f.StopMarginOK {
			margins = append(margins, f.StopMargin)
		}
	}
	if len(margins) > 0 {
		fmt.Printf("%s: stop margins (StopMargin %v): min %v, p50 %v, max %v over %d\n", chaos.FaultCutMajority, margin,
			chaos.Percentile(margins, 0).Round(time.Millisecond), chaos.Percentile(margins, 50).Round(time.Millisecond),
			chaos.Percentile(margins, 100).Round(time.Millisecond), len(margins))
	}
	bad := chaos.QuorumFailures(rep, recs, margin, chaos.QuorumSlack)
	fmt.Printf("quorum faults failed: %d\n", len(bad))
	for _, b := range bad {
		fmt.Println("  " + b)
	}
	return len(bad) > 0
}

// runDir is where the run of seed keeps its records under dir.
func runDir(dir string, seed int64) string { return filepath.Join(dir, fmt.Sprintf("run-%d", seed)) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chaos:", err)
	os.Exit(1)
}
