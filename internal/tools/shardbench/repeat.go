package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/chaos"
)

// The repeated runs, each figure beside the floor measured in the same run
// (floor.go): medians and ranges over the runs, never the best one.

// over applies f to every run.
func over(runs []*result, f func(*result) float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

func repeated(c config, runs []*result) string {
	if len(runs) == 0 || runs[0].floorCold == 0 {
		return ""
	}
	lease, retry := 15*time.Second, 2*time.Second // the defaults the runs use
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Beside the floor, %d runs\n\n", len(runs))
	fmt.Fprintf(&b, "Each run: %d instance processes, %d shards, a fresh Azurite; a cold start, one more instance joining, a SIGKILL, then a SIGTERM; then, against the same Azurite, the floors: "+
		"the least work any design must do for each scenario, with the library's concurrency (8 claims, 16 releases in flight per client; each client a client of its own), nothing listed or waited for: "+
		"**cold**: %d clients create, lease and record %d blobs; **join**: %d holders release the joiner's share and one client acquires and records each as it is released; "+
		"**kill**: %d clients each read the killed instance's list of its shards once, then take their part of them, each by a change of its lease's ID (If-Match its ETag) and a record (a break and an acquire would be one request more; the library knows the dead instance's lease IDs). Figures are medians over the runs, [min–max]; a ratio is taken run by run.\n\n",
		c.instances, c.shards, c.instances, c.shards, c.instances, c.instances-1)
	b.WriteString("| scenario | ShardOwner | floor | ratio | target | met |\n|---|---|---|---|---|---|\n")
	sec := func(d time.Duration) float64 { return d.Seconds() }
	// row prints a figure, its floor and their ratio, run by run; met says
	// whether the target holds for a run's figure and floor, judged on the
	// median of those.
	row := func(name string, fig, floor []float64, targetText string, slack func(fig, floor float64) float64) {
		ratios, margins := make([]float64, len(fig)), make([]float64, len(fig))
		for i := range fig {
			ratios[i], margins[i] = fig[i]/floor[i], slack(fig[i], floor[i])
		}
		met := "met"
		if benchdoc.SpreadOf(margins).Med < 0 {
			met = "**missed**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", name, benchdoc.SpreadOf(fig).Format("%.2f", " s"), benchdoc.SpreadOf(floor).Format("%.2f", " s"), benchdoc.SpreadOf(ratios).Format("%.2f", "×"), targetText, met)
	}
	times := func(k float64) func(fig, floor float64) float64 {
		return func(fig, floor float64) float64 { return k*floor - fig }
	}
	row("cold start: every shard runs, spread within one", over(runs, func(r *result) float64 { return sec(r.cold) }),
		over(runs, func(r *result) float64 { return sec(r.floorCold) }), "≤ 1.5 × floor", times(1.5))
	row(fmt.Sprintf("join: instance %d holds its share", c.instances+1), over(runs, func(r *result) float64 { return sec(r.join) }),
		over(runs, func(r *result) float64 { return sec(r.floorJoin) }), "≤ 2 × floor", times(2))
	// A kill waits LeaseDuration + RetryInterval at most before anyone may
	// claim (the session's silence), which no floor can shorten: the
	// target counts it, and the ratio is to that plus the claims' floor.
	row(fmt.Sprintf("SIGKILL: its shards run elsewhere (floor: LeaseDuration + RetryInterval = %v, plus the claims)", lease+retry),
		over(runs, func(r *result) float64 { return sec(r.killAll) }),
		over(runs, func(r *result) float64 { return sec(lease + retry + r.floorKill) }), "≤ LeaseDuration + RetryInterval + 1.5 × the claims' floor",
		func(fig, floor float64) float64 { return sec(lease+retry) + 1.5*(floor-sec(lease+retry)) - fig })
	b.WriteString("\n| handed over | p50 | p99 | max | target |\n|---|---|---|---|---|\n")
	pct := func(name string, f func(*result) []time.Duration, target string) {
		p := func(q float64) string {
			return benchdoc.SpreadOf(over(runs, func(r *result) float64 { return chaos.Percentile(f(r), q).Seconds() })).Format("%.2f", " s")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", name, p(50), p(99), p(100), target)
	}
	pct("join: a shard's idle time, from its func's return on the giver to its start on the joiner", func(r *result) []time.Duration { return r.joinGaps }, "p99 ≤ 1 s")
	pct("SIGTERM: a shard's idle time, from its func's return on the stopped instance to its start elsewhere", func(r *result) []time.Duration { return r.termGaps }, "p99 ≤ 1 s")
	fmt.Fprintf(&b, "\nSIGTERM: every shard of the stopped instance ran elsewhere %s after the signal (%d shards; it first marks its session as leaving and waits a RetryInterval for the others to read it).\n",
		benchdoc.SpreadOf(over(runs, func(r *result) float64 { return sec(r.termAll) })).Format("%.2f", " s"), runs[0].termHeld)
	return b.String()
}
