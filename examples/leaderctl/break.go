package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection"
)

// maxBreakPeriod is Azure's limit.
const maxBreakPeriod = 60 * time.Second

// breakCmd holds the flags of break.
type breakCmd struct {
	target
	period time.Duration
}

func (cmd *breakCmd) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("break", flag.ContinueOnError)
	cmd.timings = true
	cmd.register(fs)
	fs.Var((*duration)(&cmd.period), "period", "")
	return fs
}

func (c *cli) breakLease(ctx context.Context, args []string) int {
	var cmd breakCmd
	fs := cmd.flags()
	if code, ok := c.parse(fs, breakHelp, args); !ok {
		return code
	}
	periodGiven := false
	fs.Visit(func(f *flag.Flag) { periodGiven = periodGiven || f.Name == "period" })
	// The library would round a fraction down, breaking sooner than asked:
	// refuse it instead.
	if p := cmd.period; periodGiven && (p < 0 || p > maxBreakPeriod || p%time.Second != 0) {
		return c.usageError(fs.Name(), fmt.Sprintf("invalid -period %v: must be whole seconds from 0s to 60s", p))
	}
	l, code, ok := c.open(fs, &cmd.target)
	if !ok {
		return code
	}
	defer l.close()

	safe := l.manager.SafeBreakPeriod()
	if !periodGiven {
		cmd.period = safe
	}

	var info leaderelection.LeaseInfo
	var remaining time.Duration
	err := l.call(ctx, func(ctx context.Context) (err error) {
		// Read first, to say whose lease this is, and to leave alone a
		// lease nobody holds: we break only a holder we have shown.
		if info, err = l.manager.Inspect(ctx); err != nil || !info.Held() {
			return err
		}
		remaining, err = l.manager.Break(ctx, cmd.period)
		return err
	})
	if err != nil {
		return c.fail(err)
	}
	now := time.Now()
	switch {
	case !info.Exists:
		fmt.Fprintf(c.stdout, "no leader: lease blob %s does not exist yet; nothing to break\n", l.name)
		return exitOK
	case !info.Held():
		fmt.Fprintf(c.stdout, "no leader: the lease on %s is %s; nothing to break\n", l.name, info.State)
		return exitOK
	}
	if cmd.period < safe {
		fmt.Fprintf(c.stderr, "leaderctl: warning: -period %v is shorter than the safe break period %v (the holders' LeaseDuration): "+
			"unless the holder is dead, another instance may lead while it still acts\n", cmd.period, safe)
	}
	holder := "a holder that has not recorded its term"
	switch {
	case info.TermPending():
		holder += " (the previous leader, " + describeTerm(info.Leader, now) + ", had released it)"
	case info.Leader.Number > 0:
		holder = describeTerm(info.Leader, now)
	}
	fmt.Fprintf(c.stdout, "broke the lease on %s, held by %s\n", l.name, holder)
	if info.State == lease.StateTypeBreaking {
		fmt.Fprintln(c.stdout, "it was already being broken: a break can only shorten the time left")
	}
	if remaining == 0 {
		fmt.Fprintln(c.stdout, "the lease is broken now: any instance can take it")
		return exitOK
	}
	fmt.Fprintf(c.stdout, "the lease is broken in %v, at %s: the leader stops at its next renewal, then any instance can take it\n",
		remaining, now.Add(remaining).UTC().Format(time.RFC3339))
	return exitOK
}
