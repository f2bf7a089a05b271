package leaderelection

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// manualReader collects from an OTel ManualReader, by instrument name.
type manualReader struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
}

func newManualReader(t *testing.T) (manualReader, *sdkmetric.MeterProvider) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return manualReader{t: t, reader: reader}, mp
}

func (r manualReader) collect() map[string]metricdata.Metrics {
	var rm metricdata.ResourceMetrics
	require.NoError(r.t, r.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// gauge returns the value of the gauge name for blob, and whether it was
// observed.
func gaugeOf[N int64 | float64](got map[string]metricdata.Metrics, name, blob string) (N, bool) {
	m, ok := got[name]
	if !ok {
		return 0, false
	}
	for _, dp := range m.Data.(metricdata.Gauge[N]).DataPoints {
		if v, _ := dp.Attributes.Value(attribute.Key("leaderelection.blob")); v.AsString() == blob {
			return dp.Value, true
		}
	}
	return 0, false
}

// A leader reports its term's number and how long ago its last confirmed
// renewal was sent (less than a RenewInterval and a round trip); a
// follower, or an instance whose term ended, reports neither.
func TestLeaderReportsItsTermAndRenewalAge(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		reader, mp := newManualReader(t)
		s := testSettings(t)
		s.RenewInterval = 500 * time.Millisecond
		done := make(chan struct{})
		terms := make(chan int64, 1)
		c := startContender(t, "a", s, func(ctx context.Context) error {
			tm, _ := TermFromContext(ctx)
			terms <- tm.Number
			select {
			case <-done:
			case <-ctx.Done():
			}
			return nil
		}, WithMeterProvider(mp))
		var number int64
		select {
		case number = <-terms:
		case <-time.After(10 * time.Second):
			t.Fatal("no term within 10s")
		}
		for range 3 { // across renewals: the age falls back each time
			time.Sleep(400 * time.Millisecond)
			got := reader.collect()
			term, ok := gaugeOf[int64](got, "leaderelection.term", s.Blob)
			require.True(t, ok, "the leader's term is observed")
			assert.Equal(t, number, term)
			age, ok := gaugeOf[float64](got, "leaderelection.renew.age", s.Blob)
			require.True(t, ok, "the leader's renewal age is observed")
			assert.GreaterOrEqual(t, age, 0.0)
			assert.Less(t, age, (s.RenewInterval + time.Second).Seconds(), "renewed every RenewInterval")
			assert.Equal(t, "s", got["leaderelection.renew.age"].Unit)
		}

		close(done)
		require.Eventually(t, func() bool { return !c.mutex.IsLeader() }, 5*time.Second, 10*time.Millisecond)
		require.Eventually(t, func() bool {
			got := reader.collect()
			_, term := gaugeOf[int64](got, "leaderelection.term", s.Blob)
			_, age := gaugeOf[float64](got, "leaderelection.renew.age", s.Blob)
			return !term && !age
		}, 5*time.Second, 50*time.Millisecond, "neither is observed once the term has ended")
	})
}

// A ShardOwner counts as unowned the shards of its set that no live session
// holds by its last listing: here, with two live sessions (one written by
// hand, which holds one shard and never claims), it takes its share of the
// other three (free, or held by a dead session), and the one left is
// unowned. Once the hand-written session dies, the owner takes the rest and
// none is unowned. Its session's renewal age is reported too.
func TestShardOwnerReportsOwnedAndUnownedShards(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		reader, mp := newManualReader(t)
		s := shardSettings(t)
		raw := newRawBlob(t, s)
		p := s.Blob + "/"
		live := "ffffffff-ffff-4fff-bfff-ffffffffffff"
		set, err := checkShardNames(shardNames(4))
		require.NoError(t, err)
		raw.put(p+wire.SessionsDir+live, live, map[string]string{wire.MetaIdentity: "y", wire.MetaTerm: "1", wire.MetaSince: time.Now().UTC().Format(time.RFC3339Nano),
			wire.MetaLeaseDuration: time.Hour.String(), wire.MetaOwned: "1", wire.MetaSet: balance.SetDigest(set), wire.MetaSetCount: "4"})
		raw.put(p+wire.ShardsDir+"shard-000", uuid.NewString(), map[string]string{wire.MetaIdentity: "x", wire.MetaTerm: "5", wire.MetaSession: uuid.NewString()}) // a dead session's
		raw.put(p+wire.ShardsDir+"shard-001", uuid.NewString(), map[string]string{wire.MetaIdentity: "y", wire.MetaTerm: "3", wire.MetaSession: live})

		log := &shardLog{}
		a := startOwner(t, "a", s, shardNames(4), log.fn("a", nil), WithMeterProvider(mp))
		shards, sessions := p+wire.ShardsDir, p+wire.SessionsDir
		gauges := func() (owned, unowned int64, listed bool) {
			got := reader.collect()
			owned, _ = gaugeOf[int64](got, "leaderelection.shards.owned", shards)
			unowned, listed = gaugeOf[int64](got, "leaderelection.shards.unowned", shards)
			return owned, unowned, listed
		}
		waitFor(t, s.LeaseDuration+5*time.Second, "a holds its share, 2 of 4, and sees 1 unowned", func() bool {
			owned, unowned, listed := gauges()
			return owned == 2 && unowned == 1 && listed
		})
		// By the definition: the shards of the set that no live session holds.
		info, err := a.owner.Inspect(context.Background())
		require.NoError(t, err)
		liveIDs := map[string]bool{}
		for _, ses := range info.Sessions {
			liveIDs[ses.ID] = ses.Live
		}
		held := 0
		for _, sh := range info.Shards {
			if sh.Held && liveIDs[sh.Session] {
				held++
			}
		}
		assert.Equal(t, 3, held, "a's two and the hand-written session's")

		got := reader.collect()
		age, ok := gaugeOf[float64](got, "leaderelection.shards.listing.age", shards)
		require.True(t, ok)
		assert.GreaterOrEqual(t, age, 0.0)
		assert.Equal(t, "s", got["leaderelection.shards.listing.age"].Unit)
		renewAge, ok := gaugeOf[float64](got, "leaderelection.renew.age", sessions)
		require.True(t, ok, "the session's renewal age")
		assert.Less(t, renewAge, (s.withDefaults().RenewInterval + time.Second).Seconds())
		_, ok = gaugeOf[int64](got, "leaderelection.term", sessions)
		assert.False(t, ok, "a session's term is not reported")

		// The hand-written session dies: its lease released, its record left.
		lc, err := lease.NewBlobClient(raw.cc.NewBlockBlobClient(p+wire.SessionsDir+live), &lease.BlobClientOptions{LeaseID: &live})
		require.NoError(t, err)
		_, err = lc.ReleaseLease(context.Background(), nil)
		require.NoError(t, err)
		waitFor(t, s.LeaseDuration+5*time.Second, "a holds all 4, none unowned", func() bool {
			owned, unowned, _ := gauges()
			return owned == 4 && unowned == 0
		})

		require.ErrorIs(t, a.stop(t), context.Canceled)
		got = reader.collect()
		_, ok = gaugeOf[float64](got, "leaderelection.renew.age", sessions)
		assert.False(t, ok, "no session, no renewal age")
	})
}
