package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain lets the harness start this test binary as a contender.
func TestMain(m *testing.M) {
	MaybeContend()
	goleak.VerifyTestMain(m)
}

// A short chaos run in the test suite, a fault of each kind that the safety
// argument leans on hardest, once each in a fixed order (the long runs, every
// fault kind drawn from a seed, are the chaos command's: BENCHMARKS.md):
// three contender processes, each behind its own proxy, in a fleet that
// mixes lease kinds: native leases at the defaults (c1, c3) and an ETag
// lease of 5 s with a 1 s retry interval (c2). The leader is frozen past
// its lease (SIGSTOP), killed (SIGKILL), cut off from storage, stopped
// (SIGTERM); another writer makes the record malformed, then deletes the
// blob. No two leader funcs ever run at once, except a frozen one that
// returns promptly once thawed; a leader exists again soon after every
// fault heals; every leader that stopped did so before its lease could
// pass to another (by the checker's own account, from the leader's
// requests); terms only grow.
func TestChaosRunHasNoOverlapAndStaysLive(t *testing.T) {
	t.Parallel()
	seed, err := SeedFromEnv()
	require.NoError(t, err)
	t.Logf("seed %d (replay with LEADERELECTION_CHAOS_SEED=%d)", seed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	native, etag := Contender{}, Contender{LeaseDuration: 5 * time.Second, RetryInterval: time.Second}
	sequence := []string{FaultFreeze, FaultMalformed, FaultKill, FaultBlackhole, FaultDeleteBlob, FaultGraceful}
	rep, err := Run(ctx, Config{
		Seed:       seed,
		Contenders: 3,
		Duration:   3 * time.Minute,
		Sequence:   sequence,
		Fleet:      []Contender{native, etag},
		Dir:        t.TempDir(),
		Progress:   testWriter{t},
		Malformed:  true,
		Deletes:    true,
	})
	require.NoError(t, err)
	t.Log("\n" + rep.Summary())

	var kinds []string
	for _, f := range rep.Faults {
		kinds = append(kinds, f.Kind)
	}
	require.Equal(t, sequence, kinds, "every fault of the sequence, in order")
	assert.Empty(t, rep.Overlap, "two leader funcs ran at once")
	assert.Empty(t, rep.Liveness, "no leader long after a fault healed")
	for _, w := range rep.Frozen {
		assert.Less(t, w.AfterCont, time.Second, "a thawed leader must return as soon as its cancelled context is delivered")
	}
	assert.Empty(t, rep.TermOrder, "a term was not above every earlier one")
	assert.Empty(t, rep.UnderMalformed, "a func started on a term that a malformed record hid")
	assert.Empty(t, rep.Messy.Unrepaired, "a malformed record could not be repaired: the blob stayed leased")
	assert.Empty(t, rep.Exits, "a contender gave up")
	assert.Equal(t, 1, rep.Messy.Malformed, "one malformed record written")
	assert.Equal(t, 1, rep.Messy.DeletedBlobs, "the blob deleted once")
	for _, f := range rep.Faults {
		// A frozen leader cannot stop while frozen: its wake is checked
		// above instead.
		if f.StopMarginOK && f.Kind != FaultFreeze {
			assert.Positive(t, f.StopMargin, "after %s, %s's (%s) func returned after its lease could pass to another", f.Kind, f.LeaderAt, f.TargetRuns)
		}
	}
}

// Issue 38, as processes against Azurite: a mixed fleet, the leader (c1)
// on an ETag lease of 61 s, the shortest above the native range, its two
// followers on the default native lease (15 s). The leader is cut off from
// storage (its proxy drops everything) and the container is deleted while
// it is: it learns nothing, and acts on to its deadline, up to 61 s -
// StopMargin (12.2 s) after its last confirmed renewal. A follower finds
// the container gone and creates the blob again; before the fix it took
// the blob after its own settle wait (RenewInterval + RequestTimeout +
// StopMargin + 2 RetryInterval = 16 s) and started its func beside the
// cut-off leader's. Now it waits out the longest lease it read a record of
// the blob declare (61 s). No two funcs at once (the checker's account), a
// new leader after the deletion with a higher term, and the cut-off
// leader's func returned before its lease could pass (by its own
// requests).
func TestChaosCutOffLeaderAndContainerDeletion(t *testing.T) {
	t.Parallel()
	seed, err := SeedFromEnv()
	require.NoError(t, err)
	t.Logf("seed %d (replay with LEADERELECTION_CHAOS_SEED=%d)", seed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	long := Contender{LeaseDuration: 61 * time.Second}
	rep, err := Run(ctx, Config{
		Seed:       seed,
		Contenders: 3,
		Duration:   3 * time.Minute,
		Sequence:   []string{FaultCutOffDelete},
		Fleet:      []Contender{long, {}, {}},
		LeadFirst:  true,
		Dir:        t.TempDir(),
		Progress:   testWriter{t},
	})
	require.NoError(t, err)
	t.Log("\n" + rep.Summary())

	require.Len(t, rep.Faults, 1)
	f := rep.Faults[0]
	require.Equal(t, FaultCutOffDelete, f.Kind)
	require.Equal(t, "c1", f.LeaderAt, "the fault hit the leader on the long ETag lease")
	require.Equal(t, "etag 1m1s", f.TargetRuns)
	assert.Equal(t, 1, rep.Messy.DeletedContainers, "the container deleted under the cut-off leader")
	assert.Empty(t, rep.Overlap, "two leader funcs ran at once")
	assert.Empty(t, rep.Amnesia, "no storage restart to blame")
	assert.Empty(t, rep.TermOrder, "a term was not above every earlier one")
	assert.Empty(t, rep.Liveness, "no leader long after the cut healed")
	assert.Empty(t, rep.Exits, "a contender gave up")
	var old TermSpan
	for _, term := range rep.Terms {
		if term.Who == "c1" && term.Start < f.At {
			old = term
		}
	}
	require.Len(t, rep.Deletions, 1)
	deleted := rep.Deletions[0]
	var next *TermSpan
	for i, term := range rep.Terms {
		if term.Start > deleted && next == nil {
			next = &rep.Terms[i]
		}
	}
	require.NotZero(t, old.Number, "c1 led when the fault began")
	require.NotNil(t, next, "a new leader after the deletion")
	assert.NotEqual(t, "c1", next.Who, "the new leader is a follower that created the blob again")
	assert.Greater(t, next.Number, old.Number, "the term grew across the deletion")
	assert.True(t, f.StopMarginOK, "the cut-off leader's func returned within the fault")
	assert.Positive(t, f.StopMargin, "the cut-off leader's func returned after its lease could pass")
	assert.LessOrEqual(t, old.End, next.Start, "the cut-off leader's func returned before the new one started")
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}
