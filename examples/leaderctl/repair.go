package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/blobelect/leaderelection"
)

// repairCmd holds the flags of repair.
type repairCmd struct {
	target
	term       termFlag
	allowLower bool
}

func (cmd *repairCmd) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("repair", flag.ContinueOnError)
	cmd.register(fs)
	fs.Var(&cmd.term, "term", "")
	fs.BoolVar(&cmd.allowLower, "allow-lower", false, "")
	return fs
}

// termFlag is a term number, whose error says what is expected.
type termFlag struct {
	n   int64
	set bool
}

func (f *termFlag) String() string { return strconv.FormatInt(f.n, 10) }

func (f *termFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err == nil && n == math.MaxInt64:
		return fmt.Errorf("no term could follow the largest term number: want one from 0 to %d", int64(math.MaxInt64-1))
	case err != nil || n < 0:
		return fmt.Errorf("want a term number from 0 to %d", int64(math.MaxInt64-1))
	}
	f.n, f.set = n, true
	return nil
}

func (c *cli) repair(ctx context.Context, args []string) int {
	var cmd repairCmd
	fs := cmd.flags()
	if code, ok := c.parse(fs, repairHelp, args); !ok {
		return code
	}
	if !cmd.term.set {
		return c.usageError(fs.Name(), "-term is required: the number of the last term, one less than the next holder's; "+
			"choose it at least as high as any term the fleet, or a system downstream that fences on it, saw")
	}
	l, code, ok := c.open(fs, &cmd.target)
	if !ok {
		return code
	}
	defer l.close()
	s := l.manager.Settings()
	term := cmd.term.n

	var info leaderelection.LeaseInfo
	if err := l.call(ctx, func(ctx context.Context) (err error) {
		info, err = l.manager.Inspect(ctx)
		return err
	}); err != nil {
		return c.fail(err)
	}
	refuse := func(format string, args ...any) int {
		fmt.Fprintf(c.stderr, "leaderctl: not repaired: "+format+"\n", args...)
		return exitRefused
	}
	switch ob, among := parseOwnerBlob(s.Blob); {
	case !info.Exists:
		return refuse("lease blob %s does not exist: nothing to repair (its first holder creates it)", l.name)
	case isHintRole(info.Role):
		// Its metadata is what it says: a record written over it would
		// erase that, and it has no term to repair.
		return refuse("%s is not a lease: its role is %s (%s): it carries no term to repair, and a repair would erase what it says "+
			"(leaderctl status shows whether it reads)", l.name, info.Role, describeRole(info.Role, s.Blob))
	case info.Held():
		return refuse("the lease on %s is held, by %s: the holder's record is its own. Wait until it is free (leaderctl status shows it), then repair",
			l.name, holder(info, time.Now()))
	case info.Role == "" && among:
		// The library's RepairRecord marks a blob that says no role as a
		// mutex's, and the ShardOwner whose name it bears would then never
		// take it again.
		return refuse("%s says no role, and its name puts it among the blobs of the ShardOwner with prefix %q: "+
			"a repair would mark it a mutex's blob, which that ShardOwner never takes; leaderctl cannot repair it", l.name, ob.prefix)
	case info.Role != "" && info.Role != leaderelection.RoleMutex && !isOwnerRole(info.Role):
		// A newer library's role, perhaps: a repair would make it a mutex's.
		return refuse("%s says its role is %q, which this leaderctl does not know: a repair would mark it a mutex's blob", l.name, string(info.Role))
	}
	old := info.Leader.Number // 0 when it does not read: nothing to lower
	if term < old && !cmd.allowLower {
		if old == math.MaxInt64 {
			return refuse("the term on %s is the largest term number, which only a lower one repairs: give -allow-lower "+
				"(a system downstream that fences on the term and saw it refuses every later leader)", l.name)
		}
		return refuse("-term %d is lower than the term on %s, %d: a system downstream that fences on the term would refuse the next leader "+
			"until its term passes %d. Give -term %d or more, or -allow-lower to lower it all the same", term, l.name, old, old, old)
	}
	var before leaderelection.LeaseInfo
	err := l.call(ctx, func(ctx context.Context) (err error) {
		before, err = l.manager.RepairRecord(ctx, term)
		return err
	})
	switch {
	case errors.Is(err, leaderelection.ErrLeaseHeld):
		return refuse("the lease on %s was taken, or the blob written, since it was read: the holder's record is its own. "+
			"Wait until it is free (leaderctl status shows it), then repair", l.name)
	case err != nil:
		return c.fail(err)
	}
	if term < old {
		fmt.Fprintf(c.stderr, "leaderctl: warning: -allow-lower lowered the term on %s from %d to %d: a system downstream that fences on the term "+
			"refuses the next leader until its term passes %d; an instance that saw %d on this blob continues above it\n", l.name, old, term, old, old)
	}

	role := before.Role
	if role == "" {
		role = leaderelection.RoleMutex // what the library writes for a blob that says no role
	}
	fmt.Fprintf(c.stdout, "repaired the record on %s\n", l.name)
	if p := recordProblem(before, s.Container, s.Blob); p != nil {
		fmt.Fprintf(c.stdout, "it was malformed: %s=%q %s\n", p.Key, p.Value, p.Rule)
	} else if before.Leader.Number > 0 {
		fmt.Fprintf(c.stdout, "it read: %s\n", describeTerm(before.Leader, time.Now()))
	}
	if term > 0 {
		fmt.Fprintf(c.stdout, "wrote: leaderkind=%s, the ended term %d (leaderterm=%d, leaderended=now), nothing else\n", role, term, term)
	} else {
		fmt.Fprintf(c.stdout, "wrote: leaderkind=%s, no term, nothing else\n", role)
	}
	if role == leaderelection.RoleSession {
		fmt.Fprintln(c.stdout, "a session's blob is never held again once its lease has ended: the surviving instances collect it")
		return exitOK
	}
	fmt.Fprintf(c.stdout, "the next holder's term is %d (an instance that saw a higher term on this blob continues above that)\n", term+1)
	return exitOK
}
