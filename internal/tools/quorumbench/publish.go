package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/chaos"
)

// heading is the section of BENCHMARKS.md the command owns.
const heading = "## Quorum: one election over 3 or 5 accounts"

// anchor links to it from the summary.
const anchor = "#quorum-one-election-over-3-or-5-accounts"

// The summary rows the command owns, by their first cells.
const (
	rowFailover = "a quorum mutex over 3 accounts: crash failover / graceful handover"
	rowOutage   = "an account down: the quorum of 3 / one account's mutex / the reference sample"
)

// rate is requests an hour to one account.
type rate struct{ leader, follower, all float64 }

// over is a figure's spread over the runs that have it, and how many do.
func over(runs []*run, f func(*run) (float64, bool)) (benchdoc.Spread, int) {
	var v []float64
	for _, r := range runs {
		if x, ok := f(r); ok {
			v = append(v, x)
		}
	}
	return benchdoc.SpreadOf(v), len(v)
}

// spread formats s as benchdoc does, "1.23 s [1.10–1.40]", each number
// by f, but a range of one value, as f shows it, as "720 (each run)": a
// degenerate range says nothing more, and the README quotes other figures
// of the same value (the one-account bench's 720 renewals an hour) without
// one; "-" for no run (n 0).
func spread(s benchdoc.Spread, n int, f func(float64) string, unit string) string {
	switch {
	case n == 0:
		return "-"
	case f(s.Lo) == f(s.Hi):
		return f(s.Lo) + unit + " (each run)"
	}
	return f(s.Med) + unit + " [" + f(s.Lo) + "–" + f(s.Hi) + "]"
}

// secs formats a spread of seconds: "1.23 s [1.10–1.40]".
func secs(s benchdoc.Spread, n int) string {
	return spread(s, n, func(v float64) string { return fmt.Sprintf("%.2f", v) }, " s")
}

// count formats a spread of counts or rates, whole, with thousands
// separators as the file writes counts: "2,059 [2,048–2,059]".
func count(s benchdoc.Spread, n int) string {
	return spread(s, n, benchdoc.Thousands, "")
}

// gapP is the p-th percentile of k accounts' gaps of one kind, run by run.
func gapP(k int, graceful bool, p float64) func(*run) (float64, bool) {
	return func(r *run) (float64, bool) {
		pk := r.byK[k]
		if pk == nil {
			return 0, false
		}
		gaps := pk.crash
		if graceful {
			gaps = pk.graceful
		}
		if len(gaps) == 0 {
			return 0, false
		}
		return chaos.Percentile(gaps, p).Seconds(), true
	}
}

// rateOf is k accounts' request rate, the mean over the accounts, run by
// run.
func rateOf(k int, f func(rate) float64) func(*run) (float64, bool) {
	return func(r *run) (float64, bool) {
		pk := r.byK[k]
		if pk == nil || len(pk.rates) == 0 {
			return 0, false
		}
		sum := 0.0
		for _, x := range pk.rates {
			sum += f(x)
		}
		return sum / float64(len(pk.rates)), true
	}
}

// outageOf is a figure of the outage trial of kind key, run by run.
func outageOf(key string, f func(outcome) float64) func(*run) (float64, bool) {
	return func(r *run) (float64, bool) {
		o, ok := r.outage[key]
		return f(o), ok
	}
}

// publication is the command's section and summary rows.
func publication(c config, res *results, took time.Duration) benchdoc.Publication {
	var b strings.Builder
	beside := "nothing else running"
	if c.beside != "" {
		beside = c.beside
	}
	seeds := fmt.Sprintf("seeds %d to %d", c.seed, c.seed+int64(c.runs)-1)
	if c.runs == 1 {
		seeds = fmt.Sprintf("seed %d", c.seed)
	}
	fmt.Fprintf(&b, "%s\n\nProduced by `%s` in %s, on %s; commit %s; %s, %d cores, %s; %d runs, %s, %d trials at a time, %s. ",
		heading, command(c), short(took), time.Now().UTC().Format("2006-01-02"), c.commit, runtime.Version(), runtime.NumCPU(), runtime.GOARCH,
		c.runs, seeds, c.parallel, beside)
	fmt.Fprintf(&b, "Every trial is the chaos harness's: %d contender processes, each behind a proxy of its own to each account, an account being an Azurite process of the trial's own; "+
		"the library's mutex at LeaseDuration %s (native lease), its other timings the defaults, over 1 account, or `NewQuorumMutex` over more. "+
		"In each run, for each number of accounts: %d SIGKILLs and %d SIGTERMs of the leader, in turn (failover: from the fault to the next func's start; a percentile is nearest-rank over the run's trials, so p99 is their maximum), "+
		"and %s with no fault (the requests an hour each account receives, the mean over the accounts: from the leader, from a follower, and from all the contenders). ",
		c.contenders, human(c.lease), c.faults, c.faults, human(c.steady))
	if c.outage > 0 {
		fmt.Fprintf(&b, "**An account down** (issue 39's trial e), once a run: its Azurite SIGKILLed once the leader has led 6 s (Azurite saves its data every 5 s), kept down %s, and started again on its port with its data on disk; "+
			"for the quorum of 3, one of them; for the library's mutex and for the reference C# sample's algorithm (`internal/tools/baseline`; its failover is in [Failover](#failover)), each over one account, their only one. "+
			"Counted from the kill until %s after a func runs again: the funcs begun (handovers) and returned (cancelled), how long no func ran while the account was down, and how soon after its return a func ran again. ",
			human(c.outage), human(c.tail))
	}
	fmt.Fprintf(&b, "Each figure is the median of the runs, [min–max]. Two funcs at once: %d, in %d faults.\n\n", res.overlaps, res.faults)
	b.WriteString("| fleet | crash p50 | crash p99 | graceful p50 | graceful p99 | requests an hour per account: leader | a follower | all | an account down: handovers | funcs cancelled | no func running while it was down | a func again after its return | runs |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range fleets(c) {
		s := func(g func(*run) (float64, bool)) string { return secs(over(res.runs, g)) }
		r := func(g func(rate) float64) string { return count(over(res.runs, rateOf(f.k, g))) }
		outCount := func(g func(outcome) float64) string { return count(over(res.runs, outageOf(f.outage, g))) }
		outSecs := func(g func(outcome) float64) string { return secs(over(res.runs, outageOf(f.outage, g))) }
		_, n := over(res.runs, gapP(f.k, false, 50))
		_, nOut := over(res.runs, outageOf(f.outage, func(outcome) float64 { return 0 }))
		down := []string{"-", "-", "-", "-"}
		if nOut > 0 {
			down = []string{outCount(func(x outcome) float64 { return float64(x.handovers) }), outCount(func(x outcome) float64 { return float64(x.cancelled) }),
				outSecs(func(x outcome) float64 { return x.idle.Seconds() }), outSecs(func(x outcome) float64 { return x.back.Seconds() })}
		}
		runs := fmt.Sprint(max(n, nOut))
		if n > 0 && nOut > 0 && n != nOut {
			runs = fmt.Sprintf("%d; the account down: %d", n, nOut)
		}
		if lost := f.lost(res); lost > 0 {
			runs += fmt.Sprintf("; %d faults with no successor in time", lost)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f.title,
			s(gapP(f.k, false, 50)), s(gapP(f.k, false, 99)), s(gapP(f.k, true, 50)), s(gapP(f.k, true, 99)),
			r(func(x rate) float64 { return x.leader }), r(func(x rate) float64 { return x.follower }), r(func(x rate) float64 { return x.all }),
			strings.Join(down, " | "), runs)
	}
	return benchdoc.Publication{Sections: []string{b.String()}, Rows: rows(c, res)}
}

// fleet is a row of the section's table: a number of accounts (0: the
// reference sample's row) and its outage trial's kind ("" none).
type fleet struct {
	title, outage string
	k             int
}

// fleets are the table's rows: each number of accounts measured (and 1 and
// 3, whose outage trials ran), then the reference sample's outage.
func fleets(c config) []fleet {
	ks := slices.Clone(c.ks)
	if c.outage > 0 {
		ks = append(ks, 1, 3)
	}
	slices.Sort(ks)
	var out []fleet
	for _, k := range slices.Compact(ks) {
		f := fleet{title: fmt.Sprintf("`NewQuorumMutex`, %d accounts", k), k: k}
		switch k {
		case 1:
			f.title, f.outage = "the library's mutex, 1 account", "mutex"
		case 3:
			f.outage = "quorum"
		}
		out = append(out, f)
	}
	if c.outage > 0 {
		out = append(out, fleet{title: "the reference C# sample's algorithm, 1 account", outage: "baseline"})
	}
	return out
}

// lost counts the faults of f's failover trials after which nobody led
// again in time.
func (f fleet) lost(res *results) int {
	n := 0
	for _, ru := range res.runs {
		if pk := ru.byK[f.k]; pk != nil {
			n += pk.lost
		}
	}
	return n
}

// rows are the command's summary rows: the quorum of 3 (and one account
// beside it), and the outage trial.
func rows(c config, res *results) []string {
	where := fmt.Sprintf("`%s`, [Quorum](%s)", command(c), anchor)
	var out []string
	if has(c.ks, 3) {
		s := func(f func(*run) (float64, bool)) string { return secs(over(res.runs, f)) }
		one := ""
		if has(c.ks, 1) {
			one = fmt.Sprintf(" (one account: crash p99 %s)", s(gapP(1, false, 99)))
		}
		out = append(out, fmt.Sprintf("| %s | crash p50 %s, p99 %s; graceful p50 %s, p99 %s%s | %d runs of %d trials each | | %s | %s |",
			rowFailover, s(gapP(3, false, 50)), s(gapP(3, false, 99)), s(gapP(3, true, 50)), s(gapP(3, true, 99)), one, c.runs, c.faults, c.commit, where))
	}
	if c.outage > 0 {
		var handovers, idle []string
		for _, o := range outageKinds(c.lease) {
			handovers = append(handovers, count(over(res.runs, outageOf(o.key, func(x outcome) float64 { return float64(x.handovers) }))))
			idle = append(idle, secs(over(res.runs, outageOf(o.key, func(x outcome) float64 { return x.idle.Seconds() }))))
		}
		out = append(out, fmt.Sprintf("| %s | %s down: handovers %s; no func running %s | %d trials each | | %s | the same |",
			rowOutage, human(c.outage), strings.Join(handovers, " / "), strings.Join(idle, " / "), c.runs, c.commit))
	}
	return out
}

func has(ks []int, k int) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// command is how the figures were produced: the flags that change them.
func command(c config) string {
	var b strings.Builder
	var ks []string
	for _, k := range c.ks {
		ks = append(ks, fmt.Sprint(k))
	}
	fmt.Fprintf(&b, "go run ./internal/tools/quorumbench -runs %d -faults %d -steady %s -accounts %s -outage %s",
		c.runs, c.faults, short(c.steady), strings.Join(ks, ","), short(c.outage))
	if c.lease != defaultLease {
		fmt.Fprintf(&b, " -lease %s", short(c.lease))
	}
	if c.contenders != defaultContenders {
		fmt.Fprintf(&b, " -contenders %d", c.contenders)
	}
	if c.out != "" {
		fmt.Fprintf(&b, " -out %s", c.out)
	}
	return b.String()
}

// human writes d as the file's prose does: "15 s", "3 min".
func human(d time.Duration) string {
	switch {
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}

// short writes d as a flag is given: 3m, not 3m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}
