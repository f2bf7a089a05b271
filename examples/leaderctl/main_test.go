package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azuritetest"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

var leaseCounter atomic.Int64

// newLease names a lease of the test's own on Azurite, and returns the
// settings for contenders on it and the environment for leaderctl.
func newLease(t *testing.T) (leaderelection.BlobSettings, map[string]string) {
	t.Helper()
	s := leaderelection.BlobSettings{
		ConnectionString: azuritetest.ConnectionString(t),
		Container:        fmt.Sprintf("leaderctl-%d-%d", time.Now().UnixNano()%1e9, leaseCounter.Add(1)),
		Blob:             strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-")),
		RetryInterval:    500 * time.Millisecond,
	}
	env := map[string]string{
		"AZURE_STORAGE_CONNECTION_STRING": s.ConnectionString,
		"LEASE_CONTAINER":                 s.Container,
		"LEASE_BLOB":                      s.Blob,
	}
	return s, env
}

type result struct {
	code           int
	stdout, stderr string
}

// leaderctl runs the program as a shell would, with env as its whole
// environment.
func leaderctl(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, func(k string) string { return env[k] }, &stdout, &stderr)
	t.Logf("leaderctl %s -> exit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return result{code, stdout.String(), stderr.String()}
}

// term is one run of a contender's leader func.
type term struct {
	who       string
	start     time.Time
	cancelled time.Time // zero while its context is not done
	cause     error     // context.Cause when it was cancelled
}

// terms records the leader funcs' runs in one test.
type terms struct {
	mu     sync.Mutex
	all    []*term
	starts chan *term
}

func newTerms() *terms { return &terms{starts: make(chan *term, 100)} }

// next waits for the next leader func to start.
func (l *terms) next(t *testing.T, within time.Duration) *term {
	t.Helper()
	select {
	case tm := <-l.starts:
		return tm
	case <-time.After(within):
		t.Fatalf("no leader func started within %v", within)
		return nil
	}
}

// get returns a copy of tm as it is now.
func (l *terms) get(tm *term) term {
	l.mu.Lock()
	defer l.mu.Unlock()
	return *tm
}

// contender runs a BlobDistributedMutex with identity who until the test
// ends. Its leader func leads until its context is cancelled. It returns the
// contender's transport, to cut it off from storage.
func (l *terms) contender(t *testing.T, s leaderelection.BlobSettings, who string, opts ...leaderelection.Option) *faults.Transport {
	t.Helper()
	tr := faults.New()
	s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}}
	m, err := leaderelection.NewBlobDistributedMutex(s, l.leaderFunc(who), l.options(t, who, opts)...)
	l.run(t, who, m, err, tr.Close)
	return tr
}

// quorumContender is contender for a mutex over a quorum of accounts
// (NewQuorumMutex). It returns its transport to each account, to cut it off
// from one.
func (l *terms) quorumContender(t *testing.T, accounts []leaderelection.BlobSettings, who string, opts ...leaderelection.Option) []*faults.Transport {
	t.Helper()
	var trs []*faults.Transport
	var mine []leaderelection.BlobSettings
	for _, s := range accounts {
		tr := faults.New()
		s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}}
		trs, mine = append(trs, tr), append(mine, s)
	}
	m, err := leaderelection.NewQuorumMutex(mine, l.leaderFunc(who), l.options(t, who, opts)...)
	l.run(t, who, m, err, func() {
		for _, tr := range trs {
			tr.Close()
		}
	})
	return trs
}

func (l *terms) options(t *testing.T, who string, opts []leaderelection.Option) []leaderelection.Option {
	return append([]leaderelection.Option{leaderelection.WithIdentity(who), leaderelection.WithLogger(testLogger(t, who))}, opts...)
}

// leaderFunc leads until its context is cancelled, and notes its run.
func (l *terms) leaderFunc(who string) func(context.Context) error {
	return func(leaderCtx context.Context) error {
		tm := &term{who: who, start: time.Now()}
		l.mu.Lock()
		l.all = append(l.all, tm)
		l.mu.Unlock()
		l.starts <- tm
		<-leaderCtx.Done()
		l.mu.Lock()
		tm.cancelled, tm.cause = time.Now(), context.Cause(leaderCtx)
		l.mu.Unlock()
		return nil
	}
}

// run runs m (built with err) until the test ends, then closes its
// transports.
func (l *terms) run(t *testing.T, who string, m *leaderelection.BlobDistributedMutex, err error, closeTransports func()) {
	t.Helper()
	if err != nil {
		closeTransports()
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.RunTaskWhenMutexAcquired(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s: RunTaskWhenMutexAcquired did not return within 30s of cancellation", who)
		}
		closeTransports()
	})
}

// testLogger sends a contender's logs to the test log.
func testLogger(t *testing.T, who string) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, nil)).With("contender", who)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// decode parses status -json output as a script would.
func decode(t *testing.T, out string) map[string]any {
	t.Helper()
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got), "status -json must print one JSON object")
	return got
}

func TestStatusOfALeaseNobodyCreatedSaysNoLeader(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	newRawBlob(t, s) // its container exists: see TestStatusAndShardsSayThatTheContainerDoesNotExist

	r := leaderctl(t, env, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^leader: +no leader \(lease blob does not exist yet`, r.stdout)
	assert.Empty(t, r.stderr)

	r = leaderctl(t, env, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decode(t, r.stdout)
	assert.Equal(t, false, got["exists"])
	assert.Equal(t, false, got["held"])
	assert.Contains(t, got, "leader")
	assert.Nil(t, got["leader"], "leader is null when nobody leads")
	assert.Equal(t, 0.0, got["etagStoodSeconds"], "no ETag has stood")

	r = leaderctl(t, env, "break")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "does not exist yet; nothing to break")
}

func TestStatusShowsTheLeaderItsTermAndTheLease(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	log := newTerms()
	before := time.Now()
	log.contender(t, s, "worker-1")
	log.next(t, 30*time.Second)

	r := leaderctl(t, env, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^leader: +worker-1$`, r.stdout)
	assert.Regexp(t, `(?m)^term: +1$`, r.stdout)
	assert.Regexp(t, `(?m)^since: +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\d+s ago\)$`, r.stdout)
	assert.Regexp(t, `(?m)^lease: +leased, locked, fixed$`, r.stdout)
	assert.Regexp(t, `(?m)^kind: +native lease, declared 15s: Azure expires it that long after its last renewal`, r.stdout)
	assert.NotContains(t, r.stdout, "etag:", "a native lease's ETag says nothing about its holder")
	assert.Regexp(t, `(?m)^blob: +`+regexp.QuoteMeta(s.Container+"/"+s.Blob)+`$`, r.stdout)

	r = leaderctl(t, env, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decode(t, r.stdout)
	assert.Equal(t, true, got["exists"])
	assert.Equal(t, true, got["held"])
	assert.Equal(t, "leased", got["state"])
	assert.Equal(t, "locked", got["status"])
	assert.Equal(t, "fixed", got["duration"])
	assert.Equal(t, "native", got["kind"])
	assert.Equal(t, 15.0, got["declaredSeconds"])
	leader, ok := got["leader"].(map[string]any)
	require.True(t, ok, "leader is an object while someone leads: %v", got["leader"])
	assert.Equal(t, "worker-1", leader["identity"])
	assert.Equal(t, 1.0, leader["term"])
	since, err := time.Parse(time.RFC3339Nano, fmt.Sprint(leader["since"]))
	require.NoError(t, err)
	assert.WithinRange(t, since, before.Add(-time.Second), time.Now())
	assert.NotContains(t, got, "lastLeader")
}

// status shows the priority a leader declared (WithPriority), as text and
// in the JSON; one that declared none shows none.
func TestStatusShowsTheLeadersPriority(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	log := newTerms()
	log.contender(t, s, "worker-1", leaderelection.WithPriority(3))
	log.next(t, 30*time.Second)
	r := leaderctl(t, env, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^priority: +3 \(it hands the lease to a live contender of higher priority: WithPriority\)$`, r.stdout)
	r = leaderctl(t, env, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	leader, ok := decode(t, r.stdout)["leader"].(map[string]any)
	require.True(t, ok)
	assert.Equal(t, 3.0, leader["priority"])

	s2, env2 := newLease(t)
	log.contender(t, s2, "worker-2")
	log.next(t, 30*time.Second)
	r = leaderctl(t, env2, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	leader, ok = decode(t, r.stdout)["leader"].(map[string]any)
	require.True(t, ok)
	assert.NotContains(t, leader, "priority")
}

// An operator breaks the lease with the default, safe period; the deposed
// leader stands aside, and the contender that was waiting takes over once the
// break period has passed, and not before the old leader's func was told its
// lease was lost.
func TestBreakHandsLeadershipToAWaitingContender(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.RenewInterval = time.Second                 // the holder learns of the break within a second
	period := leaderelection.DefaultLeaseDuration // newLease leaves LeaseDuration at its default
	log := newTerms()
	log.contender(t, s, "w1")
	log.contender(t, s, "w2")
	old := log.next(t, 30*time.Second)
	other := map[string]string{"w1": "w2", "w2": "w1"}[old.who]

	breakAt := time.Now()
	r := leaderctl(t, env, "break")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr, "the default period is the safe one: no warning")
	assert.Contains(t, r.stdout, "held by "+old.who+", term 1, since ")
	assert.Regexp(t, `the lease is broken in 1[45]s`, r.stdout, "the safe period is the LeaseDuration")

	next := log.next(t, period+5*time.Second)
	assert.Equal(t, other, next.who, "the waiting contender leads next")
	assert.Less(t, next.start.Sub(breakAt), period+3*time.Second, "taken over within the break period and a few retries")
	assert.GreaterOrEqual(t, next.start.Sub(breakAt), period-time.Second, "nobody can take a lease before its break period ends")
	deposed := log.get(old)
	require.False(t, deposed.cancelled.IsZero(), "the old leader's func was never cancelled")
	assert.Less(t, deposed.cancelled.Sub(breakAt), 3*time.Second, "a connected holder stops at its next renewal, not at the end of the period")
	assert.ErrorIs(t, deposed.cause, leaderelection.ErrLeaseLost)

	r = leaderctl(t, env, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	leader, _ := decode(t, r.stdout)["leader"].(map[string]any)
	assert.Equal(t, other, leader["identity"])
	assert.Equal(t, 2.0, leader["term"])
}

// A shorter period than the safe one is obeyed, with a warning; it can
// shorten a break already under way.
func TestBreakWarnsOfAPeriodShorterThanTheSafeOne(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.LeaseDuration = 20 * time.Second
	s.RenewInterval = time.Second
	log := newTerms()
	log.contender(t, s, "solo")
	first := log.next(t, 30*time.Second)

	r := leaderctl(t, env, "break", "-period", "16s")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "leaderctl: warning: -period 16s is shorter than the safe break period 20s (the LeaseDuration the holder declared)")
	assert.Regexp(t, `the lease is broken in 1[56]s`, r.stdout)

	r = leaderctl(t, env, "break", "-period", "0s")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "leaderctl: warning: -period 0s is shorter than the safe break period 20s")
	assert.Contains(t, r.stdout, "held by solo, term 1, since ")
	assert.Contains(t, r.stdout, "it was already being broken")
	assert.Contains(t, r.stdout, "the lease is broken now")
	assert.Equal(t, "solo", log.next(t, 10*time.Second).who, "once broken, the lease is free again")
	assert.ErrorIs(t, log.get(first).cause, leaderelection.ErrLeaseLost)
}

func TestUsageErrorsExitWith2AndNameTheProblem(t *testing.T) {
	const (
		key = "c2VjcmV0LWtleS0xMjM0NQ==" // must never be printed
		sig = "SECRETSIGNATURE"
	)
	conn := "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + key
	full := map[string]string{"AZURE_STORAGE_CONNECTION_STRING": conn, "LEASE_CONTAINER": "leases", "LEASE_BLOB": "worker"}
	with := func(kv ...string) map[string]string {
		env := map[string]string{}
		for k, v := range full {
			env[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", full, nil, "no command given"},
		{"unknown command", full, []string{"stauts"}, `unknown command "stauts"`},
		{"flags before the command", full, []string{"-blob", "x", "status"}, "flags go after the command"},
		{"unknown flag", full, []string{"status", "-verbose"}, "flag provided but not defined: -verbose"},
		{"stray argument", full, []string{"status", "worker"}, `unexpected argument "worker"`},
		{"missing container", with("LEASE_CONTAINER", ""), []string{"status"}, "-container is required (or set LEASE_CONTAINER)"},
		{"missing blob", with("LEASE_BLOB", ""), []string{"break"}, "-blob is required (or set LEASE_BLOB)"},
		{"empty blob flag overrides the environment", full, []string{"status", "-blob", ""}, "-blob is required"},
		{"no storage account", with("AZURE_STORAGE_CONNECTION_STRING", ""), []string{"status"}, "no storage account given"},
		{"two sources as flags", full, []string{"status", "-connection-string", conn, "-sas-url", "https://acct.blob.core.windows.net/?sig=" + sig},
			"give only one of -connection-string, -account-url and -sas-url, got -connection-string and -sas-url"},
		{"two sources in the environment", with("AZURE_STORAGE_ACCOUNT_URL", "https://acct.blob.core.windows.net/"), []string{"status"},
			"the environment sets more than one storage account (AZURE_STORAGE_CONNECTION_STRING and AZURE_STORAGE_ACCOUNT_URL)"},
		{"negative period", full, []string{"break", "-period", "-1s"}, "invalid -period -1s: must be whole seconds from 0s to 60s"},
		{"period over a minute", full, []string{"break", "-period", "61s"}, "invalid -period 1m1s"},
		{"fractional period", full, []string{"break", "-period", "1500ms"}, "invalid -period 1.5s"},
		{"period without a unit", full, []string{"break", "-period", "10"}, `invalid value "10" for flag -period: want a number with a unit, such as 10s`},
		{"zero timeout", full, []string{"status", "-timeout", "0s"}, "-timeout must be positive"},
		{"bad container name", full, []string{"status", "-container", "Leases"}, `invalid -container: may contain only lowercase letters, digits and hyphens, got "Leases"`},
		{"bad container name from the environment", with("LEASE_CONTAINER", "a"), []string{"status"}, "invalid LEASE_CONTAINER: must be 3 to 63 characters long"},
		{"lease duration out of range", full, []string{"break", "-lease-duration", "2s"}, "invalid -lease-duration: must be from 3s to 24h0m0s"},
		{"native lease duration fractional", full, []string{"break", "-lease-duration", "15500ms"}, "invalid -lease-duration: must be a whole number of seconds from 15s to 60s"},
		{"account key that is not base64", with("AZURE_STORAGE_CONNECTION_STRING", "AccountName=acct;AccountKey=s3cr3t!"+key), []string{"status"},
			"invalid AZURE_STORAGE_CONNECTION_STRING: AccountKey is not valid base64"},
		{"SAS URL of a blob", full, []string{"break", "-sas-url", "https://acct.blob.core.windows.net/leases/worker?sv=2024-01-01&sig=" + sig},
			"invalid -sas-url: must name the account or the container, not a blob"},
		{"account URL over http", full, []string{"status", "-account-url", "http://acct.blob.core.windows.net/"}, "invalid -account-url: must use https"},
		{"help for nothing", full, []string{"help", "lease"}, `no help for "lease"`},
		{"repair without a term", full, []string{"repair"}, "-term is required"},
		{"repair to a negative term", full, []string{"repair", "-term", "-1"}, `invalid value "-1" for flag -term: want a term number from 0 to 9223372036854775806`},
		{"repair to the largest term", full, []string{"repair", "-term", "9223372036854775807"},
			`invalid value "9223372036854775807" for flag -term: no term could follow the largest term number: want one from 0 to 9223372036854775806`},
		{"repair to a term that is not a number", full, []string{"repair", "-term", "x"}, `invalid value "x" for flag -term: want a term number`},
		{"repair without a blob", with("LEASE_BLOB", ""), []string{"repair", "-term", "3"}, "-blob is required (or set LEASE_BLOB)"},
		{"shards without a prefix", full, []string{"shards"}, "-prefix is required (or set LEASE_PREFIX): the ShardOwner's prefix has no default"},
		{"shards takes no blob", full, []string{"shards", "-blob", "x"}, "flag provided but not defined: -blob"},
		{"shards with a prefix a ShardOwner refuses", full, []string{"shards", "-prefix", "jobs/shards/x"}, "invalid -prefix: "},
		{"shards with a prefix from the environment a ShardOwner refuses", with("LEASE_PREFIX", "jobs/sessions/x"), []string{"shards"}, "invalid LEASE_PREFIX: "},
		// The segments parseOwnerBlob takes for a ShardOwner's directories
		// are those the library reserves.
		{"shards with a prefix holding a held segment", full, []string{"shards", "-prefix", "jobs/held/x"}, `invalid -prefix: is a ShardOwner's prefix that lies among the blobs of a ShardOwner with prefix "jobs" (its "held/" directory)`},
		{"shards with a prefix holding a handoff segment", full, []string{"shards", "-prefix", "a/b/handoff"}, `invalid -prefix: is a ShardOwner's prefix that lies among the blobs of a ShardOwner with prefix "a/b" (its "handoff/" directory)`},
		{"quorum without accounts", full, []string{"quorum"}, "no storage account given: give -connection-string, -account-url or -sas-url once per account"},
		{"quorum over two accounts", full, []string{"quorum", "-connection-string", conn, "-account-url", "https://b.blob.core.windows.net/"},
			"a quorum mutex leads over 3 or 5 accounts, got 2"},
		{"quorum with two containers for three accounts", full, []string{"quorum", "-connection-string", conn, "-account-url", "https://b.blob.core.windows.net/",
			"-account-url", "https://c.blob.core.windows.net/", "-container", "a1", "-container", "a2"},
			"give -container once, for every account, or once per account in their order (3), got 2"},
		{"quorum with an account's SAS URL of a blob", full, []string{"quorum", "-connection-string", conn, "-sas-url",
			"https://b.blob.core.windows.net/leases/worker?sv=2024-01-01&sig=" + sig, "-account-url", "https://c.blob.core.windows.net/"},
			"invalid -sas-url of account 1: must name the account or the container, not a blob"},
		{"quorum with an account's container name that is not one", full, []string{"quorum", "-connection-string", conn,
			"-account-url", "https://b.blob.core.windows.net/", "-account-url", "https://c.blob.core.windows.net/",
			"-container", "leases", "-container", "Leases", "-container", "leases"},
			`invalid -container of account 1: may contain only lowercase letters, digits and hyphens, got "Leases"`},
		{"quorum with one account twice", full, []string{"quorum", "-connection-string", conn, "-account-url", "https://b.blob.core.windows.net/",
			"-connection-string", conn}, "accounts 0 and 2 are the same blob"},
		{"quorum with an empty account", full, []string{"quorum", "-sas-url", ""}, `invalid value "" for flag -sas-url: empty`},
		{"shards watched at no interval", with("LEASE_PREFIX", "jobs"), []string{"shards", "-watch", "-interval", "0s"}, "-interval must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := leaderctl(t, tc.env, tc.args...)
			assert.Equal(t, exitUsage, r.code)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, "leaderctl: "+tc.want)
			assert.Regexp(t, `Run "leaderctl( (status|break|repair|shards|quorum) -h| help)" for usage.\n$`, r.stderr)
			assert.NotContains(t, r.stderr, key)
			assert.NotContains(t, r.stderr, sig)
		})
	}
}

func TestStorageFailureExitsWith1WithoutPrintingTheKey(t *testing.T) {
	const key = "c2VjcmV0LWtleS0xMjM0NQ=="
	env := map[string]string{
		// Nothing listens on port 1.
		"AZURE_STORAGE_CONNECTION_STRING": "AccountName=acct;AccountKey=" + key + ";BlobEndpoint=http://127.0.0.1:1/acct",
		"LEASE_CONTAINER":                 "leases",
		"LEASE_BLOB":                      "worker",
	}
	for _, args := range [][]string{{"status"}, {"break"}, {"repair", "-term", "1"}} {
		r := leaderctl(t, env, args...)
		assert.Equal(t, exitFailed, r.code)
		assert.Empty(t, r.stdout)
		assert.Regexp(t, `^leaderctl: get blob properties on leases/worker: connection error: .*\(transient storage error\)\n$`, r.stderr)
		assert.NotContains(t, r.stderr, key)
	}
}

// A flag chooses among the environment's storage accounts, and -timeout
// bounds a storage that does not answer.
func TestFlagOverridesTheEnvironmentAndTimeoutBoundsTheWait(t *testing.T) {
	// A listener that never accepts: the kernel completes the handshake,
	// and the request is never answered.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	env := map[string]string{
		"AZURE_STORAGE_CONNECTION_STRING": "AccountName=acct;AccountKey=c2VjcmV0LWtleS0xMjM0NQ==;BlobEndpoint=http://127.0.0.1:1/acct",
		"AZURE_STORAGE_SAS_URL":           "https://acct.blob.core.windows.net/?sig=SECRETSIGNATURE",
		"LEASE_CONTAINER":                 "leases",
		"LEASE_BLOB":                      "worker",
	}
	start := time.Now()
	r := leaderctl(t, env, "status", "-timeout", "300ms",
		"-connection-string", "AccountName=acct;AccountKey=c2VjcmV0LWtleS0xMjM0NQ==;BlobEndpoint=http://"+silent.Addr().String()+"/acct")
	assert.Equal(t, exitFailed, r.code)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Contains(t, r.stderr, "leaderctl: get blob properties on leases/worker: request timed out (transient storage error); gave up after -timeout 300ms")
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	r := leaderctl(t, nil, "help")
	require.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "leaderctl status [flags]")
	assert.Contains(t, r.stdout, "leaderctl break [flags]")
	assert.Contains(t, r.stdout, "leaderctl repair [flags]")
	assert.Contains(t, r.stdout, "leaderctl shards [flags]")
	assert.Contains(t, r.stdout, "leaderctl quorum [flags]")

	for cmd, fs := range map[string]*flag.FlagSet{
		"status": new(statusCmd).flags(), "break": new(breakCmd).flags(), "repair": new(repairCmd).flags(), "shards": new(shardsCmd).flags(),
		"quorum": new(quorumCmd).flags(),
	} {
		r := leaderctl(t, nil, cmd, "-h")
		require.Equal(t, exitOK, r.code)
		assert.Equal(t, r.stdout, leaderctl(t, nil, "help", cmd).stdout)
		fs.VisitAll(func(f *flag.Flag) {
			assert.Regexp(t, `(?m)^  -`+f.Name+` `, r.stdout, "%s -h must document -%s", cmd, f.Name)
		})
	}
}

// The help states the default break period; it must be the library's.
func TestBreakHelpStatesTheDefaultSafeBreakPeriod(t *testing.T) {
	assert.Contains(t, breakHelp, "LeaseDuration the holder declared in its record")
	assert.Contains(t, breakHelp, "(60s\n                        if it declared none)")
	assert.Equal(t, 60*time.Second, maxBreakPeriod)
}

// status shows an ETag lease's kind, its declared duration and its ETag;
// -watch shows the ETag change with every renewal.
func TestStatusShowsAnETagLeaseAndWhetherItsETagStands(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.LeaseDuration = 3 * time.Second // an ETag lease, renewed every second
	log := newTerms()
	log.contender(t, s, "worker-1")
	log.next(t, 30*time.Second)

	r := leaderctl(t, env, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^leader: +worker-1$`, r.stdout)
	assert.Regexp(t, `(?m)^lease: +leased, locked, infinite$`, r.stdout)
	assert.Regexp(t, `(?m)^kind: +ETag lease, declared 3s: a follower breaks it once its ETag has stood unchanged that long$`, r.stdout)
	assert.Regexp(t, `(?m)^etag: +"0x[0-9A-F]+" unchanged for 0s, as seen from here \(first seen now; -watch D measures it\)$`, r.stdout)
	assert.Regexp(t, `(?m)^written: +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\d+s ago, by the server's clock\): the holder's last renewal$`, r.stdout)

	r = leaderctl(t, env, "status", "-watch", "2500ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^etag: +"0x[0-9A-F]+" unchanged for [0-9.]+m?s, as seen from here \(watched 2\.\ds: changed [1-9]\d* times, the holder is renewing\)$`, r.stdout)

	r = leaderctl(t, env, "status", "-json", "-watch", "1500ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decode(t, r.stdout)
	assert.Equal(t, "infinite", got["duration"])
	assert.Equal(t, "etag", got["kind"])
	assert.Equal(t, 3.0, got["declaredSeconds"])
	assert.Regexp(t, `^"0x[0-9A-F]+"$`, got["etag"])
	assert.GreaterOrEqual(t, got["etagChanges"], 1.0)
	assert.InDelta(t, 1.5, got["watchedSeconds"], 0.5)
	assert.Less(t, got["etagStoodSeconds"], 1.5)
}

// break waits for an ETag lease whose holder is cut off to fall silent for
// the duration it declared, then breaks it: by then the holder has stopped.
func TestBreakWaitsForACutOffETagHolderToFallSilent(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.LeaseDuration = 3 * time.Second
	log := newTerms()
	tr := log.contender(t, s, "w1")
	old := log.next(t, 30*time.Second)
	tr.Blackhole()

	start := time.Now()
	r := leaderctl(t, env, "break")
	took := time.Since(start)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	assert.Contains(t, r.stdout, "is an ETag lease, held by w1, term 1, since ")
	assert.Contains(t, r.stdout, "waiting until its ETag has stood unchanged for 3s, as seen from here")
	assert.Regexp(t, `broke the lease after 3\.\d+s: its ETag stood unchanged for the declared 3s`, r.stdout)
	assert.GreaterOrEqual(t, took, s.LeaseDuration)
	deposed := log.get(old)
	require.False(t, deposed.cancelled.IsZero(), "the cut-off leader had not stopped when its lease was broken")
	assert.ErrorIs(t, deposed.cause, leaderelection.ErrRenewDeadline)

	r = leaderctl(t, env, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decode(t, r.stdout)
	assert.Equal(t, "broken", got["state"])
	assert.Equal(t, false, got["held"])
}

// A live ETag holder keeps renewing, so its ETag never stands: break says so
// and breaks nothing, unless told -force, which breaks at once.
func TestBreakLeavesALiveETagHolderAloneUnlessForced(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.LeaseDuration = 3 * time.Second
	log := newTerms()
	log.contender(t, s, "w1")
	old := log.next(t, 30*time.Second)

	start := time.Now()
	r := leaderctl(t, env, "break")
	assert.Equal(t, exitAlive, r.code)
	assert.Less(t, time.Since(start), s.LeaseDuration, "the first renewal tells it the holder is alive")
	assert.Regexp(t, `leaderctl: not broken: the ETag changed after .*: the holder renewed its lease and is alive. -force breaks it at once`, r.stderr)
	assert.True(t, log.get(old).cancelled.IsZero(), "the live holder still leads")

	broke := time.Now()
	r = leaderctl(t, env, "break", "-force")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "leaderctl: warning: -force broke an ETag lease at once")
	assert.Contains(t, r.stdout, "broke the lease on "+s.Container+"/"+s.Blob+", held by w1, term 1")
	require.Eventually(t, func() bool { return !log.get(old).cancelled.IsZero() }, 3*time.Second, 20*time.Millisecond,
		"a connected holder stops at its next renewal")
	deposed := log.get(old)
	assert.ErrorIs(t, deposed.cause, leaderelection.ErrLeaseLost)
	t.Logf("the holder stopped %v after the forced break", deposed.cancelled.Sub(broke))
}

// A forced break lands even when the live ETag holder renews between
// break's read and its break, which is then refused (412): break reads
// again and breaks the same term. Not parallel: it sets testPolicies,
// which every leaderctl run reads.
func TestForcedBreakReadsAgainWhenTheHolderRenewsMeanwhile(t *testing.T) {
	s, env := newLease(t)
	s.LeaseDuration = 3 * time.Second
	log := newTerms()
	tr := log.contender(t, s, "w1")
	old := log.next(t, 30*time.Second)

	writes := make(chan time.Time, 64) // when each of the holder's writes was sent
	tr.Observe(func(ex faults.Exchange) {
		if ex.Method == http.MethodPut && ex.Status == http.StatusOK && strings.Contains(ex.URL, "/"+s.Blob) {
			select {
			case writes <- ex.Sent:
			default:
			}
		}
	})
	t.Cleanup(func() { tr.Observe(nil) })
	var mu sync.Mutex
	var answers []int // the status of each break
	testPolicies = []policy.Policy{policyFunc(func(req *policy.Request) (*http.Response, error) {
		if !isBreak(req.Raw().Header) {
			return req.Next()
		}
		mu.Lock()
		first := len(answers) == 0
		mu.Unlock()
		if first {
			// Hold the first break until the holder has sent a write
			// since: one the server took after break's read.
			held := time.Now()
			deadline := time.After(10 * time.Second)
			for waiting := true; waiting; {
				select {
				case sent := <-writes:
					waiting = !sent.After(held)
				case <-deadline:
					t.Error("the holder wrote nothing within 10s")
					waiting = false
				}
			}
		}
		resp, err := req.Next()
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			answers = append(answers, resp.StatusCode)
		} else {
			answers = append(answers, 0)
		}
		return resp, err
	})}
	t.Cleanup(func() { testPolicies = nil })

	r := leaderctl(t, env, "break", "-force")
	require.Equal(t, exitOK, r.code, r.stderr)
	mu.Lock()
	assert.Equal(t, []int{http.StatusPreconditionFailed, http.StatusAccepted}, answers,
		"the first break was refused, as the holder renewed meanwhile, and break tried once more")
	mu.Unlock()
	assert.Contains(t, r.stdout, "broke the lease on "+s.Container+"/"+s.Blob+", held by w1, term 1")
	require.Eventually(t, func() bool { return !log.get(old).cancelled.IsZero() }, 3*time.Second, 20*time.Millisecond,
		"a connected holder stops at its next renewal")
	assert.ErrorIs(t, log.get(old).cause, leaderelection.ErrLeaseLost)
}

// isBreak tells a lease break: the SDK writes the header's key in lower
// case, which http.Header.Get does not find.
func isBreak(h http.Header) bool {
	for k, v := range h {
		if strings.EqualFold(k, "x-ms-lease-action") && len(v) > 0 && v[0] == "break" {
			return true
		}
	}
	return false
}

// policyFunc is a policy.Policy made of a function.
type policyFunc func(*policy.Request) (*http.Response, error)

func (f policyFunc) Do(req *policy.Request) (*http.Response, error) { return f(req) }

// Without -period, break uses the LeaseDuration the holder declared in its
// record (30 s here), not leaderctl's own -lease-duration (15 s by default),
// which would let another instance lead while a cut-off holder still acts.
func TestBreakDefaultsToTheDeclaredLeaseDuration(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.LeaseDuration = 30 * time.Second
	log := newTerms()
	log.contender(t, s, "solo")
	log.next(t, 30*time.Second)

	r := leaderctl(t, env, "break")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `the lease is broken in (29|30)s`, r.stdout)
	assert.NotContains(t, r.stderr, "warning")
}

// rawBlob writes blobs as another writer would (a script, a bug): whatever
// metadata it is given, with no lease.
type rawBlob struct {
	t  *testing.T
	cc *container.Client
}

func newRawBlob(t *testing.T, s leaderelection.BlobSettings) rawBlob {
	t.Helper()
	tr := faults.New()
	t.Cleanup(tr.Close)
	client, err := azblob.NewClientFromConnectionString(s.ConnectionString, &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}})
	require.NoError(t, err)
	cc := client.ServiceClient().NewContainerClient(s.Container)
	if _, err := cc.Create(context.Background(), nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		require.NoError(t, err)
	}
	return rawBlob{t, cc}
}

// put creates blob name with metadata md, replacing any.
func (r rawBlob) put(name string, md map[string]string) {
	r.t.Helper()
	meta := map[string]*string{}
	for k, v := range md {
		meta[k] = &v
	}
	_, err := r.cc.NewBlockBlobClient(name).UploadBuffer(context.Background(), nil, &blockblob.UploadBufferOptions{Metadata: meta})
	require.NoError(r.t, err)
}

// inspect reads blob's lease and record with the library, as a fleet would.
func inspect(t *testing.T, s leaderelection.BlobSettings, blob string) leaderelection.LeaseInfo {
	t.Helper()
	s.Blob = blob
	m, err := leaderelection.NewBlobLeaseManager(s, leaderelection.WithLogger(nil))
	require.NoError(t, err)
	defer m.CloseIdleConnections()
	info, err := m.Inspect(context.Background())
	require.NoError(t, err)
	return info
}

// shardOwner is a ShardOwner that runs until the test ends, and reports its
// shard funcs' starts and ends.
type shardOwner struct {
	owner   *leaderelection.ShardOwner
	tr      *faults.Transport // its storage, to cut it off
	mu      sync.Mutex
	running map[string]bool
	stopped []string // shards whose func's context was cancelled
}

// startShardOwner runs a ShardOwner with prefix s.Blob over shards, as who,
// timed for tests: a 4 s session lease, listings every 300 ms.
func startShardOwner(t *testing.T, s leaderelection.BlobSettings, who string, shards ...string) *shardOwner {
	t.Helper()
	tr := faults.New()
	s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}}
	s.LeaseDuration, s.StopMargin, s.RetryInterval = 4*time.Second, 1500*time.Millisecond, 300*time.Millisecond
	so := &shardOwner{tr: tr, running: map[string]bool{}}
	o, err := leaderelection.NewShardOwner(s, shards, func(ctx context.Context, shard string) error {
		so.mu.Lock()
		so.running[shard] = true
		so.mu.Unlock()
		<-ctx.Done()
		so.mu.Lock()
		delete(so.running, shard)
		so.stopped = append(so.stopped, shard)
		so.mu.Unlock()
		return nil
	}, leaderelection.WithIdentity(who), leaderelection.WithLogger(testLogger(t, who)))
	require.NoError(t, err)
	so.owner = o
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s: Run did not return within 30s of cancellation", who)
		}
		tr.Close()
	})
	return so
}

// runs reports whether shard's func runs now.
func (so *shardOwner) runs(shard string) bool {
	so.mu.Lock()
	defer so.mu.Unlock()
	return so.running[shard]
}

// neverStopped reports whether no shard func's context was cancelled.
func (so *shardOwner) neverStopped() bool {
	so.mu.Lock()
	defer so.mu.Unlock()
	return len(so.stopped) == 0
}

// withBlob is env naming another blob in the same container.
func withBlob(env map[string]string, blob string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	out["LEASE_BLOB"] = blob
	return out
}

// A shard's lease is never renewed, so its ETag stands while its func runs,
// and a session's silence is for the survivors to judge: break refuses both,
// -force or not, says why and what to do instead, and sends nothing.
func TestBreakRefusesALiveShardOwnersShardAndSession(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.Blob = "app/jobs"
	so := startShardOwner(t, s, "w1", "eu/s1")
	require.Eventually(t, func() bool { return so.runs("eu/s1") }, 20*time.Second, 50*time.Millisecond, "the shard never ran")
	session := so.owner.Session()
	require.NotEmpty(t, session)
	shardBlob, sessionBlob := "app/jobs/shards/eu/s1", "app/jobs/sessions/"+session

	for _, args := range [][]string{{"break"}, {"break", "-force"}, {"break", "-period", "0s"}} {
		r := leaderctl(t, withBlob(env, shardBlob), args...)
		assert.Equal(t, exitNotByHand, r.code)
		assert.Empty(t, r.stdout)
		assert.Contains(t, r.stderr, `leaderctl: not broken: `+s.Container+`/`+shardBlob+` is the blob of shard "eu/s1" of the ShardOwner with prefix "app/jobs", not a mutex's lease: leaderctl never breaks it, -force or not`)
		assert.Contains(t, r.stderr, "its ETag stands still while its func runs")
		assert.Contains(t, r.stderr, "stop or restart the instance that holds it (w1)")
		assert.Contains(t, r.stderr, "a dead session's shards are taken by the survivors within the session's lease duration")
	}
	r := leaderctl(t, withBlob(env, sessionBlob), "break", "-force")
	assert.Equal(t, exitNotByHand, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, `is the blob of session "`+session+`" of the ShardOwner with prefix "app/jobs"`)
	assert.Contains(t, r.stderr, "the surviving instances break a session's lease themselves")
	assert.Contains(t, r.stderr, "stop or restart the instance that runs it (w1)")

	time.Sleep(2 * time.Second) // a break, had one been sent, would show by now
	for _, blob := range []string{shardBlob, sessionBlob} {
		info := inspect(t, s, blob)
		assert.True(t, info.Held(), "%s: the lease is still held", blob)
		assert.Equal(t, "leased", string(info.State), blob)
	}
	assert.True(t, so.runs("eu/s1"))
	assert.True(t, so.neverStopped(), "no shard func was stopped")
	assert.Equal(t, session, so.owner.Session(), "the session lives on")
}

// status explains a shard's blob as the ShardOwner's, held by the session
// its record names, never broken by hand; and likewise a session's blob.
func TestStatusExplainsAShardAndASessionOfAShardOwner(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.Blob = "app/jobs"
	so := startShardOwner(t, s, "w1", "eu/s1")
	require.Eventually(t, func() bool { return so.runs("eu/s1") }, 20*time.Second, 50*time.Millisecond, "the shard never ran")
	session := so.owner.Session()
	shardEnv, sessionEnv := withBlob(env, "app/jobs/shards/eu/s1"), withBlob(env, "app/jobs/sessions/"+session)

	r := leaderctl(t, shardEnv, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^role: +shard "eu/s1" of the ShardOwner with prefix "app/jobs"$`, r.stdout)
	assert.Regexp(t, `(?m)^session: +`+session+` \(live, run by w1\): the shard is its own while it lives$`, r.stdout)
	assert.Regexp(t, `(?m)^kind: +shard lease: infinite and never renewed \(its ETag stands still while its func runs\)`, r.stdout)
	assert.Regexp(t, `(?m)^break: +never by hand \(leaderctl break refuses it\): it passes to another instance only when its session ends: stop or restart the instance that holds it \(w1\)`, r.stdout)
	assert.NotContains(t, r.stdout, "a follower breaks it", "a shard's lease is not a mutex's ETag lease")
	assert.NotContains(t, r.stdout, "etag:", "a shard's ETag standing still says nothing of its holder")

	r = leaderctl(t, shardEnv, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decode(t, r.stdout)
	assert.Equal(t, "shard", got["role"])
	owner, ok := got["shardOwner"].(map[string]any)
	require.True(t, ok, "shardOwner is an object for a shard: %v", got["shardOwner"])
	assert.Equal(t, "app/jobs", owner["prefix"])
	assert.Equal(t, "eu/s1", owner["shard"])
	assert.Equal(t, session, owner["session"])
	assert.Equal(t, true, owner["sessionLive"])
	assert.Equal(t, "w1", owner["sessionIdentity"])
	assert.NotContains(t, got, "recordError")

	r = leaderctl(t, sessionEnv, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^role: +session "`+session+`" of the ShardOwner with prefix "app/jobs"$`, r.stdout)
	assert.Regexp(t, `(?m)^kind: +session's ETag lease, declared 4s: its instance renews it`, r.stdout)
	assert.Regexp(t, `(?m)^break: +never by hand \(leaderctl break refuses it\): the surviving instances break it themselves`, r.stdout)
	assert.NotContains(t, r.stdout, "a follower breaks it")

	r = leaderctl(t, sessionEnv, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	got = decode(t, r.stdout)
	assert.Equal(t, "session", got["role"])
	owner, ok = got["shardOwner"].(map[string]any)
	require.True(t, ok, "shardOwner is an object for a session: %v", got["shardOwner"])
	assert.Equal(t, "app/jobs", owner["prefix"])
	assert.Equal(t, session, owner["session"])
	assert.Equal(t, true, owner["sessionLive"])
	assert.NotContains(t, owner, "shard")

	r = leaderctl(t, env, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "", decode(t, r.stdout)["role"], "a blob nobody created says no role")
}

// A record whose term does not read is shown with its key, its value, what
// is wrong, and the repair to run.
func TestStatusShowsAMalformedRecordAndTheRepairToRun(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	newRawBlob(t, s).put(s.Blob, map[string]string{"leaderterm": "seven", "leaderkind": "mutex"})

	r := leaderctl(t, env, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^role: +mutex`, r.stdout)
	assert.Regexp(t, `(?m)^record: +malformed: leaderterm="seven" is not a term number`, r.stdout)
	assert.Regexp(t, `(?m)^repair: +leaderctl repair -container `+s.Container+` -blob `+s.Blob+` -term N, N at least as high as any term`, r.stdout)

	r = leaderctl(t, env, "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decode(t, r.stdout)
	assert.Equal(t, "mutex", got["role"])
	rec, ok := got["recordError"].(map[string]any)
	require.True(t, ok, "recordError is an object: %v", got["recordError"])
	assert.Equal(t, "leaderterm", rec["key"])
	assert.Equal(t, "seven", rec["value"])
	assert.Contains(t, rec["rule"], "is not a term number")
	assert.Contains(t, rec["repair"], "leaderctl repair -container "+s.Container+" -blob "+s.Blob+" -term N")
}

// repair rewrites a term that does not read; the record then reads, and the
// next holder's term is one more.
func TestRepairRewritesAGarbageTermAndTheNextHolderContinuesAboveIt(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	newRawBlob(t, s).put(s.Blob, map[string]string{"leaderterm": "seven", "leaderkind": "mutex", "leaderidentity": "someone"})

	r := leaderctl(t, env, "repair", "-term", "41")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	assert.Contains(t, r.stdout, "repaired the record on "+s.Container+"/"+s.Blob)
	assert.Contains(t, r.stdout, `it was malformed: leaderterm="seven" is not a term number`)
	assert.Contains(t, r.stdout, "wrote: leaderkind=mutex, the ended term 41 (leaderterm=41, leaderended=now), nothing else")
	assert.Contains(t, r.stdout, "the next holder's term is 42")
	info := inspect(t, s, s.Blob)
	assert.Nil(t, info.RecordError)
	assert.Equal(t, int64(41), info.Leader.Number)
	assert.Equal(t, leaderelection.RoleMutex, info.Role)
	r = leaderctl(t, env, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^previous: +no identity recorded, term 41, ended \d+s ago$`, r.stdout)
	assert.NotContains(t, r.stdout, "record:")

	log := newTerms()
	log.contender(t, s, "w1")
	log.next(t, 30*time.Second)
	assert.Equal(t, int64(42), inspect(t, s, s.Blob).Leader.Number)
}

// repair never lowers a term that reads unless told -allow-lower, and then
// warns of what fences on it downstream.
func TestRepairRefusesToLowerATermUnlessAllowed(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	newRawBlob(t, s).put(s.Blob, map[string]string{"leaderterm": "7", "leaderkind": "mutex", "leaderleaseduration": "forever"})

	r := leaderctl(t, env, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^record: +malformed: leaderleaseduration="forever" is not a lease duration`, r.stdout)
	assert.Regexp(t, `(?m)^repair: +leaderctl repair -container \S+ -blob \S+ -term 7 \(keeps the term\)$`, r.stdout)

	r = leaderctl(t, env, "repair", "-term", "3")
	assert.Equal(t, exitRefused, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "leaderctl: not repaired: -term 3 is lower than the term on "+s.Container+"/"+s.Blob+", 7")
	assert.Contains(t, r.stderr, "or -allow-lower to lower it all the same")
	info := inspect(t, s, s.Blob)
	assert.Equal(t, int64(7), info.Leader.Number, "nothing written")
	require.NotNil(t, info.RecordError)

	r = leaderctl(t, env, "repair", "-term", "3", "-allow-lower")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "leaderctl: warning: -allow-lower lowered the term on "+s.Container+"/"+s.Blob+" from 7 to 3: "+
		"a system downstream that fences on the term refuses the next leader until its term passes 7")
	assert.Contains(t, r.stdout, "the next holder's term is 4")
	info = inspect(t, s, s.Blob)
	assert.Equal(t, int64(3), info.Leader.Number)
	assert.Nil(t, info.RecordError)
}

// A held lease's record is its holder's own: repair leaves it alone.
func TestRepairRefusesWhileTheLeaseIsHeld(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	log := newTerms()
	log.contender(t, s, "w1")
	first := log.next(t, 30*time.Second)

	r := leaderctl(t, env, "repair", "-term", "10")
	assert.Equal(t, exitRefused, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "leaderctl: not repaired: the lease on "+s.Container+"/"+s.Blob+" is held, by w1, term 1, since ")
	assert.Contains(t, r.stderr, "the holder's record is its own. Wait until it is free")
	info := inspect(t, s, s.Blob)
	assert.True(t, info.Held())
	assert.Equal(t, int64(1), info.Leader.Number)
	assert.True(t, log.get(first).cancelled.IsZero(), "the leader still leads")
}

// A shard whose term does not read never runs; once repaired, it runs above
// the repaired number, and its blob is still a shard's.
func TestRepairOfAShardsRecordLetsTheShardRun(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.Blob = "jobs"
	blob := "jobs/shards/s2"
	newRawBlob(t, s).put(blob, map[string]string{"leaderterm": "x", "leaderkind": "shard"})
	so := startShardOwner(t, s, "w1", "s1", "s2")
	require.Eventually(t, func() bool { return so.runs("s1") }, 20*time.Second, 50*time.Millisecond, "s1 never ran")
	assert.False(t, so.runs("s2"), "no shard runs on a term that does not read")

	r := leaderctl(t, withBlob(env, blob), "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^role: +shard "s2" of the ShardOwner with prefix "jobs"$`, r.stdout)
	assert.Regexp(t, `(?m)^record: +malformed: leaderterm="x"`, r.stdout)

	r = leaderctl(t, withBlob(env, blob), "repair", "-term", "7")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "wrote: leaderkind=shard, the ended term 7")
	assert.Contains(t, r.stdout, "the next holder's term is 8")
	require.Eventually(t, func() bool { return so.runs("s2") }, 20*time.Second, 50*time.Millisecond, "s2 never ran once repaired")
	info := inspect(t, s, blob)
	assert.Equal(t, leaderelection.RoleShard, info.Role)
	assert.Equal(t, int64(8), info.Leader.Number)
	assert.Nil(t, info.RecordError)
}

// The largest term number reads, but no term can follow it: status shows it
// as malformed, and repair lowers it only when told -allow-lower.
func TestTheLargestTermIsRepairedOnlyByLoweringIt(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	newRawBlob(t, s).put(s.Blob, map[string]string{"leaderterm": "9223372036854775807", "leaderkind": "mutex"})

	r := leaderctl(t, env, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^record: +malformed: leaderterm="9223372036854775807" is the largest term number: no term can follow it`, r.stdout)
	assert.Regexp(t, `(?m)^repair: +leaderctl repair .* -term N -allow-lower`, r.stdout)

	r = leaderctl(t, env, "repair", "-term", "100")
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, "is the largest term number, which only a lower one repairs: give -allow-lower")
	assert.Equal(t, int64(math.MaxInt64), inspect(t, s, s.Blob).Leader.Number, "nothing written")

	r = leaderctl(t, env, "repair", "-term", "100", "-allow-lower")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "leaderctl: warning: -allow-lower lowered the term")
	assert.Equal(t, int64(100), inspect(t, s, s.Blob).Leader.Number)
}

// A ShardOwner's prefix is what comes before the first sessions or shards
// segment after the first: no prefix has one there, a shard's name may.
func TestTheShardOwnersPrefixComesFromTheBlobsName(t *testing.T) {
	for _, tc := range []struct {
		blob         string
		ok           bool
		prefix, name string
		role         leaderelection.BlobRole
	}{
		{"jobs/shards/s1", true, "jobs", "s1", leaderelection.RoleShard},
		{"app/jobs/shards/eu/s1", true, "app/jobs", "eu/s1", leaderelection.RoleShard},
		{"a/shards/b/shards/c", true, "a", "b/shards/c", leaderelection.RoleShard},
		{"shards/shards/x", true, "shards", "x", leaderelection.RoleShard},
		{"jobs/sessions/0b1c", true, "jobs", "0b1c", leaderelection.RoleSession},
		{"jobs/held/0b1c", true, "jobs", "0b1c", leaderelection.RoleHeld},
		{"app/jobs/handoff/0b1c/9f-2e-0", true, "app/jobs", "0b1c/9f-2e-0", leaderelection.RoleHandoff},
		{"a/held/b/shards/c", true, "a", "b/shards/c", leaderelection.RoleHeld},
		{"a/shards/held/x", true, "a", "held/x", leaderelection.RoleShard},
		{"held/held/x", true, "held", "x", leaderelection.RoleHeld},
		{"handoff/x", false, "", "", ""},
		{"coordinator", false, "", "", ""},
		{"shards/x", false, "", "", ""},
		{"jobs/shards", false, "", "", ""},
	} {
		ob, ok := parseOwnerBlob(tc.blob)
		assert.Equal(t, tc.ok, ok, tc.blob)
		assert.Equal(t, ownerBlob{prefix: tc.prefix, role: tc.role, name: tc.name}, ob, tc.blob)
	}
	_, ok := ownerOf(leaderelection.RoleSession, "jobs/shards/s1")
	assert.False(t, ok, "a shard's name is not a session's")
	_, ok = ownerOf(leaderelection.RoleHeld, "jobs/held/a/b")
	assert.False(t, ok, "a held list is named by one session ID")
	_, ok = ownerOf(leaderelection.RoleHandoff, "jobs/handoff/r1")
	assert.False(t, ok, "a note is named by its receiver and its giver")

	for name, want := range map[string]noteName{
		"r1/g1-0":                   {"r1", "g1", "0"},
		"r1/6d7dec7b-e819-42c4-0":   {"r1", "6d7dec7b-e819-42c4", "0"},
		"r1/6d7dec7b-e819-42c4-0.2": {"r1", "6d7dec7b-e819-42c4", "0.2"},
	} {
		got, ok := parseNoteName(name)
		assert.True(t, ok, name)
		assert.Equal(t, want, got, name)
	}
	for _, name := range []string{"r1", "r1/g1", "r1/-0", "/g1-0", "r1/g1-0/x"} {
		_, ok := parseNoteName(name)
		assert.False(t, ok, name)
	}

	// The library refuses a prefix holding any of these segments after
	// its first, so that the first one found is the owner's directory.
	s := leaderelection.BlobSettings{ConnectionString: "UseDevelopmentStorage=true", Container: "leases"}
	for dir := range ownerDirs {
		s.Blob = "a/" + dir + "/b"
		_, err := newInspector(s)
		var se *leaderelection.SettingsError
		assert.ErrorAs(t, err, &se, "the library reserves %q", dir)
		s.Blob = dir + "/b"
		_, err = newInspector(s)
		assert.NoError(t, err, "a prefix's first segment may be %q", dir)
	}
}

// leaderctlFor runs the program as leaderctl does, until ctx ends: for
// -watch, which lists until interrupted.
func leaderctlFor(ctx context.Context, t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, func(k string) string { return env[k] }, &stdout, &stderr)
	t.Logf("leaderctl %s -> exit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return result{code, stdout.String(), stderr.String()}
}

// decodeShards parses shards -json output as a script would.
func decodeShards(t *testing.T, out string) shardsReport {
	t.Helper()
	var got shardsReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&got), "shards -json must print one JSON object of the documented structure")
	return got
}

// shardNames are n shard names, s01 to sNN.
func shardNames(n int) []string {
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, fmt.Sprintf("s%02d", i))
	}
	return names
}

// Two owners share 12 shards: shards shows both sessions live, 6 each,
// every shard owned with a term, and nothing unowned; with -shards, each
// shard's owner.
func TestShardsShowsTheSessionsTheSpreadAndEveryShardsOwner(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.Blob = "app/jobs"
	env["LEASE_PREFIX"] = "app/jobs"
	w1 := startShardOwner(t, s, "w1", shardNames(12)...)
	w2 := startShardOwner(t, s, "w2", shardNames(12)...)
	require.Eventually(t, func() bool {
		return len(w1.owner.Owned()) == 6 && len(w2.owner.Owned()) == 6
	}, 40*time.Second, 100*time.Millisecond, "the owners never settled on 6 shards each")
	owners := map[string]string{w1.owner.Session(): "w1", w2.owner.Session(): "w2"}

	var got shardsReport
	// A session's record counts its shards at its next renewal, and its
	// list within a RetryInterval: wait for the listing, the records and
	// the lists to agree.
	require.Eventually(t, func() bool {
		r := leaderctl(t, env, "shards", "-json")
		require.Equal(t, exitOK, r.code, r.stderr)
		got = decodeShards(t, r.stdout)
		for _, se := range got.Sessions {
			if se.HeldByRecord != 6 || se.HeldByList == nil || *se.HeldByList != 6 {
				return false
			}
		}
		return true
	}, 20*time.Second, 500*time.Millisecond, "the sessions' records and lists never said 6 shards each")
	assert.Equal(t, s.Container, got.Container)
	assert.Equal(t, "app/jobs", got.Prefix)
	assert.Equal(t, 2, got.LiveSessions)
	assert.Equal(t, 0, got.DeadSessions)
	require.Len(t, got.Sessions, 2)
	for _, se := range got.Sessions {
		assert.True(t, se.Live, se.ID)
		assert.Equal(t, owners[se.ID], se.Identity, se.ID)
		assert.Equal(t, 6, se.HeldByListing, se.ID)
		assert.Equal(t, listOK, se.List, se.ID)
		assert.Equal(t, 12, se.SetSize, se.ID)
		assert.Len(t, se.ShardSet, 16, se.ID)
		require.NotNil(t, se.Since, se.ID)
		assert.WithinDuration(t, time.Now(), *se.Since, time.Minute, se.ID)
		assert.Equal(t, 4.0, se.Declared, se.ID)
	}
	require.Len(t, got.Sets, 1, "both run the same set")
	assert.Equal(t, 12, got.Sets[0].SetSize)
	assert.Equal(t, 12, got.Sets[0].Held)
	assert.Len(t, got.Sets[0].Sessions, 2)
	require.NotNil(t, got.Spread)
	assert.Equal(t, spreadReport{Min: 6, Max: 6, WithinOne: true}, *got.Spread)
	assert.Equal(t, 12, got.ShardBlobs)
	assert.Equal(t, unownedReport{Names: []string{}}, got.Unowned)
	require.Len(t, got.Shards, 12)
	for i, sh := range got.Shards {
		assert.Equal(t, shardNames(12)[i], sh.Name)
		assert.Equal(t, shardOwned, sh.State, sh.Name)
		assert.Contains(t, owners, sh.Session, sh.Name)
		assert.Equal(t, owners[sh.Session], sh.Identity, sh.Name)
		assert.GreaterOrEqual(t, sh.Term, int64(1), sh.Name)
		if assert.NotNil(t, sh.Since, sh.Name) {
			assert.WithinDuration(t, time.Now(), *sh.Since, time.Minute, sh.Name)
		}
	}

	r := leaderctl(t, env, "shards")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	assert.Regexp(t, `(?m)^prefix: +`+s.Container+`/app/jobs, listed \d{4}-`, r.stdout)
	assert.Regexp(t, `(?m)^sessions: +2 live, 0 dead$`, r.stdout)
	for id, who := range owners {
		assert.Regexp(t, `(?m)^  `+id+` +`+who+` +live +\d{4}-\d\d-\d\dT\S+Z \(\d+s ago\) +6 +6 +6 +[0-9a-f]{16}/12$`, r.stdout)
	}
	assert.Regexp(t, `(?m)^set: +[0-9a-f]{16} \(12 shards\): live sessions: 2, holding 12 of its 12: every shard of the set runs$`, r.stdout)
	assert.Regexp(t, `(?m)^spread: +6 to 6 shards per live session: within one$`, r.stdout)
	assert.Regexp(t, `(?m)^unowned: +none: a live session holds every shard blob$`, r.stdout)
	assert.Regexp(t, `(?m)^shards: +12 blobs \(-shards lists each with its owner and term\)$`, r.stdout)
	assert.NotContains(t, r.stdout, "s01", "without -shards no shard is listed")

	r = leaderctl(t, env, "shards", "-shards")
	require.Equal(t, exitOK, r.code, r.stderr)
	for _, sh := range got.Shards {
		assert.Regexp(t, `(?m)^  `+sh.Name+` +owned +`+sh.Session+` +`+owners[sh.Session]+` +\d+$`, r.stdout)
	}
}

// A shard blob held by a session that is not live, and one nobody holds,
// are unowned; shards counts and names them, and leaves them alone.
func TestShardsCountsTheShardsNoLiveSessionHolds(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.Blob = "jobs"
	env["LEASE_PREFIX"] = "jobs"
	so := startShardOwner(t, s, "w1", "s1", "s2")
	require.Eventually(t, func() bool { return so.runs("s1") && so.runs("s2") }, 20*time.Second, 50*time.Millisecond, "the shards never ran")
	// Written by hand, outside the owner's set, so that it takes neither:
	// a shard a dead session holds (its session's blob has no lease) and
	// a shard nobody holds.
	raw := newRawBlob(t, s)
	raw.put("jobs/sessions/dead-1", map[string]string{"leaderkind": "session", "leaderterm": "1", "leaderidentity": "w0"})
	raw.put("jobs/shards/zz-held", map[string]string{"leaderkind": "shard", "leaderterm": "3", "leaderidentity": "w0", "leadersession": "dead-1"})
	raw.put("jobs/shards/zz-free", map[string]string{"leaderkind": "shard", "leaderterm": "2", "leaderidentity": "w0", "leadersession": "dead-1"})
	// The dead session's list says it held one shard, in a count the
	// library refuses.
	raw.putBody("jobs/held/dead-1", `zz-held 3 1 "0x1"`, map[string]string{"leaderkind": "held", "leaderheld": "one"})
	lc, err := lease.NewBlobClient(raw.cc.NewBlockBlobClient("jobs/shards/zz-held"), nil)
	require.NoError(t, err)
	_, err = lc.AcquireLease(context.Background(), -1, nil)
	require.NoError(t, err)

	r := leaderctl(t, env, "shards", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decodeShards(t, r.stdout)
	assert.Equal(t, 4, got.ShardBlobs)
	assert.Equal(t, unownedReport{Count: 2, Free: 1, DeadHolder: 1, Names: []string{"zz-free", "zz-held"}}, got.Unowned)
	states := map[string]string{}
	for _, sh := range got.Shards {
		states[sh.Name] = sh.State
	}
	assert.Equal(t, map[string]string{"s1": shardOwned, "s2": shardOwned, "zz-free": shardFree, "zz-held": shardDeadHolder}, states)
	assert.Equal(t, 1, got.LiveSessions)
	require.NotNil(t, got.Spread)
	assert.Equal(t, spreadReport{Min: 2, Max: 2, WithinOne: true}, *got.Spread)
	for _, se := range got.Sessions {
		if se.ID == "dead-1" {
			assert.Equal(t, listMalformed, se.List)
			assert.Nil(t, se.HeldByList, "a count that does not read is not shown as one")
		}
	}

	r = leaderctl(t, env, "shards")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^unowned: +2 shard blobs no live session holds \(1 free, 1 held by a dead session\): zz-free, zz-held$`, r.stdout)
	assert.Regexp(t, `(?m)^set: +[0-9a-f]{16} \(2 shards\): live sessions: 1, holding 2 of its 2: every shard of the set runs$`, r.stdout)
	assert.Regexp(t, `(?m)^  dead-1 +w0 +dead +- +1 +0 +bad +-$`, r.stdout)

	r = leaderctl(t, env, "shards", "-shards")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^  zz-held +deadHolder +dead-1 +w0 +3$`, r.stdout)
	assert.Regexp(t, `(?m)^  zz-free +free +dead-1 +w0 +2$`, r.stdout)

	assert.True(t, inspect(t, s, "jobs/shards/zz-held").Held(), "shards breaks nothing")
	assert.True(t, so.neverStopped())
}

// -watch lists again every -interval until interrupted; with -json, one
// object a line.
func TestShardsWatchListsUntilInterrupted(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.Blob = "jobs"
	env["LEASE_PREFIX"] = "jobs"
	so := startShardOwner(t, s, "w1", "s1")
	require.Eventually(t, func() bool { return so.runs("s1") }, 20*time.Second, 50*time.Millisecond, "the shard never ran")

	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	r := leaderctlFor(ctx, t, env, "shards", "-watch", "-interval", "500ms")
	assert.Equal(t, exitOK, r.code, "an interrupted watch ends well")
	assert.Empty(t, r.stderr)
	assert.GreaterOrEqual(t, strings.Count(r.stdout, "\nsessions: "), 2, "it listed at least twice")
	assert.Contains(t, r.stdout, "\n\nprefix: ", "each listing is set apart")

	ctx, cancel = context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	r = leaderctlFor(ctx, t, env, "shards", "-watch", "-json", "-interval", "500ms")
	assert.Equal(t, exitOK, r.code)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	assert.GreaterOrEqual(t, len(lines), 2, "it listed at least twice")
	for _, line := range lines {
		got := decodeShards(t, line)
		assert.Equal(t, 1, got.LiveSessions)
		assert.Equal(t, 0, got.Unowned.Count)
	}
}

// During a rollout that changes the set, the live sessions form two sets;
// the spread is judged within each, a shard whose session the listing has
// not seen is unowned, and the text names only the first unowned shards.
func TestShardsReportJudgesEachSetAndNamesTheFirstUnownedShards(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	info := leaderelection.ShardsInfo{
		Sessions: []leaderelection.SessionInfo{
			{ID: "a", Live: true, Identity: "w1", Since: now.Add(-time.Minute), Owned: 3, ShardSet: "1111111111111111", SetSize: 4},
			{ID: "b", Live: true, Identity: "w2", Since: now.Add(-time.Minute), Owned: 1, ShardSet: "1111111111111111", SetSize: 4},
			{ID: "c", Live: true, Identity: "w3", Since: now.Add(-time.Second), Owned: 0, ShardSet: "2222222222222222", SetSize: 5},
			{ID: "d", Live: false, Identity: "w0"},
		},
	}
	held := func(name, session string) leaderelection.ShardInfo {
		return leaderelection.ShardInfo{Name: name, Held: true, Session: session, Term: leaderelection.Term{Number: 2, Identity: "w"}}
	}
	info.Shards = append(info.Shards, held("k1", "a"), held("k2", "a"), held("k3", "a"), held("k4", "b"),
		held("k5", "d"), held("k6", "e")) // e started after the sessions were listed
	for i := range 25 {
		info.Shards = append(info.Shards, leaderelection.ShardInfo{Name: fmt.Sprintf("z%02d", i)})
	}

	r := newShardsReport("leases", "jobs", info, now, time.Time{})
	assert.Equal(t, 3, r.LiveSessions)
	assert.Equal(t, 1, r.DeadSessions)
	require.Len(t, r.Sets, 2)
	assert.Equal(t, setReport{ShardSet: "1111111111111111", SetSize: 4, Sessions: []string{"a", "b"}, Held: 4,
		Spread: spreadReport{Min: 1, Max: 3}}, r.Sets[0])
	assert.Equal(t, setReport{ShardSet: "2222222222222222", SetSize: 5, Sessions: []string{"c"}, Held: 0,
		Spread: spreadReport{Min: 0, Max: 0, WithinOne: true}}, r.Sets[1])
	assert.Equal(t, &spreadReport{Min: 0, Max: 3}, r.Spread)
	assert.Equal(t, 27, r.Unowned.Count)
	assert.Equal(t, 25, r.Unowned.Free)
	assert.Equal(t, 2, r.Unowned.DeadHolder, "held by a dead session, and by one the listing has not seen")
	assert.Equal(t, []string{"k5", "k6", "z00"}, r.Unowned.Names[:3])

	var out bytes.Buffer
	printShards(&out, r, false)
	t.Log(out.String())
	assert.Contains(t, out.String(), "\nsessions: 3 live, 1 dead\n")
	assert.Regexp(t, `(?m)^  d +w0 +dead +- +1 +0 +\? +-$`, out.String(), "its list was not read")
	assert.Regexp(t, `(?m)^sets: +2: the live sessions run different sets \(a rollout that changes them\?\)`, out.String())
	assert.Contains(t, out.String(), "\n  1111111111111111 (4 shards): live sessions: 2, holding 4 of its 4: every shard of the set runs, 1 to 3 shards per live session: not within one")
	assert.Contains(t, out.String(), "\n  2222222222222222 (5 shards): live sessions: 1, holding 0 of its 5: 5 not held by them")
	assert.Regexp(t, `(?m)^unowned: +27 shard blobs no live session holds \(25 free, 2 held by a dead session\): k5, k6, z00, .*, z17 and 7 more \(-shards or -json lists them all\)$`, out.String())

	r = newShardsReport("leases", "jobs", leaderelection.ShardsInfo{}, now, time.Time{})
	out.Reset()
	printShards(&out, r, true)
	assert.Equal(t, "prefix:   leases/jobs, listed 2026-05-01T12:00:00Z\nsessions: 0 live, 0 dead\nspread:   no live session\n"+
		"unowned:  none: nothing under this prefix: check -container and -prefix\nshards:   0 blobs\n", out.String(),
		"no session and no shard blob is no sign of a healthy fleet")
	b, err := json.Marshal(r)
	require.NoError(t, err)
	assert.JSONEq(t, `{"container":"leases","prefix":"jobs","listed":"2026-05-01T12:00:00Z","liveSessions":0,"silentSessions":0,"deadSessions":0,
		"sessions":[],"sets":[],"spread":null,"shardBlobs":0,"unowned":{"count":0,"free":0,"deadHolder":0,"silentHolder":0,"names":[]},"shards":[]}`, string(b))
}

// A listing that fails ends shards with status 1; under -watch it is
// reported and the watch goes on until interrupted.
func TestShardsReportsAFailedListingAndWatchGoesOn(t *testing.T) {
	env := map[string]string{
		// Nothing listens on port 1.
		"AZURE_STORAGE_CONNECTION_STRING": "AccountName=acct;AccountKey=c2VjcmV0LWtleS0xMjM0NQ==;BlobEndpoint=http://127.0.0.1:1/acct",
		"LEASE_CONTAINER":                 "leases",
		"LEASE_PREFIX":                    "jobs",
	}
	r := leaderctl(t, env, "shards")
	assert.Equal(t, exitFailed, r.code)
	assert.Empty(t, r.stdout)
	assert.Regexp(t, `^leaderctl: .*connection error.*\n$`, r.stderr)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r = leaderctlFor(ctx, t, env, "shards", "-watch", "-interval", "200ms")
	assert.Equal(t, exitFailed, r.code, "the last listing failed")
	assert.Empty(t, r.stdout)
	assert.GreaterOrEqual(t, strings.Count(r.stderr, "leaderctl: "), 2, "it tried again")
}

// putBody creates blob name with body text and metadata md, replacing any.
func (r rawBlob) putBody(name, text string, md map[string]string) {
	r.t.Helper()
	meta := map[string]*string{}
	for k, v := range md {
		meta[k] = &v
	}
	_, err := r.cc.NewBlockBlobClient(name).UploadBuffer(context.Background(), []byte(text), &blockblob.UploadBufferOptions{Metadata: meta})
	require.NoError(r.t, err)
}

// A live session's held list, as the library writes it: status says whose
// it is, that the session is live, how many shards it names by its count
// and by its lines, and that it is a hint, not a lease; every line reads.
func TestStatusExplainsALiveSessionsHeldList(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.Blob = "app/jobs"
	so := startShardOwner(t, s, "w1", "eu/s1", "s2", "s3")
	require.Eventually(t, func() bool { return so.runs("eu/s1") && so.runs("s2") && so.runs("s3") }, 20*time.Second, 50*time.Millisecond, "the shards never ran")
	session := so.owner.Session()
	heldEnv := withBlob(env, "app/jobs/held/"+session)

	// The session writes its list once its shards have changed, within a
	// RetryInterval.
	var got map[string]any
	require.Eventually(t, func() bool {
		r := leaderctl(t, heldEnv, "status", "-json")
		require.Equal(t, exitOK, r.code, r.stderr)
		got = decode(t, r.stdout)
		list, _ := got["heldList"].(map[string]any)
		return list != nil && list["parsed"] == 3.0
	}, 20*time.Second, 300*time.Millisecond, "the session's list never named its 3 shards")
	assert.Equal(t, "held", got["role"])
	assert.Equal(t, false, got["held"], "a held list is never leased")
	owner, ok := got["shardOwner"].(map[string]any)
	require.True(t, ok, "shardOwner is an object for a held list: %v", got["shardOwner"])
	assert.Equal(t, "app/jobs", owner["prefix"])
	assert.Equal(t, session, owner["session"])
	assert.Equal(t, true, owner["sessionLive"])
	assert.Equal(t, "w1", owner["sessionIdentity"])
	list := got["heldList"].(map[string]any)
	assert.Equal(t, "3", list["leaderheld"])
	assert.Equal(t, 3.0, list["lines"])
	assert.Equal(t, false, list["malformed"])
	assert.Equal(t, []any{}, list["problems"])
	shards, ok := list["shards"].([]any)
	require.True(t, ok)
	require.Len(t, shards, 3)
	for i, name := range []string{"eu/s1", "s2", "s3"} {
		e := shards[i].(map[string]any)
		assert.Equal(t, name, e["name"])
		assert.GreaterOrEqual(t, e["term"], 1.0, name)
		assert.GreaterOrEqual(t, e["gen"], 1.0, "%s: claimed, not handed", name)
		assert.Regexp(t, `^"0x[0-9A-F]+"$`, e["etag"], name)
	}
	assert.NotContains(t, got, "recordError")

	r := leaderctl(t, heldEnv, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	assert.Regexp(t, `(?m)^role: +held list of session "`+session+`" of the ShardOwner with prefix "app/jobs"$`, r.stdout)
	assert.Regexp(t, `(?m)^session: +`+session+` \(live, run by w1\): it rewrites its list as its shards change`, r.stdout)
	assert.Regexp(t, `(?m)^list: +3 shards: leaderheld="3", and its 3 lines read$`, r.stdout)
	assert.Regexp(t, `(?m)^  SHARD +TERM +GEN +ETAG$`, r.stdout)
	assert.Regexp(t, `(?m)^  eu/s1 +\d+ +\d+ +"0x[0-9A-F]+"$`, r.stdout)
	assert.Regexp(t, `(?m)^hint: +a hint, not a lease: if the session dies, each survivor takes its part`, r.stdout)
	assert.Regexp(t, `(?m)^break: +nothing to break: it is not a lease \(leaderctl break refuses it\)$`, r.stdout)
	assert.NotContains(t, r.stdout, "leader:", "a held list has no leader")
	assert.NotContains(t, r.stdout, "malformed")
}

// A held list that does not read whole is shown as malformed, with every
// problem and both counts: the library refuses it whole, and nothing it
// names is trusted. Its session, which these lists name, never existed.
func TestStatusReportsAMalformedHeldList(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	raw := newRawBlob(t, s)
	const good = `s1 4 2 "0x8DC1"`
	for _, tc := range []struct {
		name, text string
		md         map[string]string
		list       string   // the list line
		problems   []string // lines under it
		parsed     float64
		lines      float64
	}{
		{"count", good + "\n" + `s2 1 0 "0x8DC2"`, map[string]string{"leaderkind": "held", "leaderheld": "3"},
			`malformed: leaderheld="3", and its 2 lines read: the library refuses it whole`,
			[]string{`leaderheld="3", but the list has 2 lines`}, 2, 2},
		{"line", good + "\n" + `s2 x 1 "0x8DC2"` + "\n" + `s3 1 1`, map[string]string{"leaderkind": "held", "leaderheld": "3"},
			`malformed: leaderheld="3", and 1 of its 3 lines read: the library refuses it whole`,
			[]string{`line 2 does not read: "s2 x 1 \"0x8DC2\"": the term "x" is not a number from 1`,
				`line 3 does not read: "s3 1 1": want 4 fields (name term gen ETag), got 3`}, 1, 3},
		{"newline", good + "\n", map[string]string{"leaderkind": "held", "leaderheld": "1"},
			`malformed: leaderheld="1", and 1 of its 2 lines read`,
			[]string{`line 2 does not read: "": want 4 fields (name term gen ETag), got 0`}, 1, 2},
		{"name and count", `s/../x 1 1 "0x8DC1"` + "\n" + good, map[string]string{"leaderkind": "held", "leaderheld": "3"},
			`malformed: leaderheld="3", and 1 of its 2 lines read`,
			[]string{`line 1 does not read: "s/../x 1 1 \"0x8DC1\"": the shard name '/' must separate non-empty segments other than . and ..`,
				`leaderheld="3", but the list has 2 lines, 1 of which read`}, 1, 2},
		{"name", `s/../x 1 1 "0x8DC1"`, map[string]string{"leaderkind": "held", "leaderheld": "1"},
			`malformed: leaderheld="1", and 0 of its 1 line read`,
			[]string{`line 1 does not read: "s/../x 1 1 \"0x8DC1\"": the shard name '/' must separate non-empty segments other than . and ..`}, 0, 1},
		{"no count", good, map[string]string{"leaderkind": "held"},
			`malformed: no leaderheld, and its 1 line reads`,
			[]string{`no leaderheld count: the library reads no list that does not say how many lines it has`}, 1, 1},
		{"padded count", good, map[string]string{"leaderkind": "held", "leaderheld": "01"},
			`malformed: leaderheld="01", and its 1 line reads`,
			[]string{`leaderheld="01", but the list has 1 line`}, 1, 1},
		{"no role", good, map[string]string{"leaderheld": "1"},
			`malformed: leaderheld="1", and its 1 line reads`,
			[]string{`leaderkind="", not "held": the library reads no list of another role`}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blob := "jobs/held/gone-" + strings.ReplaceAll(tc.name, " ", "-")
			raw.putBody(blob, tc.text, tc.md)
			e := withBlob(env, blob)

			r := leaderctl(t, e, "status")
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Contains(t, r.stdout, "\nlist:     "+tc.list)
			assert.Contains(t, r.stdout, "the survivors would list every shard instead")
			for _, p := range tc.problems {
				assert.Contains(t, r.stdout, "\n  "+p+"\n")
			}
			assert.Regexp(t, `(?m)^session: +gone-\S+ \(ended: its blob is gone\): nothing reads its list any more`, r.stdout)
			if tc.parsed > 0 {
				assert.Regexp(t, `(?m)^  s1 +4 +2 +"0x8DC1"$`, r.stdout, "the lines that read are shown")
			}

			r = leaderctl(t, e, "status", "-json")
			require.Equal(t, exitOK, r.code, r.stderr)
			got := decode(t, r.stdout)
			list, ok := got["heldList"].(map[string]any)
			require.True(t, ok, "heldList is an object for a held list, by its name if its role says none: %v", got["heldList"])
			assert.Equal(t, true, list["malformed"])
			assert.Equal(t, tc.parsed, list["parsed"])
			assert.Equal(t, tc.lines, list["lines"])
			if count, has := tc.md["leaderheld"]; has {
				assert.Equal(t, count, list["leaderheld"], "the count as stored")
			} else {
				assert.Nil(t, list["leaderheld"], "no count stored")
			}
			var problems []string
			for _, p := range list["problems"].([]any) {
				problems = append(problems, p.(string))
			}
			assert.Equal(t, tc.problems, problems)
			owner := got["shardOwner"].(map[string]any)
			assert.Equal(t, false, owner["sessionLive"])
		})
	}
}

// The parse rules are the library's: a list it writes reads whole; one it
// would refuse shows why.
func TestAHeldListReadsByTheLibrarysRules(t *testing.T) {
	role := leaderelection.RoleHeld
	h := parseHeldList(`a 1 1 "0x1"`+"\n"+`b/c 7 0 "0x2"`, role, "2", true)
	assert.Empty(t, h.problems)
	assert.Equal(t, []heldEntry{{"a", 1, 1, `"0x1"`}, {"b/c", 7, 0, `"0x2"`}}, h.entries)
	h = parseHeldList("", role, "0", true)
	assert.Empty(t, h.problems, "an empty list, as putHeld writes it")
	assert.Zero(t, h.lines)
	for _, tc := range []struct{ text, count, want string }{
		{"", "", `leaderheld="", but the list has 0 lines`},
		{`a 0 1 "e"`, "1", `the term "0" is not a number from 1`},
		{`a 1 -1 "e"`, "1", `the gen "-1" is not a number from 0`},
		{`a. 1 1 "e"`, "1", "the shard name must not end with a dot"},
		{`a*b 1 1 "e"`, "1", `the shard name may contain only letters, digits, '/' and - _ . ~ : @ =, got '*'`},
		{strings.Repeat("x", 257) + ` 1 1 "e"`, "1", "the shard name must be at most 256 characters long, got 257"},
		{`a 1 1 "e" extra`, "1", "want 4 fields (name term gen ETag), got 5"},
		{`a 1 1 "e"`, "x", `leaderheld="x", but the list has 1 line`},
	} {
		h := parseHeldList(tc.text, role, tc.count, true)
		if assert.NotEmpty(t, h.problems, tc.text) {
			assert.Contains(t, strings.Join(h.problems, "\n"), tc.want, tc.text)
		}
	}
	assert.Equal(t, []string{`leaderkind="mutex", not "held": the library reads no list of another role`},
		parseHeldList(`a 1 1 "e"`, leaderelection.RoleMutex, "1", true).problems)
}

// A held list that does not exist is shown as none, by its name; break
// refuses a held list and a note, -force or not, and repair leaves them
// alone.
func TestBreakAndRepairRefuseAHeldListAndANote(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	raw := newRawBlob(t, s)
	held, note := "jobs/held/s-1", "jobs/handoff/s-2/s-1-0"

	r := leaderctl(t, withBlob(env, held), "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^role: +by its name, held list of session "s-1" of the ShardOwner with prefix "jobs"$`, r.stdout)
	assert.Regexp(t, `(?m)^session: +s-1 \(ended: its blob is gone\)$`, r.stdout)
	assert.Regexp(t, `(?m)^list: +none: the blob does not exist \(the session holds no shard`, r.stdout)
	assert.NotContains(t, r.stdout, "leader:")
	r = leaderctl(t, withBlob(env, held), "break")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "does not exist yet; nothing to break")

	raw.putBody(held, `s1 1 1 "0x1"`, map[string]string{"leaderkind": "held", "leaderheld": "1"})
	raw.put(note, map[string]string{"leaderkind": "handoff", "leaderhandoff": `s1 2 "0x2"`})
	for blob, role := range map[string]string{held: `held \(held list of session "s-1" of the ShardOwner with prefix "jobs"\)`,
		note: `handoff \(handoff note from session "s-1" to session "s-2" of the ShardOwner with prefix "jobs"\)`} {
		for _, args := range [][]string{{"break"}, {"break", "-force"}, {"break", "-period", "0s"}} {
			r := leaderctl(t, withBlob(env, blob), args...)
			assert.Equal(t, exitNotByHand, r.code)
			assert.Empty(t, r.stdout)
			assert.Regexp(t, `^leaderctl: not broken: `+regexp.QuoteMeta(s.Container+"/"+blob)+` is not a lease: its role is `+role+
				`: there is nothing to break, and leaderctl never breaks it, -force or not\n`, r.stderr)
			assert.Contains(t, r.stderr, "is a hint")
		}
		r := leaderctl(t, withBlob(env, blob), "repair", "-term", "3")
		assert.Equal(t, exitRefused, r.code)
		assert.Empty(t, r.stdout)
		assert.Regexp(t, `^leaderctl: not repaired: `+regexp.QuoteMeta(s.Container+"/"+blob)+` is not a lease: its role is `+role+
			`: it carries no term to repair`, r.stderr)
	}
	assert.Equal(t, leaderelection.RoleHeld, inspect(t, s, held).Role, "nothing written")
	assert.Equal(t, leaderelection.RoleHandoff, inspect(t, s, note).Role, "nothing written")
	r = leaderctl(t, withBlob(env, held), "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "1", decode(t, r.stdout)["heldList"].(map[string]any)["leaderheld"], "the list is as it was")
}

// A note written by hand: status names the giver and the receiver and what
// their blobs say, the entries that read, and those the receiver skips.
func TestStatusExplainsAHandoffNoteAndTheEntriesItSkips(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	raw := newRawBlob(t, s)
	// The receiver's blob exists, unleased: dead. The giver's is gone.
	raw.put("jobs/sessions/r-1", map[string]string{"leaderkind": "session", "leaderterm": "1", "leaderidentity": "w2"})
	note := "jobs/handoff/r-1/g-1-0.1"
	raw.put(note, map[string]string{"leaderkind": "handoff", "leaderhandoff": `s1 3 "0x1";s 2;eu/s2 4 "0x2";x y z`})

	r := leaderctl(t, withBlob(env, note), "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^role: +handoff note from session "g-1" to session "r-1" of the ShardOwner with prefix "jobs"$`, r.stdout)
	assert.Regexp(t, `(?m)^from: +g-1 \(ended: its blob is gone\): the receiver adopts what its note names only on the condition of an acquire`, r.stdout)
	assert.Regexp(t, `(?m)^to: +r-1 \(dead: its lease is not held\): nobody adopts what its notes name`, r.stdout)
	assert.Regexp(t, `(?m)^part: +0\.1: a note too long for one blob goes on in g-1-0\.1, g-1-0\.2\.\.\.$`, r.stdout)
	assert.Regexp(t, `(?m)^shards: +2 handed: s1, eu/s2$`, r.stdout)
	assert.Regexp(t, `(?m)^  eu/s2 +4 +"0x2"$`, r.stdout)
	assert.Regexp(t, `(?m)^skipped: +2 entries do not read \(want "name term ETag"\), and the receiver skips them: "s 2", "x y z"$`, r.stdout)
	assert.Regexp(t, `(?m)^break: +nothing to break: it is not a lease`, r.stdout)

	r = leaderctl(t, withBlob(env, note), "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decode(t, r.stdout)
	assert.Equal(t, "handoff", got["role"])
	h, ok := got["handoff"].(map[string]any)
	require.True(t, ok, "handoff is an object for a note: %v", got["handoff"])
	assert.Equal(t, map[string]any{"id": "g-1", "live": false, "exists": false}, h["from"])
	assert.Equal(t, map[string]any{"id": "r-1", "live": false, "exists": true, "identity": "w2"}, h["to"])
	assert.Equal(t, "0.1", h["part"])
	assert.Equal(t, []any{map[string]any{"name": "s1", "term": 3.0, "etag": `"0x1"`}, map[string]any{"name": "eu/s2", "term": 4.0, "etag": `"0x2"`}}, h["shards"])
	assert.Equal(t, []any{"s 2", "x y z"}, h["skipped"])
	assert.Equal(t, map[string]any{"prefix": "jobs"}, got["shardOwner"])
	assert.NotContains(t, got, "heldList")
}

// A note the library writes as a second session joins: status reads it as
// the receiver does.
func TestStatusExplainsANoteTheLibraryWrote(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.Blob = "jobs"
	w1 := startShardOwner(t, s, "w1", shardNames(4)...)
	require.Eventually(t, func() bool { return len(w1.owner.Owned()) == 4 }, 20*time.Second, 50*time.Millisecond, "w1 never ran the 4 shards")
	w2 := startShardOwner(t, s, "w2", shardNames(4)...)
	require.Eventually(t, func() bool { return len(w2.owner.Owned()) == 2 }, 30*time.Second, 50*time.Millisecond, "w2 never took its 2 shards")
	note := "jobs/handoff/" + w2.owner.Session() + "/" + w1.owner.Session() + "-0"
	require.Equal(t, leaderelection.RoleHandoff, inspect(t, s, note).Role, "w1 handed its shards on without a note")

	r := leaderctl(t, withBlob(env, note), "status", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	h := decode(t, r.stdout)["handoff"].(map[string]any)
	assert.Equal(t, map[string]any{"id": w1.owner.Session(), "live": true, "exists": true, "identity": "w1"}, h["from"])
	assert.Equal(t, map[string]any{"id": w2.owner.Session(), "live": true, "exists": true, "identity": "w2"}, h["to"])
	assert.Equal(t, []any{}, h["skipped"], "every entry the library writes reads")
	var handed []string
	for _, e := range h["shards"].([]any) {
		handed = append(handed, e.(map[string]any)["name"].(string))
	}
	assert.ElementsMatch(t, w2.owner.Owned(), handed)

	r = leaderctl(t, withBlob(env, note), "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^from: +`+w1.owner.Session()+` \(live, run by w1\): the receiver adopts what its note names at once$`, r.stdout)
	assert.Regexp(t, `(?m)^to: +`+w2.owner.Session()+` \(live, run by w2\): it reads its notes while it expects shards`, r.stdout)
	assert.Regexp(t, `(?m)^shards: +2 handed: s0\d, s0\d$`, r.stdout)
	assert.NotContains(t, r.stdout, "part:")
	assert.NotContains(t, r.stdout, "skipped:")
}

// An owner cut off from storage (as good as SIGKILLed: it writes nothing
// more) leaves its session's blob leased, with its record, and the library
// counts it until a survivor breaks it; with no survivor, nobody does.
// shards judges it by its blob's last write against the server's clock: not
// written for longer than the lease duration it declared, it is silent,
// probably dead, not live, and its shards are shown as not running.
func TestShardsCallsASessionSilentLongerThanItDeclaredProbablyDead(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	s.Blob = "jobs"
	env["LEASE_PREFIX"] = "jobs"
	so := startShardOwner(t, s, "w1", "s1", "s2", "s3")
	require.Eventually(t, func() bool { return so.runs("s1") && so.runs("s2") && so.runs("s3") }, 20*time.Second, 50*time.Millisecond, "the shards never ran")

	r := leaderctl(t, env, "shards", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decodeShards(t, r.stdout)
	assert.Equal(t, 1, got.LiveSessions, "a session that renews is live")
	assert.Equal(t, 0, got.SilentSessions)
	require.NotNil(t, got.ServerDate, "Azurite's answer has a Date")

	so.tr.ResetConnections()
	require.Eventually(t, func() bool { return !so.runs("s1") && !so.runs("s2") && !so.runs("s3") }, 10*time.Second, 50*time.Millisecond,
		"the cut-off owner never stopped its shards")
	require.Eventually(t, func() bool {
		r = leaderctl(t, env, "shards", "-json")
		require.Equal(t, exitOK, r.code, r.stderr)
		got = decodeShards(t, r.stdout)
		return got.SilentSessions == 1
	}, 15*time.Second, 500*time.Millisecond, "the session never showed as silent")
	o, err := newInspector(s)
	require.NoError(t, err)
	info, err := o.Inspect(context.Background())
	require.NoError(t, err)
	require.Len(t, info.Sessions, 1)
	require.True(t, info.Sessions[0].Live, "the library still counts it: nobody has broken its lease")

	assert.Equal(t, 0, got.LiveSessions)
	assert.Equal(t, 0, got.DeadSessions)
	require.Len(t, got.Sessions, 1)
	se := got.Sessions[0]
	assert.False(t, se.Live)
	assert.True(t, se.Silent)
	assert.Greater(t, se.SilentSeconds, 4.0, "longer than it declared")
	assert.Equal(t, 4.0, se.Declared)
	require.NotNil(t, se.LastModified)
	assert.Empty(t, got.Sets, "a silent session is in no set's count of running shards")
	assert.Nil(t, got.Spread)
	assert.Equal(t, unownedReport{Count: 3, SilentHolder: 3, Names: []string{"s1", "s2", "s3"}}, got.Unowned)
	for _, sh := range got.Shards {
		assert.Equal(t, shardSilentHolder, sh.State, sh.Name)
	}

	r = leaderctl(t, env, "shards", "-shards")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^sessions: +0 live, 0 dead, 1 silent \(probably dead: see below\)$`, r.stdout)
	assert.Regexp(t, `(?m)^  `+se.ID+` +w1 +silent +`, r.stdout)
	assert.Regexp(t, `(?m)^silent: +`+se.ID+` \(w1\) silent for \d+s \(longer than its declared 4s, by the server's clock\): probably dead; `+
		`the shards it holds \(3\) do not run until a live session of its set breaks its lease and takes them$`, r.stdout)
	assert.Regexp(t, `(?m)^spread: +no live session$`, r.stdout)
	assert.Regexp(t, `(?m)^unowned: +3 shard blobs no live session holds \(0 free, 0 held by a dead session, 3 held by a silent session\): s1, s2, s3$`, r.stdout)
	assert.Regexp(t, `(?m)^  s1 +silentHolder +`+se.ID+` +w1 +\d+$`, r.stdout)
	assert.NotContains(t, r.stdout, "every shard of the set runs")
	assert.NotContains(t, r.stdout, "a live session holds every shard blob")
}

// Without the server's Date, silence is judged by our clock, and the text
// says the clocks may disagree; a session whose record declares no duration,
// or whose blob's last write is unknown, is not judged.
func TestShardsReportJudgesSilenceByOurClockWithoutTheServersDate(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	info := leaderelection.ShardsInfo{
		Sessions: []leaderelection.SessionInfo{
			{ID: "a", Live: true, Identity: "w1", DeclaredDuration: 15 * time.Second, LastModified: now.Add(-25 * time.Second)},
			{ID: "b", Live: true, Identity: "w2", DeclaredDuration: 15 * time.Second, LastModified: now.Add(-5 * time.Second)},
			{ID: "c", Live: true, Identity: "w3", LastModified: now.Add(-time.Hour)},
			{ID: "d", Live: false, Identity: "w4", DeclaredDuration: 15 * time.Second, LastModified: now.Add(-time.Hour)},
		},
		Shards: []leaderelection.ShardInfo{{Name: "k1", Held: true, Session: "a"}, {Name: "k2", Held: true, Session: "b"}},
	}
	r := newShardsReport("leases", "jobs", info, now, time.Time{})
	assert.Nil(t, r.ServerDate)
	assert.Equal(t, 2, r.LiveSessions)
	assert.Equal(t, 1, r.SilentSessions)
	assert.Equal(t, 1, r.DeadSessions, "a dead session is not silent")
	assert.Equal(t, 25.0, r.Sessions[0].SilentSeconds)
	var out bytes.Buffer
	printShards(&out, r, false)
	t.Log(out.String())
	assert.Contains(t, out.String(), "\nsilent:   a (w1) silent for 25s (longer than its declared 15s, by our clock against the server's, which may disagree): probably dead;")

	// The server's clock, 20 s behind ours, says a was written 5 s before
	// it listed: live.
	r = newShardsReport("leases", "jobs", info, now, now.Add(-20*time.Second))
	assert.Equal(t, 3, r.LiveSessions)
	assert.Equal(t, 0, r.SilentSessions)
}

// A container that does not exist is not an empty, healthy state: status
// and shards say so, name the flag to check, and exit with 1. In a
// container that exists, a prefix with nothing under it is named as such.
// Only storage's own ContainerNotFound counts: a SAS that may list and read
// but not read the container's properties still gets the usual answers.
func TestStatusAndShardsSayThatTheContainerDoesNotExist(t *testing.T) {
	t.Parallel()
	s, env := newLease(t)
	env["LEASE_PREFIX"] = "jobs"
	missing := `^leaderctl: container ` + s.Container + ` does not exist: check -container\n$`
	for _, args := range [][]string{{"status"}, {"status", "-json"}, {"shards"}, {"shards", "-json"}} {
		r := leaderctl(t, env, args...)
		assert.Equal(t, exitFailed, r.code, args)
		assert.Empty(t, r.stdout, args)
		assert.Regexp(t, missing, r.stderr, args)
	}

	raw := newRawBlob(t, s) // creates the container
	r := leaderctl(t, env, "status")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^leader: +no leader \(lease blob does not exist yet`, r.stdout)
	r = leaderctl(t, env, "shards")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^sessions: +0 live, 0 dead$`, r.stdout)
	assert.Regexp(t, `(?m)^unowned: +none: nothing under this prefix: check -container and -prefix$`, r.stdout)
	assert.NotContains(t, r.stdout, "every shard blob")

	sasURL, err := raw.cc.GetSASURL(sas.ContainerPermissions{Read: true, List: true}, time.Now().Add(time.Hour), nil)
	require.NoError(t, err)
	sasEnv := map[string]string{"AZURE_STORAGE_SAS_URL": sasURL, "LEASE_CONTAINER": s.Container, "LEASE_BLOB": s.Blob, "LEASE_PREFIX": "jobs"}
	r = leaderctl(t, sasEnv, "status")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^leader: +no leader \(lease blob does not exist yet`, r.stdout)
	r = leaderctl(t, sasEnv, "shards")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^unowned: +none: nothing under this prefix: check -container and -prefix$`, r.stdout)
}
