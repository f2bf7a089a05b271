package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/blobelect/leaderelection"
)

// quorumCmd holds the flags of quorum: a mutex over a majority of 3 or 5
// accounts (leaderelection.NewQuorumMutex), one lease per account.
type quorumCmd struct {
	sources           []accountSource // one per account, in the order given
	containers, blobs names
	timeout           time.Duration
	json              bool
}

// accountSource is one account's source, as given.
type accountSource struct {
	flag  string // -connection-string, -account-url or -sas-url
	value string
}

// sourceFlag appends each value of one kind of source to the accounts, in
// the order given: the three kinds interleave, as the mutex's accounts may
// mix them.
type sourceFlag struct {
	name string
	to   *[]accountSource
}

func (f sourceFlag) String() string { return "" } // never a secret, even in -h

func (f sourceFlag) Set(v string) error {
	if v == "" {
		return errors.New("empty")
	}
	*f.to = append(*f.to, accountSource{"-" + f.name, v})
	return nil
}

// names is a flag given once for every account, or once per account.
type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

func (cmd *quorumCmd) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("quorum", flag.ContinueOnError)
	for _, name := range []string{"connection-string", "account-url", "sas-url"} {
		fs.Var(sourceFlag{name, &cmd.sources}, name, "")
	}
	fs.Var(&cmd.containers, "container", "")
	fs.Var(&cmd.blobs, "blob", "")
	cmd.timeout = 10 * time.Second
	fs.Var((*duration)(&cmd.timeout), "timeout", "")
	fs.BoolVar(&cmd.json, "json", false, "")
	return fs
}

// quorumAccount is one account of the quorum, and what was read there.
type quorumAccount struct {
	index           int
	source          string // the flag that named it
	container, blob string
	session         *session
	server          *serverView

	info     leaderelection.LeaseInfo
	err      error  // the read failed: the account did not answer
	endpoint string // where the read went, without any secret
	missing  bool   // storage said the container does not exist
}

func (c *cli) quorum(ctx context.Context, args []string) int {
	var cmd quorumCmd
	fs := cmd.flags()
	if code, ok := c.parse(fs, quorumHelp, args); !ok {
		return code
	}
	accts, code, ok := c.openQuorum(fs, &cmd)
	if !ok {
		return code
	}
	var wg sync.WaitGroup
	for _, a := range accts {
		defer a.session.close()
		wg.Go(func() { a.read(ctx) })
	}
	wg.Wait()
	v := judge(accts)
	now := time.Now()
	if cmd.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(newQuorumJSON(accts, v, now)); err != nil {
			return c.fail(err)
		}
	} else {
		printQuorum(c.stdout, accts, v, now)
	}
	switch {
	case v.answered < v.need:
		return c.fail(fmt.Errorf("no majority reachable: %d of %d accounts answered (a majority is %d)", v.answered, len(accts), v.need))
	case v.undecided:
		return c.fail(fmt.Errorf("who leads is unknown: the accounts that did not answer could make a majority for %s", describeTerm(v.best, now)))
	case v.allMissing:
		// As status: the library creates the container when it first
		// contends, so one missing on every account is most likely a
		// mistyped name.
		return c.fail(containerMissing(accts[0].container))
	}
	return exitOK
}

// read reads the account's lease, bounded by -timeout.
func (a *quorumAccount) read(ctx context.Context) {
	a.server.begin()
	a.err = a.session.call(ctx, func(ctx context.Context) (err error) {
		a.info, err = a.session.manager.Inspect(ctx)
		return err
	})
	a.endpoint = a.server.endpoint(a.container, a.blob)
	a.missing = a.err == nil && !a.info.Exists && a.server.containerMissing()
}

// openQuorum resolves the flags into one lease manager per account. It
// sends nothing. Every problem is reported at once, as a usage error naming
// the flag and the account.
func (c *cli) openQuorum(fs *flag.FlagSet, cmd *quorumCmd) ([]*quorumAccount, int, bool) {
	k := len(cmd.sources)
	var problems []string
	switch {
	case k == 0:
		problems = append(problems, "no storage account given: give -connection-string, -account-url or -sas-url once per account, "+
			"in the order the mutex was given them (the environment's storage account is not read)")
	case k != 3 && k != 5:
		problems = append(problems, fmt.Sprintf("a quorum mutex leads over 3 or 5 accounts, got %d: "+
			"give -connection-string, -account-url or -sas-url once per account", k))
		k = 0 // no count for -container and -blob to match
	}
	containers, p := c.perAccount(cmd.containers, "container", "LEASE_CONTAINER", "lease's container", k)
	problems = append(problems, p...)
	blobs, p := c.perAccount(cmd.blobs, "blob", "LEASE_BLOB", "lease's blob", k)
	problems = append(problems, p...)
	if cmd.timeout <= 0 {
		problems = append(problems, fmt.Sprintf("-timeout must be positive, got %v", cmd.timeout))
	}
	if len(problems) > 0 || k == 0 {
		return nil, c.usageError(fs.Name(), problems...), false
	}
	for i := range k {
		for j := range i {
			if cmd.sources[i] == cmd.sources[j] && containers[i] == containers[j] && blobs[i] == blobs[j] {
				problems = append(problems, fmt.Sprintf("accounts %d and %d are the same blob: a quorum's accounts are distinct", j, i))
			}
		}
	}

	var accts []*quorumAccount
	closeAll := func() {
		for _, a := range accts {
			a.session.close()
		}
	}
	for i, src := range cmd.sources {
		s := leaderelection.BlobSettings{Container: containers[i].value, Blob: blobs[i].value}
		field := map[string]string{"-connection-string": "ConnectionString", "-account-url": "ServiceURL", "-sas-url": "SASURL"}[src.flag]
		switch field {
		case "ConnectionString":
			s.ConnectionString = src.value
		case "ServiceURL":
			s.ServiceURL = src.value
		default:
			s.SASURL = src.value
		}
		sv := &serverView{}
		s.ClientOptions = clientOptions(sv)
		origin := map[string]string{
			field: fmt.Sprintf("%s of account %d", src.flag, i), "Container": containers[i].origin, "Blob": blobs[i].origin,
			"RequestTimeout": "-timeout",
		}
		m, err := newManager(s, cmd.timeout)
		if err != nil {
			if p := settingsProblems(err, origin); p != nil {
				problems = append(problems, p...)
				continue
			}
			closeAll()
			return nil, c.fail(fmt.Errorf("account %d: %w", i, err)), false
		}
		l := &session{manager: m, name: s.Container + "/" + s.Blob, timeout: cmd.timeout, close: m.CloseIdleConnections}
		accts = append(accts, &quorumAccount{index: i, source: src.flag, container: s.Container, blob: s.Blob, session: l, server: sv})
	}
	if len(problems) > 0 {
		closeAll()
		return nil, c.usageError(fs.Name(), problems...), false
	}
	return accts, exitOK, true
}

// named is a container's or a blob's name, and where it came from.
type named struct{ value, origin string }

// perAccount resolves a name given once for every account, once per
// account (k of them), or by the environment for every account.
func (c *cli) perAccount(given names, name, env, what string, k int) ([]named, []string) {
	all := func(v, origin string) []named {
		out := make([]named, k)
		for i := range out {
			out[i] = named{v, origin}
		}
		return out
	}
	var out []named
	switch {
	case len(given) == 0 && c.env(env) != "":
		out = all(c.env(env), env)
	case len(given) == 0:
		return nil, []string{fmt.Sprintf("-%s is required (or set %s): the %s has no default", name, env, what)}
	case len(given) == 1:
		out = all(given[0], "-"+name)
	case k == 0:
		return nil, nil // the count of accounts is wrong already
	case len(given) == k:
		for i, v := range given {
			out = append(out, named{v, fmt.Sprintf("-%s of account %d", name, i)})
		}
	default:
		return nil, []string{fmt.Sprintf("give -%s once, for every account, or once per account in their order (%d), got %d", name, k, len(given))}
	}
	for _, n := range out {
		if n.value == "" {
			return nil, []string{fmt.Sprintf("-%s is required (or set %s): the %s has no default", name, env, what)}
		}
	}
	return out, nil
}

// quorumVerdict is who leads a quorum mutex, as its accounts read.
type quorumVerdict struct {
	need, answered int
	// leader is the term held on a majority of the accounts, if one is:
	// the leader's (its func runs only while it holds a majority). holds
	// are those accounts.
	leader *leaderelection.Term
	holds  []int
	// best is the term held on the most accounts when none holds a
	// majority; undecided when the accounts that did not answer could
	// still make it one.
	best      leaderelection.Term
	undecided bool
	last      leaderelection.Term // the highest term recorded on the accounts that answered
	// allMissing: every account that answered said its container does not
	// exist.
	allMissing bool
}

// degraded reports whether the leader holds fewer than all the accounts.
func (v quorumVerdict) degraded(k int) bool { return v.leader != nil && len(v.holds) < k }

// judge finds the leader: the term held, and recorded, on a majority of
// the accounts. Terms never repeat, so the accounts that show one term
// (and identity) held are one leader's. An account held whose holder has
// not recorded its term yet counts for no one: a new leader's func starts
// only once a majority has stored its term.
func judge(accts []*quorumAccount) quorumVerdict {
	v := quorumVerdict{need: len(accts)/2 + 1, allMissing: true}
	type key struct {
		number   int64
		identity string
	}
	on := map[key][]int{}
	var best key
	for i, a := range accts {
		if a.err != nil {
			continue
		}
		v.answered++
		v.allMissing = v.allMissing && a.missing
		info := a.info
		if info.Leader.Number > v.last.Number {
			v.last = info.Leader
		}
		if !info.Held() || info.TermPending() || info.Leader.Number == 0 {
			continue
		}
		k := key{info.Leader.Number, info.Leader.Identity}
		on[k] = append(on[k], i)
		if n, m := len(on[k]), len(on[best]); n > m || n == m && k.number > best.number {
			best, v.best = k, info.Leader
		}
	}
	v.allMissing = v.allMissing && v.answered > 0
	switch n := len(on[best]); {
	case n >= v.need:
		v.leader, v.holds = &v.best, on[best]
	case n+len(accts)-v.answered >= v.need:
		v.undecided = true
	}
	return v
}

// printQuorum writes the verdict, then each account's lease.
func printQuorum(w io.Writer, accts []*quorumAccount, v quorumVerdict, now time.Time) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-9s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	k := len(accts)
	answered := fmt.Sprintf("%d of %d accounts answered, a majority is %d", v.answered, k, v.need)
	switch {
	case v.leader != nil:
		line("leader", "%s", describeTerm(*v.leader, now))
		line("holds", "%s: %d of %d (a majority is %d)", accountList(v.holds), len(v.holds), k, v.need)
		if v.degraded(k) {
			var not []string
			for _, a := range accts {
				if !a.leaderHolds(v) {
					not = append(not, fmt.Sprintf("account %d (%s)", a.index, a.notHeld()))
				}
			}
			line("degraded", "the leader holds %d of %d accounts, as read from here: %d more lost and it stops. Not held: %s",
				len(v.holds), k, len(v.holds)-v.need+1, strings.Join(not, "; "))
		}
	case v.answered < v.need:
		line("leader", "unknown: no majority reachable (%s)", answered)
	case v.undecided:
		line("leader", "unknown: %s holds %d of the accounts that answered, and those that did not could make a majority (%s)",
			describeTerm(v.best, now), countHeld(accts, v.best), answered)
	case v.allMissing:
		line("leader", "no leader (the container does not exist on any account that answered: check -container)")
	default:
		line("leader", "no leader (no term is held on a majority: %s)", answered)
		if v.last.Number > 0 {
			line("previous", "%s (the highest term recorded on the accounts that answered)", describeTerm(v.last, now))
		}
	}
	fmt.Fprintln(w, "accounts:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tACCOUNT\tBLOB\tHOLDER\tTERM\tLEASE")
	for _, a := range accts {
		holder, term := a.holder(v)
		fmt.Fprintf(tw, "  %d\t%s\t%s/%s\t%s\t%s\t%s\n", a.index, a.shownEndpoint(), a.container, a.blob, holder, term, a.lease())
	}
	tw.Flush()
}

// accountList is "accounts 0, 1 and 2".
func accountList(idx []int) string {
	s := make([]string, len(idx))
	for i, n := range idx {
		s[i] = fmt.Sprint(n)
	}
	if len(s) == 1 {
		return "account " + s[0]
	}
	return "accounts " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// countHeld is how many accounts that answered show t held.
func countHeld(accts []*quorumAccount, t leaderelection.Term) int {
	n := 0
	for _, a := range accts {
		if a.err == nil && a.info.Held() && !a.info.TermPending() && a.info.Leader.Number == t.Number && a.info.Leader.Identity == t.Identity {
			n++
		}
	}
	return n
}

func (a *quorumAccount) leaderHolds(v quorumVerdict) bool {
	for _, i := range v.holds {
		if i == a.index {
			return true
		}
	}
	return false
}

// shownEndpoint is where the read went, or, if no request was sent, the
// flag that named the account.
func (a *quorumAccount) shownEndpoint() string {
	if a.endpoint == "" {
		return "(" + a.source + ")"
	}
	return a.endpoint
}

// holder is the HOLDER and TERM columns: who holds the lease and its term;
// for a lease nobody holds, "-" and the last term recorded there.
func (a *quorumAccount) holder(v quorumVerdict) (holder, term string) {
	info := a.info
	switch {
	case a.err != nil || !info.Exists:
		return "-", "-"
	case !info.Held():
		if info.Leader.Number == 0 {
			return "-", "-"
		}
		return "-", fmt.Sprintf("%d ended", info.Leader.Number)
	case info.TermPending() || info.Leader.Number == 0:
		return "(term not recorded yet)", "-"
	}
	holder = info.Leader.Identity
	if holder == "" {
		holder = "(no identity recorded)"
	}
	if a.leaderHolds(v) {
		holder += " (leader)"
	}
	return holder, fmt.Sprint(info.Leader.Number)
}

// lease is the LEASE column: its state, or why the account did not answer.
func (a *quorumAccount) lease() string {
	info := a.info
	switch {
	case a.err != nil:
		return "unreachable: " + strings.TrimPrefix(a.err.Error(), "leaderelection: ")
	case a.missing:
		return "container does not exist"
	case !info.Exists:
		return "no blob (nobody has contended here)"
	}
	s := fmt.Sprintf("%s, %s", info.State, info.Status)
	if info.Duration != "" {
		s += ", " + string(info.Duration)
	}
	if info.RecordError != nil {
		s += fmt.Sprintf("; record malformed: %s=%q %s", info.RecordError.Key, info.RecordError.Value, info.RecordError.Rule)
	}
	return s
}

// notHeld says, briefly, why the leader does not hold an account.
func (a *quorumAccount) notHeld() string {
	info := a.info
	switch {
	case a.err != nil:
		return "unreachable from here"
	case a.missing:
		return "its container does not exist"
	case !info.Exists:
		return "no blob"
	case !info.Held():
		return "free: " + string(info.State)
	case info.TermPending() || info.Leader.Number == 0:
		return "held, its holder's term not recorded yet"
	}
	return fmt.Sprintf("held by %s, term %d", info.Leader.Identity, info.Leader.Number)
}

// quorumJSON is what quorum -json prints.
type quorumJSON struct {
	Majority int `json:"majority"` // how many accounts a leader holds
	Answered int `json:"answered"` // how many accounts answered
	// Leader is the term held on a majority of the accounts, null if none
	// is, or if that is unknown ("decided" false).
	Leader *termJSON `json:"leader"`
	// Decided is false when fewer than a majority answered, or the
	// accounts that did not answer could make a majority for a term.
	Decided bool  `json:"decided"`
	Holds   []int `json:"holds"` // the accounts the leader holds
	// Degraded: the leader holds fewer than all the accounts, as read
	// from here.
	Degraded   bool                `json:"degraded"`
	LastLeader *termJSON           `json:"lastLeader,omitempty"` // the highest term recorded, when nobody leads
	Accounts   []quorumAccountJSON `json:"accounts"`
}

type quorumAccountJSON struct {
	Index            int    `json:"index"`
	Endpoint         string `json:"endpoint"` // scheme, host and path: never a key or a SAS token
	Container        string `json:"container"`
	Blob             string `json:"blob"`
	Answered         bool   `json:"answered"`
	Error            string `json:"error,omitempty"` // why it did not answer
	Exists           bool   `json:"exists"`
	ContainerMissing bool   `json:"containerMissing,omitempty"`
	Held             bool   `json:"held"`
	State            string `json:"state,omitempty"`
	Status           string `json:"status,omitempty"`
	Duration         string `json:"duration,omitempty"`
	// Identity and Term are the record's: the holder's while held, unless
	// TermPending (its holder has not recorded its term yet), else the
	// last holder's.
	Identity    string `json:"identity,omitempty"`
	Term        int64  `json:"term"`
	TermPending bool   `json:"termPending,omitempty"`
	LeaderHolds bool   `json:"leaderHolds"` // the leader holds this account
}

func newQuorumJSON(accts []*quorumAccount, v quorumVerdict, now time.Time) quorumJSON {
	out := quorumJSON{
		Majority: v.need, Answered: v.answered, Decided: v.answered >= v.need && !v.undecided,
		Holds: append([]int{}, v.holds...), Degraded: v.degraded(len(accts)),
	}
	if v.leader != nil {
		out.Leader = newTermJSON(*v.leader, now)
	} else if v.last.Number > 0 {
		out.LastLeader = newTermJSON(v.last, now)
	}
	for _, a := range accts {
		info := a.info
		j := quorumAccountJSON{
			Index: a.index, Endpoint: a.shownEndpoint(), Container: a.container, Blob: a.blob, Answered: a.err == nil,
			Exists: info.Exists, ContainerMissing: a.missing, Held: info.Held(), State: string(info.State),
			Status: string(info.Status), Duration: string(info.Duration), Identity: info.Leader.Identity,
			Term: info.Leader.Number, TermPending: info.TermPending(), LeaderHolds: a.leaderHolds(v),
		}
		if a.err != nil {
			j.Error = strings.TrimPrefix(a.err.Error(), "leaderelection: ")
		}
		out.Accounts = append(out.Accounts, j)
	}
	return out
}
