package shardchaos

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain lets the harness start this test binary as an instance.
func TestMain(m *testing.M) {
	MaybeInstance()
	goleak.VerifyTestMain(m)
}

// Four ShardOwner processes share 40 shards, each behind its own proxy, and
// are SIGKILLed, frozen past their lease (SIGSTOP), cut off from storage and
// stopped with SIGTERM, once each (the long runs, every fault drawn from a
// seed, are the shardchaos command's: BENCHMARKS.md): no shard's func ever runs on two
// instances at once (but a frozen one's, which returns as soon as it thaws),
// term numbers grow, a cut-off instance stops its funcs before its session
// can be broken, and after every fault every shard runs again, spread
// within one, within a lease and a few seconds.
//
// Between them, the messy world: a rolling change of every instance's set,
// a malformed record on a new shard's blob before the fleet takes it in
// (repaired a few seconds later), one instance alone with a set of its
// own, and phantom session blobs. No shard's func starts on a term a
// malformed record hid, term numbers grow over the whole run, no instance
// gives up, and after the last fault every shard of a live instance's set
// runs on exactly one instance that has it, within a lease, a retry
// interval and 5 s.
//
// Two of the four are static members (a lease ID file each): started again
// after a fault, they resume their session and take back their shards, and
// stopped by SIGTERM they hand nothing on. The last fault kills one of them
// and, once the others have judged its session dead (broken its lease and
// written the end mark), leases that session's blob again under its ID, as
// a late acquire would: the process started again with the file must not
// run that session again (shards.go, D4).
func TestShardsNeverRunTwiceUnderProcessFaults(t *testing.T) {
	seed, err := chaos.SeedFromEnv()
	require.NoError(t, err)
	t.Logf("seed %d (replay with LEADERELECTION_CHAOS_SEED=%d)", seed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := os.Getenv("LEADERELECTION_CHAOS_DIR") // keeps the run's records and logs
	if dir == "" {
		dir = t.TempDir()
	}
	tm := Timings{LeaseDuration: 4 * time.Second, RetryInterval: 500 * time.Millisecond, StopMargin: 1500 * time.Millisecond}
	settle := tm.LeaseDuration + tm.RetryInterval + 10*time.Second
	res, err := RunChaos(ctx, ChaosConfig{
		Config:    Config{Shards: 40, Timings: tm, Dir: dir, Progress: testWriter{t}, Static: true},
		Instances: 4,
		Seed:      seed,
		Sequence: []string{FaultKill, FaultSetRolling, FaultFreeze, FaultMalformed, FaultPartition, FaultSetOne,
			FaultGraceful, FaultPhantom, FaultLateAcquire},
		Settle: settle,
	})
	require.NoError(t, err)
	t.Log("\n" + res.Summary())
	require.Len(t, res.Faults, 9)
	assert.Equal(t, 1, res.LateAcquires, "the dead session's blob was leased again under its ID")
	assert.Empty(t, res.Revived, "a session judged dead ran again")
	assert.Empty(t, res.UnderMalformed, "a shard's func started on a term that a malformed record hid")
	assert.Empty(t, res.Messy.Unrepaired, "a malformed record could not be repaired: the shard's blob stayed leased")
	assert.Equal(t, 1, res.Messy.Malformed)
	assert.Equal(t, 2, res.Phantoms)
	assert.Equal(t, 2, res.PhantomsGone)
	assert.Empty(t, res.Exits, "an instance gave up")
	assert.True(t, res.Final.OK, "after the last fault, shards of a live set did not run where they should within %v: %+v", tm.LeaseDuration+tm.RetryInterval+5*time.Second, res.Final)
	assert.Empty(t, res.Overlaps, "two funcs of one shard ran at once")
	assert.Empty(t, res.Unordered, "term numbers must grow")
	for _, w := range res.Frozen {
		assert.Less(t, w.AfterCont, time.Second, "shard %s: a thawed instance must stop as soon as its cancelled context is delivered", w.Shard)
	}
	for _, m := range res.CutOffMargins {
		assert.GreaterOrEqual(t, m, tm.StopMargin-250*time.Millisecond, "a cut-off instance stops StopMargin before its session can be broken")
	}
	assert.NotEmpty(t, res.CutOffMargins, "the partitions cut off instances that ran shards")
	assert.Zero(t, res.Unsettled)
	t.Logf("settled after each fault in %v", res.Settled)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}
