// Command leaderctl is an operator's tool for a leaderelection lease: it
// shows who leads, breaks the lease when a holder must be made to stop, and
// repairs a record that does not read. For a ShardOwner it shows the
// sessions, who holds each shard, the spread and the shards no live session
// holds. For a mutex over a quorum of accounts (NewQuorumMutex) it shows
// each account's lease and which of them the leader holds.
//
//	AZURE_STORAGE_CONNECTION_STRING=UseDevelopmentStorage=true \
//	  go run ./examples/leaderctl status -container leases -blob coordinator
//	go run ./examples/leaderctl break -account-url https://myaccount.blob.core.windows.net/ \
//	  -container leases -blob coordinator
//	go run ./examples/leaderctl shards -container leases -prefix jobs -watch
//	go run ./examples/leaderctl quorum -account-url https://leases1.blob.core.windows.net/ \
//	  -account-url https://leases2.blob.core.windows.net/ \
//	  -account-url https://leases3.blob.core.windows.net/ -container leases -blob coordinator
//
// Run "leaderctl help" for the flags. It exits with 0 on success, 1 when a
// storage request fails, status or shards finds that the container does
// not exist, or quorum cannot tell who leads (too few accounts answered), 2 on a usage error, 3 when break finds the holder of an ETag
// lease alive and leaves its lease alone, 4 when break is pointed at a
// ShardOwner's session or shard, which it never breaks, or at its held list
// or handoff note, which are no leases, and 5 when repair writes nothing
// (the lease is held, or -term would lower the term).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // a storage request failed, status or shards found no such container, or quorum could not tell who leads
	exitUsage  = 2 // bad command line or environment: nothing was sent
	exitAlive  = 3 // break: the holder of an ETag lease renewed it, or another took the lease, and it was not broken
	// break: the blob is a ShardOwner's session or shard, whose lease is
	// never broken by hand, or its held list or handoff note, which is no
	// lease; nothing was sent after reading it.
	exitNotByHand = 4
	// repair: nothing was written: the lease is held, -term is lower than
	// the term on the blob and -allow-lower was not given, or the blob
	// cannot be repaired (it does not exist, it is a held list or a
	// handoff note, or a repair would change its role).
	exitRefused = 5
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program: args without the program name, env to read
// the environment. It returns the exit code.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	c := &cli{env: env, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		return c.usageError("", "no command given: use status, break, repair, shards or quorum")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "status":
		return c.status(ctx, rest)
	case "break":
		return c.breakLease(ctx, rest)
	case "repair":
		return c.repair(ctx, rest)
	case "shards":
		return c.shards(ctx, rest)
	case "quorum":
		return c.quorum(ctx, rest)
	case "help", "-h", "-help", "--help":
		return c.help(rest)
	default:
		if strings.HasPrefix(cmd, "-") {
			return c.usageError("", fmt.Sprintf("flags go after the command (leaderctl status|break|repair|shards|quorum [flags]), got %q first", cmd))
		}
		return c.usageError("", fmt.Sprintf("unknown command %q: use status, break, repair, shards or quorum", cmd))
	}
}

// cli is one invocation's environment and output streams.
type cli struct {
	env            func(string) string
	stdout, stderr io.Writer
}

func (c *cli) help(args []string) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(c.stdout, mainHelp)
	case len(args) == 1 && args[0] == "status":
		fmt.Fprint(c.stdout, statusHelp)
	case len(args) == 1 && args[0] == "break":
		fmt.Fprint(c.stdout, breakHelp)
	case len(args) == 1 && args[0] == "repair":
		fmt.Fprint(c.stdout, repairHelp)
	case len(args) == 1 && args[0] == "shards":
		fmt.Fprint(c.stdout, shardsHelp)
	case len(args) == 1 && args[0] == "quorum":
		fmt.Fprint(c.stdout, quorumHelp)
	default:
		return c.usageError("", fmt.Sprintf("no help for %q: use status, break, repair, shards or quorum", strings.Join(args, " ")))
	}
	return exitOK
}

// usageError reports problems with the command line, one per line, and
// where to find the usage of cmd ("" for the program).
func (c *cli) usageError(cmd string, problems ...string) int {
	for _, p := range problems {
		fmt.Fprintln(c.stderr, "leaderctl: "+p)
	}
	if cmd == "" {
		fmt.Fprintln(c.stderr, `Run "leaderctl help" for usage.`)
	} else {
		fmt.Fprintf(c.stderr, "Run \"leaderctl %s -h\" for usage.\n", cmd)
	}
	return exitUsage
}

// fail reports a runtime error. The library's errors never carry account
// keys or SAS tokens; its prefix is dropped for our own.
func (c *cli) fail(err error) int {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(c.stderr, "leaderctl: "+strings.TrimPrefix(line, "leaderelection: "))
	}
	return exitFailed
}

// parse parses a command's flags. ok is false when the command must end
// with code: after -h (usage on stdout, 0) or a usage error (2).
func (c *cli) parse(fs *flag.FlagSet, help string, args []string) (code int, ok bool) {
	fs.SetOutput(io.Discard) // errors are reported below, usage on request
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(c.stdout, help)
		return exitOK, false
	case err != nil:
		return c.usageError(fs.Name(), err.Error()), false
	case fs.NArg() > 0:
		return c.usageError(fs.Name(), fmt.Sprintf("unexpected argument %q (all options are flags)", fs.Arg(0))), false
	}
	return exitOK, true
}

// session is the lease a command works on, and how to reach it.
type session struct {
	manager *leaderelection.BlobLeaseManager
	name    string // container/blob, for output
	timeout time.Duration
	close   func() // closes the manager's idle connections
}

// target holds the flags that say where the lease is, common to every
// command, and the timings some commands take.
type target struct {
	connectionString, accountURL, sasURL string
	container, blob                      string
	timeout                              time.Duration
	timings                              bool // register -lease-duration
	leaseDuration                        time.Duration
	// prefix names the blob -prefix (env LEASE_PREFIX): a ShardOwner's
	// prefix, its BlobSettings.Blob, under which its blobs lie.
	prefix bool
	// peek, if set, sees what the manager's requests read of the blob
	// beyond its LeaseInfo (see blobPeek).
	peek *blobPeek
	// server, if set, sees in the answers whether the container exists,
	// and the server's clock (see serverView).
	server *serverView
}

// blobFlag is the flag and the variable that name the blob, and what the
// blob is, for errors.
func (t *target) blobFlag() (flag, env, what string) {
	if t.prefix {
		return "prefix", "LEASE_PREFIX", "ShardOwner's prefix"
	}
	return "blob", "LEASE_BLOB", "lease's blob"
}

func (t *target) register(fs *flag.FlagSet) {
	// Values come from the flags if given, else from the environment (see
	// open): defaults stay empty so that -h never prints a secret.
	fs.StringVar(&t.connectionString, "connection-string", "", "")
	fs.StringVar(&t.accountURL, "account-url", "", "")
	fs.StringVar(&t.sasURL, "sas-url", "", "")
	fs.StringVar(&t.container, "container", "", "")
	name, _, _ := t.blobFlag()
	fs.StringVar(&t.blob, name, "", "")
	t.timeout = 10 * time.Second
	fs.Var((*duration)(&t.timeout), "timeout", "")
	if t.timings {
		fs.Var((*duration)(&t.leaseDuration), "lease-duration", "")
	}
}

// duration is a time.Duration flag whose error says what is expected: the
// flag package's own says only "parse error".
type duration time.Duration

func (d *duration) String() string { return time.Duration(*d).String() }

func (d *duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a number with a unit, such as 10s")
	}
	*d = duration(v)
	return nil
}

// open resolves flags and environment into a lease manager. It sends
// nothing. Every problem with the command line or the environment is
// reported at once, as a usage error naming the flag or variable.
// testPolicies, set only by tests, see every request leaderctl sends.
var testPolicies []policy.Policy

func (c *cli) open(fs *flag.FlagSet, t *target) (*session, int, bool) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var problems []string
	// origin names where each BlobSettings field came from, for errors.
	origin := map[string]string{
		"LeaseDuration": "-lease-duration", "RequestTimeout": "-timeout",
	}
	s := leaderelection.BlobSettings{LeaseDuration: t.leaseDuration}
	var policies []policy.Policy
	if t.peek != nil {
		policies = append(policies, t.peek)
	}
	if t.server != nil {
		policies = append(policies, t.server)
	}
	s.ClientOptions = clientOptions(policies...)

	// Flags win over the environment, as a whole: a source given as a flag
	// makes the environment's sources irrelevant, so a shell with
	// AZURE_STORAGE_CONNECTION_STRING set can still use -account-url.
	// Two sources from the same place are ambiguous, and an error: we do
	// not guess which account an operator meant.
	flagGiven := t.connectionString != "" || t.accountURL != "" || t.sasURL != ""
	var fromFlags, fromEnv []string
	for _, src := range []struct {
		flag, env, field, value string
		dst                     *string
	}{
		{"-connection-string", "AZURE_STORAGE_CONNECTION_STRING", "ConnectionString", t.connectionString, &s.ConnectionString},
		{"-account-url", "AZURE_STORAGE_ACCOUNT_URL", "ServiceURL", t.accountURL, &s.ServiceURL},
		{"-sas-url", "AZURE_STORAGE_SAS_URL", "SASURL", t.sasURL, &s.SASURL},
	} {
		if src.value != "" {
			fromFlags = append(fromFlags, src.flag)
			*src.dst, origin[src.field] = src.value, src.flag
		}
		if v := c.env(src.env); v != "" {
			fromEnv = append(fromEnv, src.env)
			if !flagGiven {
				*src.dst, origin[src.field] = v, src.env
			}
		}
	}
	switch {
	case len(fromFlags) > 1:
		problems = append(problems, "give only one of -connection-string, -account-url and -sas-url, got "+strings.Join(fromFlags, " and "))
	case !flagGiven && len(fromEnv) > 1:
		problems = append(problems, fmt.Sprintf("the environment sets more than one storage account (%s): "+
			"unset all but one, or choose with -connection-string, -account-url or -sas-url", strings.Join(fromEnv, " and ")))
	case !flagGiven && len(fromEnv) == 0:
		problems = append(problems, "no storage account given: use -connection-string, -account-url or -sas-url "+
			"(or AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_ACCOUNT_URL or AZURE_STORAGE_SAS_URL)")
	}

	// No defaults for the container and the blob: break must never act on
	// a lease the operator did not name.
	blobFlag, blobEnv, blobWhat := t.blobFlag()
	for _, n := range []struct {
		flag, env, field, what string
		dst                    *string
		value                  string
	}{
		{"container", "LEASE_CONTAINER", "Container", "lease's container", &s.Container, t.container},
		{blobFlag, blobEnv, "Blob", blobWhat, &s.Blob, t.blob},
	} {
		switch {
		case given[n.flag]:
			*n.dst, origin[n.field] = n.value, "-"+n.flag
		case c.env(n.env) != "":
			*n.dst, origin[n.field] = c.env(n.env), n.env
		default:
			origin[n.field] = "-" + n.flag
		}
		if *n.dst == "" {
			problems = append(problems, fmt.Sprintf("-%s is required (or set %s): the %s has no default", n.flag, n.env, n.what))
		}
	}
	if t.timeout <= 0 {
		problems = append(problems, fmt.Sprintf("-timeout must be positive, got %v", t.timeout))
	}
	if len(problems) > 0 {
		return nil, c.usageError(fs.Name(), problems...), false
	}

	m, err := newManager(s, t.timeout)
	if err != nil {
		if problems := settingsProblems(err, origin); problems != nil {
			return nil, c.usageError(fs.Name(), problems...), false
		}
		return nil, c.fail(err), false
	}
	return &session{manager: m, name: s.Container + "/" + s.Blob, timeout: t.timeout, close: m.CloseIdleConnections}, exitOK, true
}

// clientOptions installs policies, and the tests', in the library's
// pipeline, for BlobSettings.ClientOptions; nil if there are none. Without
// a Transport the library still uses one of its own, which the session's
// close closes.
func clientOptions(policies ...policy.Policy) *azblob.ClientOptions {
	policies = append(policies, testPolicies...)
	if len(policies) == 0 {
		return nil
	}
	return &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{PerCallPolicies: policies}}
}

// newManager builds the lease manager for s, whose requests may take what
// timeout allows. With no ClientOptions the manager uses a transport of its
// own, whose connections session.close closes when the command ends.
func newManager(s leaderelection.BlobSettings, timeout time.Duration) (*leaderelection.BlobLeaseManager, error) {
	m, err := leaderelection.NewBlobLeaseManager(s, leaderelection.WithLogger(nil))
	if err != nil {
		return nil, err
	}
	// Each request is bounded by RequestTimeout (4 s by default), too
	// short for some credentials' first token (the Azure CLI's takes
	// seconds). Let it use what timeout allows, up to the library's limit.
	eff := m.Settings()
	if want := min(timeout, eff.LeaseDuration-eff.StopMargin-eff.RenewInterval); want > eff.RequestTimeout {
		eff.RequestTimeout = want
		return leaderelection.NewBlobLeaseManager(eff, leaderelection.WithLogger(nil))
	}
	return m, nil
}

// settingsProblems rewords the library's settings errors in terms of the
// flags and variables they came from, or returns nil if err is not (only)
// about settings. SettingsError never quotes a secret.
func settingsProblems(err error, origin map[string]string) []string {
	var problems []string
	for _, e := range leaves(err) {
		var se *leaderelection.SettingsError
		if !errors.As(e, &se) {
			return nil
		}
		name := origin[se.Field]
		if name == "" {
			name = "BlobSettings." + se.Field
		}
		problems = append(problems, fmt.Sprintf("invalid %s: %s", name, se.Rule))
	}
	return problems
}

// leaves flattens errors.Join trees.
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

// settingsFor are the settings of the session's manager for another blob
// of the same container, without the session's peek.
func (l *session) settingsFor(blob string) leaderelection.BlobSettings {
	s := l.manager.Settings()
	s.Blob, s.ClientOptions = blob, nil
	return s
}

// call bounds one command's requests by -timeout, and says so when it ran
// out.
func (l *session) call(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	err := fn(ctx)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w; gave up after -timeout %v", err, l.timeout)
	}
	return err
}

// describeTerm is a term on one line: "worker-1, term 3, since
// 2024-05-01T12:00:00Z (3m4s ago)".
func describeTerm(t leaderelection.Term, now time.Time) string {
	who := t.Identity
	if who == "" {
		who = "no identity recorded" // a repaired record, or another writer's
	}
	s := fmt.Sprintf("%s, term %d", who, t.Number)
	if !t.Since.IsZero() {
		s += fmt.Sprintf(", since %s (%s)", t.Since.UTC().Format(time.RFC3339), ago(t.Since, now))
	}
	return s
}

// ago says how long before now t was, to the second. The leader's clock
// wrote t; ours may disagree.
func ago(t, now time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		return fmt.Sprintf("%v from now: the clocks disagree", -d)
	}
	return fmt.Sprintf("%v ago", d)
}
