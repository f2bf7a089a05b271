package shardchaos

import (
	"context"
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
// stopped with SIGTERM, twice each: no shard's func ever runs on two
// instances at once (but a frozen one's, which returns as soon as it thaws),
// term numbers grow, a cut-off instance stops its funcs before its session
// can be broken, and after every fault every shard runs again, spread
// within one, within a lease and a few seconds.
func TestShardsNeverRunTwiceUnderProcessFaults(t *testing.T) {
	seed, err := chaos.SeedFromEnv()
	require.NoError(t, err)
	t.Logf("seed %d (replay with LEADERELECTION_CHAOS_SEED=%d)", seed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tm := Timings{LeaseDuration: 4 * time.Second, RetryInterval: 500 * time.Millisecond, StopMargin: 1500 * time.Millisecond}
	settle := tm.LeaseDuration + tm.RetryInterval + 10*time.Second
	res, err := RunChaos(ctx, ChaosConfig{
		Config:    Config{Shards: 40, Timings: tm, Dir: t.TempDir(), Progress: testWriter{t}},
		Instances: 4,
		Seed:      seed,
		Sequence:  []string{FaultKill, FaultFreeze, FaultPartition, FaultGraceful, FaultKill, FaultFreeze, FaultPartition, FaultGraceful},
		Settle:    settle,
	})
	require.NoError(t, err)
	t.Log("\n" + res.Summary())
	require.Len(t, res.Faults, 8)
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
