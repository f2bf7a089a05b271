package leaderelection

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// rawBlob writes a blob under a ShardOwner's prefix the way another
// instance (or a crashed one) would have left it.
type rawBlob struct {
	t  *testing.T
	cc *container.Client
}

func newRawBlob(t *testing.T, s BlobSettings) rawBlob {
	var opts *container.ClientOptions
	if svc := memoryOf(s); svc != nil {
		opts = &container.ClientOptions{ClientOptions: svc.ClientOptions()}
	}
	cc, err := container.NewClientFromConnectionString(s.ConnectionString, s.Container, opts)
	require.NoError(t, err)
	if _, err = cc.Create(context.Background(), nil); !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		require.NoError(t, err)
	}
	return rawBlob{t: t, cc: cc}
}

// put creates name; leases it (infinite) if leaseID is not ""; and writes md
// under that lease. It returns the blob's ETag.
func (r rawBlob) put(name, leaseID string, md map[string]string) azcore.ETag {
	ctx := context.Background()
	bc := r.cc.NewBlockBlobClient(name)
	resp, err := bc.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{})
	require.NoError(r.t, err)
	etag := *resp.ETag
	var access *blob.LeaseAccessConditions
	if leaseID != "" {
		lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: &leaseID})
		require.NoError(r.t, err)
		_, err = lc.AcquireLease(ctx, -1, nil)
		require.NoError(r.t, err)
		access = &blob.LeaseAccessConditions{LeaseID: &leaseID}
	}
	if md != nil {
		meta := map[string]*string{}
		for k, v := range md {
			meta[k] = &v
		}
		resp, err := bc.SetMetadata(ctx, meta, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: access}})
		require.NoError(r.t, err)
		etag = *resp.ETag
	}
	return etag
}

// A shard whose record names a session the listing of the sessions did not
// show is looked up: a session whose blob is gone is dead, and its shard is
// taken (term + 1); a live session's shard is left alone, even if that
// session never claims another; a lease left without a record (a claim that
// died half-way) is broken once its ETag has stood a lease duration.
func TestShardsOfGoneSessionsAreTakenAndOfLiveOnesLeftAlone(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		raw := newRawBlob(t, s)
		p := s.Blob + "/"
		live := "ffffffff-ffff-4fff-bfff-ffffffffffff" // sorts last: the owner's share is ceil(3/2) = 2
		raw.put(p+wire.SessionsDir+live, live, map[string]string{wire.MetaIdentity: "y", wire.MetaTerm: "1", wire.MetaSince: time.Now().UTC().Format(time.RFC3339Nano),
			wire.MetaLeaseDuration: time.Hour.String(), wire.MetaOwned: "1"})
		gone := uuid.NewString()
		raw.put(p+wire.ShardsDir+"shard-000", uuid.NewString(), map[string]string{wire.MetaIdentity: "x", wire.MetaTerm: "5", wire.MetaSession: gone})
		raw.put(p+wire.ShardsDir+"shard-001", uuid.NewString(), map[string]string{wire.MetaIdentity: "y", wire.MetaTerm: "3", wire.MetaSession: live})
		raw.put(p+wire.ShardsDir+"shard-002", uuid.NewString(), nil)

		log := &shardLog{}
		a := startOwner(t, "a", s, shardNames(3), log.fn("a", nil))
		waitFor(t, s.LeaseDuration+5*time.Second, "a runs the dead session's shard and the abandoned one", func() bool {
			r := log.running()
			return len(r["shard-000"]) == 1 && len(r["shard-002"]) == 1
		})
		time.Sleep(2 * s.RetryInterval)
		terms := map[string]int64{}
		for _, tm := range log.snapshot() {
			terms[tm.shard] = tm.number
		}
		assert.Equal(t, map[string]int64{"shard-000": 6, "shard-002": 1}, terms, "shard-001 is the live session's")
		info, err := a.owner.Inspect(context.Background())
		require.NoError(t, err)
		for _, ses := range info.Sessions {
			if ses.ID == live {
				assert.True(t, ses.Live, "the live session is not broken")
			}
		}
		for _, sh := range info.Shards {
			if sh.Name == "shard-001" {
				assert.True(t, sh.Held)
				assert.Equal(t, live, sh.Session)
			}
		}
	})
}

// The lookup's rule, case by case: gone or ended after writing its record
// is dead; held, or never leased, is not.
func TestUnknownSessionLookup(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		raw := newRawBlob(t, s)
		o, err := NewShardOwner(s, nil, func(context.Context, string) error { return nil }, WithLogger(testLogger(t, "a")))
		require.NoError(t, err)
		record := map[string]string{wire.MetaIdentity: "y", wire.MetaTerm: "1", wire.MetaLeaseDuration: "4s"}
		held, released, fresh := uuid.NewString(), uuid.NewString(), uuid.NewString()
		raw.put(o.sessionBlob(held), held, record)
		raw.put(o.sessionBlob(released), "", record) // a record but no lease: its lease ended
		raw.put(o.sessionBlob(fresh), "", nil)       // created, not leased yet
		w := newSessionWatch()
		for id, wantDead := range map[string]bool{uuid.NewString(): true, held: false, released: true, fresh: false} {
			dead, err := o.sessionState(context.Background(), w, id)
			require.NoError(t, err)
			assert.Equal(t, wantDead, dead, id)
		}
	})
}

// Every shard's run is reported (StartedLeading, StoppedLeading, with the
// shard and the session), and counted in the metrics.
func TestShardEventsAndMetrics(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		var mu sync.Mutex
		var events []Event
		s := shardSettings(t)
		log := &shardLog{}
		a := startOwner(t, "a", s, shardNames(3), log.fn("a", nil), WithMeterProvider(mp), WithEvents(func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		}))
		waitFor(t, 10*time.Second, "3 shards run", func() bool { return balanced(log, 3, "a") })
		time.Sleep(s.withDefaults().RenewInterval + time.Second) // a renewal of the session

		collect := func() map[string]metricdata.Aggregation { return collectMetrics(t, reader) }
		got := collect()
		for name, want := range map[string]int64{"leaderelection.shards.owned": 3, "leaderelection.shards.target": 3, "leaderelection.sessions.live": 1} {
			g := got[name].(metricdata.Gauge[int64])
			require.Len(t, g.DataPoints, 1, name)
			assert.Equal(t, want, g.DataPoints[0].Value, name)
		}
		claims := got["leaderelection.shards.claims"].(metricdata.Sum[int64])
		var claimed int64
		for _, dp := range claims.DataPoints {
			if attrValue(dp.Attributes.Value("outcome")) == "claimed" {
				claimed += dp.Value
			}
		}
		assert.Equal(t, int64(3), claimed)
		renew := got["leaderelection.renew.duration"].(metricdata.Histogram[float64])
		require.NotEmpty(t, renew.DataPoints, "the session's writes")

		require.NoError(t, a.owner.SetShards(shardNames(2)))
		waitFor(t, 5*time.Second, "shard-002 removed", func() bool { return balanced(log, 2, "a") })
		require.ErrorIs(t, a.stop(t), context.Canceled)

		mu.Lock()
		defer mu.Unlock()
		session := ""
		kinds := map[string][]EventKind{}
		reasons := map[string]StopReason{}
		for _, e := range events {
			switch e.Kind {
			case SessionStarted:
				session = e.Session
				assert.Equal(t, "a", e.Term.Identity)
			case StartedLeading, StoppedLeading:
				assert.Equal(t, session, e.Session, "shard events name the session")
				assert.Equal(t, int64(1), e.Term.Number)
				kinds[e.Shard] = append(kinds[e.Shard], e.Kind)
				if e.Kind == StoppedLeading {
					reasons[e.Shard] = e.Reason
					assert.False(t, e.LeaseExpiry.Before(e.FuncReturned), "returned before its session could be broken")
				}
			}
		}
		require.NotEmpty(t, session)
		assert.Equal(t, SessionEnded, events[len(events)-1].Kind, "the session ends after its shards")
		for _, shard := range shardNames(3) {
			assert.Equal(t, []EventKind{StartedLeading, StoppedLeading}, kinds[shard], shard)
		}
		assert.Equal(t, map[string]StopReason{"shard-000": ReasonCallerCancelled, "shard-001": ReasonCallerCancelled, "shard-002": ReasonShardRemoved}, reasons)
	})
}

// A shard func that goes on after its lease context ended makes the owner
// unhealthy, naming the shard.
func TestShardFuncRunningPastItsLeaseIsUnhealthy(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, cut := withTransport(t, shardSettings(t))
		release := make(chan struct{})
		log := &shardLog{}
		a := startOwner(t, "a", s, []string{"stubborn"}, log.fn("a", func(ctx context.Context, _ string) error {
			<-release // ignores its context
			return nil
		}))
		defer close(release)
		waitFor(t, 10*time.Second, "the shard runs", func() bool { return balanced(log, 1, "a") })
		require.NoError(t, a.owner.Healthy())
		cut.Blackhole()
		waitFor(t, s.LeaseDuration+s.StopMargin+5*time.Second, "unhealthy: the shard's func runs on", func() bool {
			err := a.owner.Healthy()
			return err != nil && strings.Contains(err.Error(), `shard "stubborn"`)
		})
		err := a.owner.Healthy()
		require.ErrorContains(t, err, "after its lease context was cancelled")
		t.Log(err)
	})
}

// withStrayAfter shortens how long fewer shards than the set must stay held
// before a session at its share lists them, looking for strays.
func withStrayAfter(d time.Duration) Option { return func(o *options) { o.seams.strayAfter = d } }

// A shard leased under an ID nobody uses, whose record names a live session
// (a claim whose record was written, then lost, and its release lost too;
// or a previous process's acquire landing after a resumed session's
// take-back): only the session it names can tell it holds nothing. That
// session frees it once it has stood a lease duration, even at its share,
// and the session below its share then runs it. It used to wait for good.
func TestAStrayLeaseNamingASessionAtItsShareIsFreed(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		raw := newRawBlob(t, s)
		log := &shardLog{}
		a := startOwner(t, "a", s, shardNames(4), log.fn("a", nil), withStrayAfter(time.Second))
		b := startOwner(t, "b", s, shardNames(4), log.fn("b", nil), withStrayAfter(time.Second))
		waitFor(t, 30*time.Second, "4 shards balanced over a and b", func() bool { return balanced(log, 4, "a", "b") })
		info, err := a.owner.Inspect(context.Background())
		require.NoError(t, err)
		var live []string
		for _, ses := range info.Sessions {
			if ses.Live {
				live = append(live, ses.ID)
			}
		}
		require.Len(t, live, 2)
		slices.Sort(live)
		named := live[1] // its share of 5 is 2, which it holds: it lists only for strays
		require.Equal(t, 2, balance.FairShare(5, live, named))
		stray := s.Blob + "/" + wire.ShardsDir + "shard-004"
		raw.put(stray, uuid.NewString(), map[string]string{wire.MetaIdentity: "gone", wire.MetaTerm: "7", wire.MetaSession: named, wire.MetaRole: string(RoleShard)})
		require.NoError(t, a.owner.SetShards(shardNames(5)))
		require.NoError(t, b.owner.SetShards(shardNames(5)))
		waitFor(t, 60*time.Second, "the stray shard runs, the 5 balanced", func() bool { return balanced(log, 5, "a", "b") })
		for _, tm := range log.snapshot() {
			if tm.shard == "shard-004" {
				assert.Equal(t, int64(8), tm.number, "the stray's next term")
			}
		}
		log.requireNeverTwice(t)
	})
}
