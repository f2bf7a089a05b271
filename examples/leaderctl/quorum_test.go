package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/blobelect/leaderelection"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unreachable is an account nothing answers for (nothing listens on port
// 1), with a key that must never be printed; so is unreachableSig, its SAS
// signature.
const (
	unreachableKey = "c2VjcmV0LWtleS0xMjM0NQ=="
	unreachableSig = "SECRETSIGNATURE"
	unreachable    = "AccountName=acct;AccountKey=" + unreachableKey + ";BlobEndpoint=http://127.0.0.1:1/acct"
)

// quorumLeases names the blobs of a quorum mutex over 3 accounts on
// Azurite: a container of its own stands for each account.
func quorumLeases(t *testing.T) []leaderelection.BlobSettings {
	base, _ := newLease(t)
	var accounts []leaderelection.BlobSettings
	for i := range 3 {
		s := base
		s.Container = fmt.Sprintf("%s-a%d", base.Container, i)
		accounts = append(accounts, s)
	}
	return accounts
}

// quorumArgs are leaderctl quorum's arguments for accounts, each reached by
// its connection string unless sources names another flag and value for it
// (index, flag, value).
func quorumArgs(accounts []leaderelection.BlobSettings, sources ...any) []string {
	args := []string{"quorum"}
	for i, s := range accounts {
		flag, value := "-connection-string", s.ConnectionString
		for j := 0; j < len(sources); j += 3 {
			if sources[j].(int) == i {
				flag, value = sources[j+1].(string), sources[j+2].(string)
			}
		}
		args = append(args, flag, value, "-container", s.Container)
	}
	return append(args, "-blob", accounts[0].Blob, "-timeout", "3s")
}

// noSecret checks that no key and no SAS signature was printed.
func noSecret(t *testing.T, r result, accounts []leaderelection.BlobSettings) {
	t.Helper()
	key := regexp.MustCompile(`AccountKey=([^;]+)`).FindStringSubmatch(accounts[0].ConnectionString)
	require.Len(t, key, 2)
	for _, out := range []string{r.stdout, r.stderr} {
		assert.NotContains(t, out, key[1])
		assert.NotContains(t, out, unreachableKey)
		assert.NotContains(t, out, "sig=")
		assert.NotContains(t, out, unreachableSig)
		assert.NotContains(t, out, "AccountKey")
	}
}

// accountLine matches account i's line: its endpoint, blob, holder, term
// and lease.
func accountLine(i int, endpoint, blob, holder, term, lease string) string {
	return fmt.Sprintf(`(?m)^  %d  %s +%s +%s +%s +%s$`, i, endpoint, regexp.QuoteMeta(blob), holder, term, lease)
}

func TestQuorumShowsTheLeaderAndTheAccountsItHolds(t *testing.T) {
	t.Parallel()
	accounts := quorumLeases(t)
	log := newTerms()
	log.quorumContender(t, accounts, "worker-1")
	log.next(t, 30*time.Second)

	// Account 1 is read with a SAS URL of its container: the kinds mix.
	sasURL, err := newRawBlob(t, accounts[1]).cc.GetSASURL(sas.ContainerPermissions{Read: true}, time.Now().Add(time.Hour), nil)
	require.NoError(t, err)
	args := quorumArgs(accounts, 1, "-sas-url", sasURL)
	r := leaderctl(t, nil, args...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr)
	noSecret(t, r, accounts)
	m := regexp.MustCompile(`(?m)^leader: +worker-1, term (\d+), since \S+ \(\d+s ago\)$`).FindStringSubmatch(r.stdout)
	require.Len(t, m, 2, "leader line")
	assert.Regexp(t, `(?m)^holds: +accounts 0, 1 and 2: 3 of 3 \(a majority is 2\)$`, r.stdout)
	assert.NotContains(t, r.stdout, "degraded")
	for i, s := range accounts {
		assert.Regexp(t, accountLine(i, `http://\S+/devstoreaccount1`, s.Container+"/"+s.Blob, `worker-1 \(leader\)`, m[1], "leased, locked, fixed"), r.stdout)
	}

	r = leaderctl(t, nil, append(args, "-json")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	noSecret(t, r, accounts)
	got := decode(t, r.stdout)
	assert.Equal(t, true, got["decided"])
	assert.Equal(t, false, got["degraded"])
	assert.Equal(t, []any{0.0, 1.0, 2.0}, got["holds"])
	assert.Equal(t, "worker-1", got["leader"].(map[string]any)["identity"])
	assert.Equal(t, m[1], fmt.Sprint(got["leader"].(map[string]any)["term"]))
	for i, a := range got["accounts"].([]any) {
		a := a.(map[string]any)
		assert.Equal(t, true, a["leaderHolds"], i)
		assert.Equal(t, "leased", a["state"], i)
		assert.Regexp(t, `^http://[^?]+/devstoreaccount1$`, a["endpoint"], i)
	}
}

// The leader holds fewer than all the accounts, as read from here: one that
// does not answer leaderctl, then one it was cut off from and whose lease
// was broken. With two that do not answer, who leads is unknown.
func TestQuorumSaysDegradedAndNamesTheAccountsTheLeaderDoesNotHold(t *testing.T) {
	t.Parallel()
	accounts := quorumLeases(t)
	log := newTerms()
	trs := log.quorumContender(t, accounts, "worker-1")
	log.next(t, 30*time.Second)

	r := leaderctl(t, nil, quorumArgs(accounts, 2, "-sas-url", "http://127.0.0.1:1/acct?sv=2024-01-01&sp=r&sig="+unreachableSig)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	noSecret(t, r, accounts)
	assert.Regexp(t, `(?m)^leader: +worker-1, term \d+`, r.stdout)
	assert.Regexp(t, `(?m)^holds: +accounts 0 and 1: 2 of 3 \(a majority is 2\)$`, r.stdout)
	assert.Regexp(t, `(?m)^degraded: +the leader holds 2 of 3 accounts, as read from here: 1 more lost and it stops. Not held: account 2 \(unreachable from here\)$`, r.stdout)
	assert.Regexp(t, accountLine(2, regexp.QuoteMeta("http://127.0.0.1:1/acct"), accounts[2].Container+"/"+accounts[2].Blob, "-", "-",
		`unreachable: get blob properties on \S+: connection error: .*\(transient storage error\)`), r.stdout)

	// Cut off from account 2, whose lease is then broken, the leader leads
	// on over the other two.
	trs[2].Blackhole()
	m, err := leaderelection.NewBlobLeaseManager(accounts[2], leaderelection.WithLogger(nil))
	require.NoError(t, err)
	defer m.CloseIdleConnections()
	_, err = m.Break(context.Background(), 0)
	require.NoError(t, err)
	r = leaderctl(t, nil, quorumArgs(accounts)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^degraded: +the leader holds 2 of 3 accounts, as read from here: 1 more lost and it stops. Not held: account 2 \(free: broken\)$`, r.stdout)
	assert.Regexp(t, accountLine(2, `\S+`, accounts[2].Container+"/"+accounts[2].Blob, "-", `\d+ ended`, "broken, unlocked"), r.stdout)
	r = leaderctl(t, nil, append(quorumArgs(accounts), "-json")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	got := decode(t, r.stdout)
	assert.Equal(t, true, got["degraded"])
	assert.Equal(t, []any{0.0, 1.0}, got["holds"])

	// Account 1 does not answer either: the leader holds account 0 of the
	// two that answered, and account 1 could make its majority.
	r = leaderctl(t, nil, quorumArgs(accounts, 1, "-connection-string", unreachable)...)
	assert.Equal(t, exitFailed, r.code)
	noSecret(t, r, accounts)
	assert.Regexp(t, `(?m)^leader: +unknown: worker-1, term \d+, since .* holds 1 of the accounts that answered, and those that did not could make a majority \(2 of 3 accounts answered, a majority is 2\)$`, r.stdout)
	assert.Regexp(t, `^leaderctl: who leads is unknown: the accounts that did not answer could make a majority for worker-1, term \d+`, r.stderr)

	// Two accounts do not answer: no majority reachable.
	r = leaderctl(t, nil, quorumArgs(accounts, 1, "-connection-string", unreachable, 2, "-connection-string", unreachable)...)
	assert.Equal(t, exitFailed, r.code)
	noSecret(t, r, accounts)
	assert.Regexp(t, `(?m)^leader: +unknown: no majority reachable \(1 of 3 accounts answered, a majority is 2\)$`, r.stdout)
	assert.Regexp(t, accountLine(0, `\S+`, accounts[0].Container+"/"+accounts[0].Blob, `worker-1`, `\d+`, "leased, locked, fixed"), r.stdout)
	assert.Equal(t, "leaderctl: no majority reachable: 1 of 3 accounts answered (a majority is 2)\n", r.stderr)
	r = leaderctl(t, nil, append(quorumArgs(accounts, 1, "-connection-string", unreachable, 2, "-connection-string", unreachable), "-json")...)
	assert.Equal(t, exitFailed, r.code)
	got = decode(t, r.stdout)
	assert.Equal(t, false, got["decided"])
	assert.Nil(t, got["leader"])
	assert.Equal(t, 1.0, got["answered"])
}

// Nobody contends: no leader once the containers exist, and while none
// does, the container is said to be missing, as by status.
func TestQuorumWithNoLeaderAndWithNoContainer(t *testing.T) {
	t.Parallel()
	accounts := quorumLeases(t)
	r := leaderctl(t, nil, quorumArgs(accounts)...)
	assert.Equal(t, exitFailed, r.code)
	assert.Equal(t, "leaderctl: container "+accounts[0].Container+" does not exist: check -container\n", r.stderr)
	assert.Regexp(t, accountLine(1, `\S+`, accounts[1].Container+"/"+accounts[1].Blob, "-", "-", "container does not exist"), r.stdout)
	assert.Regexp(t, `(?m)^leader: +no leader \(the container does not exist on any account that answered: check -container\)$`, r.stdout)

	for _, s := range accounts {
		newRawBlob(t, s)
	}
	r = leaderctl(t, nil, quorumArgs(accounts)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	noSecret(t, r, accounts)
	assert.Regexp(t, `(?m)^leader: +no leader \(no term is held on a majority: 3 of 3 accounts answered, a majority is 2\)$`, r.stdout)
	assert.Regexp(t, accountLine(0, `\S+`, accounts[0].Container+"/"+accounts[0].Blob, "-", "-", `no blob \(nobody has contended here\)`), r.stdout)
	assert.NotContains(t, r.stdout, "previous")
	assert.Equal(t, 3, strings.Count(r.stdout, "no blob"))
}
