package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
)

// The outage trial (issue 39, trial e): the same fault, an account's
// Azurite SIGKILLed, kept down, and started again on its port with its data
// on disk (chaos.FaultAccountDown), hits a quorum mutex over 3 accounts (one
// of them down), the library's mutex over one account and the reference
// sample's algorithm over one (its only account down), each a fleet of its
// own.

// outageKind is a fleet the outage trial runs.
type outageKind struct {
	key      string
	fleet    chaos.Contender
	accounts int
}

// outageKinds are the fleets side by side: the quorum's lease is the
// library mutex's.
func outageKinds(lease time.Duration) []outageKind {
	return []outageKind{
		{"quorum", chaos.Contender{LeaseDuration: lease}, 3},
		{"mutex", chaos.Contender{LeaseDuration: lease}, 1},
		{"baseline", chaos.Contender{Algo: chaos.AlgoBaseline}, 1},
	}
}

// outcome is what followed an account's outage, from the fault to the
// harness's shutdown (the account's return, a func running again, and
// Config.Tail more).
type outcome struct {
	handovers int // terms begun: a func started, another contender's or the same one's
	cancelled int // funcs that returned (each func returns only when its context ends)
	// idle is how long no func ran while the account was down; back how
	// long after its return a func ran again (0: one ran throughout).
	idle, back time.Duration
	overlaps   int
}

// outageTrial runs one outage trial of kind o.
func outageTrial(ctx context.Context, c config, o outageKind, seed int64, dir string) (outcome, chaos.Report, error) {
	rep, err := chaos.Run(ctx, chaos.Config{Seed: seed, Contenders: c.contenders, Duration: 24 * time.Hour,
		Sequence: []string{chaos.FaultAccountDown}, Fleet: []chaos.Contender{o.fleet}, Accounts: o.accounts,
		AccountDown: c.outage, Tail: c.tail, Dir: dir, Progress: progress(dir)})
	if err != nil {
		return outcome{}, rep, fmt.Errorf("%s: %w", dir, err)
	}
	recs, err := chaos.ReadRecords(filepath.Join(dir, "records.jsonl"))
	if err != nil {
		return outcome{}, rep, err
	}
	out, err := outageOutcome(rep, recs)
	if err != nil {
		return out, rep, fmt.Errorf("%s: %w", dir, err)
	}
	// The quorum is judged as the chaos harness judges it: no handover, no
	// cancellation, every account held again. The others stop leading:
	// what they do is the figure, not a failure, but for two funcs at once
	// or a contender that gave up.
	var bad []string
	if o.accounts > 1 {
		margin, err := chaos.StopMarginOf([]chaos.Contender{o.fleet})
		if err != nil {
			return out, rep, err
		}
		bad = chaos.QuorumFailures(rep, recs, margin, chaos.QuorumSlack)
	}
	if len(rep.Overlap) > 0 || len(rep.Exits) > 0 {
		bad = append(bad, fmt.Sprintf("%d overlaps, %d contenders exited:\n%s", len(rep.Overlap), len(rep.Exits), rep.Summary()))
	}
	if len(bad) > 0 {
		return out, rep, fmt.Errorf("%s: %s", dir, strings.Join(bad, "; "))
	}
	return out, rep, nil
}

// outageOutcome reads what followed the run's one FaultAccountDown.
func outageOutcome(rep chaos.Report, recs []chaos.Record) (outcome, error) {
	i := slices.IndexFunc(rep.Faults, func(f chaos.FaultResult) bool { return f.Kind == chaos.FaultAccountDown })
	if i < 0 {
		return outcome{}, errors.New("no account was taken down")
	}
	f := rep.Faults[i]
	if f.LeaderAt == "" {
		return outcome{}, errors.New("nobody led as the account went down")
	}
	end := rep.End
	for _, r := range recs {
		if r.Kind == chaos.KindShutdown {
			end = r.Mono
		}
	}
	out := outcome{overlaps: len(rep.Overlap)}
	var spans [][2]int64 // the funcs running while the account was down
	for _, t := range rep.Terms {
		tEnd := t.End
		if tEnd == 0 || tEnd > end {
			tEnd = end
		}
		if t.Start > f.At && t.Start < end {
			out.handovers++
		}
		if t.End != 0 && t.End >= f.At && t.End < end && !t.Killed {
			out.cancelled++
		}
		if t.Start < f.Healed && tEnd > f.At {
			spans = append(spans, [2]int64{max(t.Start, f.At), min(tEnd, f.Healed)})
		}
	}
	out.idle = time.Duration(f.Healed-f.At) - covered(spans)
	if !slices.ContainsFunc(rep.Terms, func(t chaos.TermSpan) bool { return t.Start <= f.Healed && (t.End == 0 || t.End > f.Healed) }) {
		next := int64(0)
		for _, t := range rep.Terms {
			if t.Start >= f.Healed && (next == 0 || t.Start < next) {
				next = t.Start
			}
		}
		if next == 0 || next >= end {
			return out, errors.New("no func ran again after the account came back")
		}
		out.back = time.Duration(next - f.Healed)
	}
	return out, nil
}

// covered is how long the union of spans lasts.
func covered(spans [][2]int64) time.Duration {
	slices.SortFunc(spans, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var total, reach int64
	for _, s := range spans {
		from := max(s[0], reach)
		if s[1] > from {
			total += s[1] - from
			reach = s[1]
		}
	}
	return time.Duration(total)
}
