// Command shardchaos runs the shard chaos harness: ShardOwner instances as
// processes against a local Azurite, each behind a fault proxy, faults
// drawn from a seed (several at once with -overlap), and a check of every
// shard's runs. It prints the report and exits 1 if two funcs of a shard
// ran at once, a term did not grow, a func started under a malformed
// record, a malformed record stayed unrepaired, an instance gave up, or
// after the last fault the shards of the live sets did not run where they
// should within LeaseDuration + RetryInterval + 5 s.
//
//	go run ./internal/tools/shardchaos/cmd/shardchaos -faults 300 -malformed -setchanges
//	go run ./internal/tools/shardchaos/cmd/shardchaos -faults 20 -overlap=false -seed 42
//	go run ./internal/tools/shardchaos/cmd/shardchaos -check DIR/records.jsonl   # check an earlier run again
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/shardchaos"
)

func main() {
	shardchaos.MaybeInstance()
	var (
		seed       = flag.Int64("seed", time.Now().UnixNano()%1_000_000, "seed of the faults' draws")
		faults     = flag.Int("faults", 300, "faults to inject")
		instances  = flag.Int("instances", 5, "instance processes")
		shards     = flag.Int("shards", 200, "shards in the first set")
		overlap    = flag.Bool("overlap", true, "faults overlap: a new one every 1-3 s, at most half the instances hit at once; otherwise each waits for the shards to settle")
		kinds      = flag.String("kinds", strings.Join(shardchaos.AllFaults, ","), "process faults to draw from")
		malformed  = flag.Bool("malformed", false, "also malformed shard records (repaired a hold later) and phantom sessions, by another writer")
		setChanges = flag.Bool("setchanges", false, "also rolling changes of every instance's set, and one instance's set alone")
		lease      = flag.Duration("lease", 4*time.Second, "LeaseDuration")
		retry      = flag.Duration("retry", 500*time.Millisecond, "RetryInterval")
		margin     = flag.Duration("stop-margin", 1500*time.Millisecond, "StopMargin")
		settle     = flag.Duration("settle", 2*time.Minute, "how long to wait for the shards to settle (at the start, after each fault without -overlap, and at the end)")
		dir        = flag.String("dir", "", "where to keep records and logs (default a temporary directory)")
		recheck    = flag.String("check", "", "check an earlier run's records.jsonl (with the timings it ran with) instead of running")
		static     = flag.Bool("static", false, "every other instance has a lease ID file (WithLeaseIDFile): a process started again resumes its predecessor's session and shards")
		brief      = flag.Float64("brief", 0, "the chance that a shard's run returns by itself 1 to 3 s after it started (shards then go free again and again for a while after each fault)")
	)
	flag.Parse()
	if *recheck != "" {
		records, err := chaos.ReadJSONLines[shardchaos.Record](*recheck)
		if err != nil {
			fail(err)
		}
		cfg := shardchaos.ChaosConfig{Config: shardchaos.Config{Timings: shardchaos.Timings{LeaseDuration: *lease, RetryInterval: *retry, StopMargin: *margin}}}
		rep := shardchaos.Check(records, cfg.CheckTimings())
		fmt.Print(rep.Summary())
		if len(rep.Overlaps) > 0 || len(rep.Revived) > 0 || len(rep.Unordered) > 0 || len(rep.UnderMalformed) > 0 || len(rep.Messy.Unrepaired) > 0 || len(rep.Exits) > 0 || !rep.Final.OK {
			os.Exit(1)
		}
		return
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "shardchaos-")
		if err != nil {
			fail(err)
		}
		*dir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Printf("shardchaos: seed %d, %d faults, records under %s\n", *seed, *faults, *dir)
	res, err := shardchaos.RunChaos(ctx, shardchaos.ChaosConfig{
		Config: shardchaos.Config{Shards: *shards, Dir: *dir, Progress: os.Stderr, Static: *static, Brief: *brief,
			Timings: shardchaos.Timings{LeaseDuration: *lease, RetryInterval: *retry, StopMargin: *margin}},
		Instances: *instances, Seed: *seed, Faults: *faults, Kinds: strings.Split(*kinds, ","), Overlap: *overlap,
		Settle: *settle, Malformed: *malformed, SetChanges: *setChanges,
	})
	fmt.Print(res.Summary())
	if res.Unsettled > 0 {
		fmt.Printf("faults after which the shards did not settle within %v: %d\n", *settle, res.Unsettled)
	}
	bad := len(res.Overlaps) > 0 || len(res.Revived) > 0 || len(res.Unordered) > 0 || len(res.UnderMalformed) > 0 || len(res.Messy.Unrepaired) > 0 ||
		len(res.Exits) > 0 || !res.Final.OK || res.Unsettled > 0
	if err != nil && ctx.Err() == nil {
		fmt.Println("error:", err)
		bad = true
	}
	if bad {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "shardchaos:", err)
	os.Exit(1)
}
