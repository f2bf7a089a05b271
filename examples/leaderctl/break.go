package main

import (
	"context"
	"errors"
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
	force  bool
}

func (cmd *breakCmd) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("break", flag.ContinueOnError)
	cmd.timings = true
	cmd.register(fs)
	fs.Var((*duration)(&cmd.period), "period", "")
	fs.BoolVar(&cmd.force, "force", false, "")
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

	var info leaderelection.LeaseInfo
	err := l.call(ctx, func(ctx context.Context) (err error) {
		// Read first, to say whose lease this is and what kind, and to
		// leave alone a lease nobody holds: we break only a holder we have
		// shown.
		info, err = l.manager.Inspect(ctx)
		return err
	})
	if err != nil {
		return c.fail(err)
	}
	switch {
	case !info.Exists:
		fmt.Fprintf(c.stdout, "no leader: lease blob %s does not exist yet; nothing to break\n", l.name)
		return exitOK
	case isOwnerRole(info.Role):
		return c.refuseOwnerBreak(l, info)
	case isHintRole(info.Role):
		return c.refuseHintBreak(l, info)
	case !info.Held():
		fmt.Fprintf(c.stdout, "no leader: the lease on %s is %s; nothing to break\n", l.name, info.State)
		return exitOK
	case info.Kind == leaderelection.ETagLease:
		if periodGiven {
			fmt.Fprintf(c.stderr, "leaderctl: warning: -period is for native leases; the lease on %s is an ETag lease: ignored\n", l.name)
		}
		if cmd.force {
			return c.forceBreakETag(ctx, l, info)
		}
		return c.breakWhenSilent(ctx, l, info)
	}

	safe := safeBreakPeriod(info)
	if !periodGiven {
		cmd.period = safe
	}
	remaining, code, ok := c.breakNow(ctx, l, cmd.period)
	if !ok {
		return code
	}
	now := time.Now()
	if cmd.period < safe {
		fmt.Fprintf(c.stderr, "leaderctl: warning: -period %v is shorter than the safe break period %v (the LeaseDuration the holder declared): "+
			"unless the holder is dead, another instance may lead while it still acts\n", cmd.period, safe)
	}
	fmt.Fprintf(c.stdout, "broke the lease on %s, held by %s\n", l.name, holder(info, now))
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

// refuseOwnerBreak leaves a ShardOwner's session or shard alone, whatever
// the flags, and says why. A shard's lease is never renewed: its ETag stands
// still while its func runs, so the silence rule would break a live holder,
// and no break period covers it either; the shard must pass on with its
// session. A session's silence the surviving instances judge themselves,
// and a break by hand could only be sooner than theirs. The library refuses
// these breaks too; this says why before sending anything.
func (c *cli) refuseOwnerBreak(l *session, info leaderelection.LeaseInfo) int {
	say := func(format string, args ...any) { fmt.Fprintf(c.stderr, "leaderctl: "+format+"\n", args...) }
	say("not broken: %s is the blob of %s, not a mutex's lease: leaderctl never breaks it, -force or not",
		l.name, describeRole(info.Role, l.manager.Settings().Blob))
	switch info.Role {
	case leaderelection.RoleShard:
		say("a shard's lease is infinite and never renewed (its ETag stands still while its func runs), so the silence rule does not apply to it")
		say("it passes to another instance only when its session ends: stop or restart the instance that holds it (%s); "+
			"a dead session's shards are taken by the survivors within the session's lease duration", holderName(info))
	default:
		say("the surviving instances break a session's lease themselves, once its ETag has stood unchanged for the lease duration it declared (the silence rule); a live session renews it")
		say("to move its shards to other instances, stop or restart the instance that runs it (%s)", holderName(info))
	}
	if !info.Held() {
		say("(nobody holds its lease now: there is nothing to break anyway)")
	}
	return exitNotByHand
}

// refuseHintBreak leaves a ShardOwner's held list or handoff note alone,
// whatever the flags, and says why: neither is a lease. The library never
// leases them, and nobody takes anything on their word alone: a break would
// end nothing, and move no shard.
func (c *cli) refuseHintBreak(l *session, info leaderelection.LeaseInfo) int {
	say := func(format string, args ...any) { fmt.Fprintf(c.stderr, "leaderctl: "+format+"\n", args...) }
	say("not broken: %s is not a lease: its role is %s (%s): there is nothing to break, and leaderctl never breaks it, -force or not",
		l.name, info.Role, describeRole(info.Role, l.manager.Settings().Blob))
	switch info.Role {
	case leaderelection.RoleHeld:
		say("a held list is a hint: when its session dies, the survivors take the shards it names, each only if the shard's lease and record are still as the list says")
		say("to move the session's shards to other instances, stop or restart the instance that runs it")
	default:
		say("a handoff note is a hint: the giver has already handed the shards it names to the receiver, which adopts them")
		say("to move shards, stop or restart the instance that runs them")
	}
	if info.Held() {
		say("(its blob is %s, which the library never does to a hint: its writer cannot rewrite it while that lease stands)", info.State)
	}
	return exitNotByHand
}

// breakWhenSilent breaks an ETag lease by the followers' rule, the only
// safe way: no break period covers a lease that may be longer than 60 s.
// It waits as long as the holder declared, and -timeout more.
func (c *cli) breakWhenSilent(ctx context.Context, l *session, info leaderelection.LeaseInfo) int {
	d := declared(info, l.manager.Settings().LeaseDuration)
	fmt.Fprintf(c.stdout, "the lease on %s is an ETag lease, held by %s\n", l.name, holder(info, time.Now()))
	fmt.Fprintf(c.stdout, "waiting until its ETag has stood unchanged for %v, as seen from here, to break it (-force breaks at once)\n", d)
	wait := d + l.timeout
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	last, broke, err := l.manager.BreakWhenSilent(ctx)
	switch {
	case errors.Is(err, leaderelection.ErrLeaseHeld):
		fmt.Fprintf(c.stderr, "leaderctl: not broken: the ETag changed after %v: the holder renewed its lease and is alive. "+
			"-force breaks it at once (a connected holder stops at its next renewal; another instance may lead meanwhile)\n",
			time.Since(start).Round(time.Millisecond))
		return exitAlive
	case err != nil && ctx.Err() != nil:
		return c.fail(fmt.Errorf("%w; gave up after %v (the declared %v and -timeout %v)", err, wait, d, l.timeout))
	case err != nil:
		return c.fail(err)
	case !broke:
		fmt.Fprintf(c.stdout, "no leader: the lease ended while we waited (it is %s); nothing to break\n", last.State)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "broke the lease after %v: its ETag stood unchanged for the declared %v, as seen from here; its holder has stopped, and any instance can take it now\n",
		time.Since(start).Round(time.Millisecond), d)
	return exitOK
}

// forceBreakETag breaks an ETag lease at once: what the operator asked for,
// and not safe for a holder cut off from storage.
func (c *cli) forceBreakETag(ctx context.Context, l *session, info leaderelection.LeaseInfo) int {
	if _, code, ok := c.breakNow(ctx, l, 0); !ok {
		return code
	}
	d := declared(info, l.manager.Settings().LeaseDuration)
	fmt.Fprintf(c.stderr, "leaderctl: warning: -force broke an ETag lease at once: a holder cut off from storage acts until its own deadline, "+
		"up to %v after its last renewal, while another instance may lead\n", d)
	fmt.Fprintf(c.stdout, "broke the lease on %s, held by %s\n", l.name, holder(info, time.Now()))
	fmt.Fprintln(c.stdout, "the lease is broken now: a connected leader stops at its next renewal, and any instance can take it")
	return exitOK
}

// breakNow breaks the lease. The library's Break reads the blob again and
// breaks again while the term it first read renews meanwhile (an ETag
// holder rewrites the blob at every renewal); it breaks no other term, and
// says so. ok is false when it broke nothing; code is then the exit status.
// The holder shown was read a moment before Break's own first read.
func (c *cli) breakNow(ctx context.Context, l *session, period time.Duration) (remaining time.Duration, code int, ok bool) {
	err := l.call(ctx, func(ctx context.Context) (err error) {
		remaining, err = l.manager.Break(ctx, period)
		return err
	})
	switch {
	case errors.Is(err, leaderelection.ErrLeaseHeld):
		fmt.Fprintf(c.stderr, "leaderctl: not broken: %v; run break again to see who holds it now\n", err)
		return 0, exitAlive, false
	case err != nil:
		return 0, c.fail(err), false
	}
	return remaining, exitOK, true
}

// declared is the lease duration an ETag lease's followers time its
// silence against: the one its record declares, or the holders' own.
func declared(info leaderelection.LeaseInfo, own time.Duration) time.Duration {
	if info.DeclaredDuration > 0 {
		return info.DeclaredDuration
	}
	return own
}

// holder describes who holds a lease.
// safeBreakPeriod is the shortest break period that lets no other instance
// lead while the holder of a native lease may still act: the LeaseDuration
// the holder declared in its record. When the record is not the holder's
// (it has not recorded its term yet) or declares none (an older version of
// the library), 60 s, which is safe for every native lease.
func safeBreakPeriod(info leaderelection.LeaseInfo) time.Duration {
	if d := info.DeclaredDuration; d > 0 && !info.TermPending() && info.Leader.Number > 0 {
		return min(d, maxBreakPeriod)
	}
	return maxBreakPeriod
}

func holder(info leaderelection.LeaseInfo, now time.Time) string {
	switch {
	case info.TermPending():
		return "a holder that has not recorded its term (the previous leader, " + describeTerm(info.Leader, now) + ", had released it)"
	case info.Leader.Number == 0:
		return "a holder that has not recorded its term"
	}
	return describeTerm(info.Leader, now)
}
