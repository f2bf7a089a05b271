package leaderelection

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of a session's end (the top of session.go): a session is dead
// once its record carries the end mark, or its blob is gone, and only then;
// the mark is written by whoever finds its lease ended without it; a
// session so marked is never taken up again, whatever its lease shows.

// sessionRecord is the record of a live session of identity who.
func sessionRecord(who string) map[string]string {
	return map[string]string{wire.MetaIdentity: who, wire.MetaTerm: "1", wire.MetaSince: time.Now().UTC().Format(time.RFC3339Nano),
		wire.MetaLeaseDuration: time.Hour.String(), wire.MetaOwned: "0", wire.MetaRole: string(RoleSession)}
}

// breakLease breaks name's lease at once.
func (r rawBlob) breakLease(name string) {
	r.t.Helper()
	lc, err := lease.NewBlobClient(r.cc.NewBlobClient(name), nil)
	require.NoError(r.t, err)
	var zero int32
	_, err = lc.BreakLease(context.Background(), &lease.BlobBreakOptions{BreakPeriod: &zero})
	require.NoError(r.t, err)
}

// acquire leases name (infinite) with id, as an acquire that reached the
// server late would.
func (r rawBlob) acquire(name, id string) {
	r.t.Helper()
	lc, err := lease.NewBlobClient(r.cc.NewBlobClient(name), &lease.BlobClientOptions{LeaseID: &id})
	require.NoError(r.t, err)
	_, err = lc.AcquireLease(context.Background(), -1, nil)
	require.NoError(r.t, err)
}

// A session that a shard names and a listing did not show is judged by one
// read: dead if its blob is gone or its record carries the end mark,
// whatever its lease shows; if its lease ended without the mark, dead once
// this instance has written the mark, which the blob then carries; alive
// if leased again meanwhile, unmarked (nobody has acted on its death); and
// a session being started (no record) is alive.
func TestASessionIsDeadOnlyOnceItsEndIsWritten(t *testing.T) {
	t.Parallel()
	s := shardSettings(t)
	raw := newRawBlob(t, s)
	o, err := NewShardOwner(s, []string{"a"}, func(context.Context, string) error { return nil }, WithLogger(testLogger(t, "o")))
	require.NoError(t, err)
	defer o.storage.closeIdle()
	ended := sessionRecord("x")
	ended[wire.MetaEnded] = time.Now().UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct {
		name   string
		make   func(blob, id string)
		dead   bool
		marked bool // the blob carries the end mark afterwards
	}{
		{name: "gone", make: func(string, string) {}, dead: true},
		{name: "broken, unmarked", make: func(blob, id string) {
			raw.put(blob, id, sessionRecord("x"))
			raw.breakLease(blob)
		}, dead: true, marked: true},
		{name: "released, unmarked", make: func(blob, id string) {
			raw.put(blob, "", sessionRecord("x"))
		}, dead: true, marked: true},
		{name: "broken, then leased again under its ID", make: func(blob, id string) {
			raw.put(blob, id, sessionRecord("x"))
			raw.breakLease(blob)
			raw.acquire(blob, id)
		}, dead: false},
		{name: "marked, then leased again under its ID", make: func(blob, id string) {
			raw.put(blob, "", ended)
			raw.acquire(blob, id)
		}, dead: true, marked: true},
		{name: "being started", make: func(blob, id string) {
			raw.put(blob, "", map[string]string{wire.MetaRole: string(RoleSession)})
		}, dead: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := uuid.NewString()
			blob := o.sessionBlob(id)
			tc.make(blob, id)
			dead, err := o.sessionState(context.Background(), newSessionWatch(), id)
			require.NoError(t, err)
			assert.Equal(t, tc.dead, dead)
			if tc.marked {
				lm := o.managerFor(blob, uuid.NewString())
				_, md, err := lm.inspect(context.Background())
				require.NoError(t, err)
				rec := readRecord(s.Container, blob, md)
				assert.True(t, rec.EndMark, "the blob carries the end mark")
				assert.Equal(t, "x", rec.Term.Identity, "the mark keeps the record it was written on")
			}
		})
	}
}

// The end mark is written If-Match the ETag seen: an instance that finds it
// written by another (its own write refused) reads the blob again, and
// judges the session dead without a second mark.
func TestASessionMarkedEndedByAnotherIsDeadToo(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		raw := newRawBlob(t, s)
		o, err := NewShardOwner(s, []string{"a"}, func(context.Context, string) error { return nil }, WithLogger(testLogger(t, "o")))
		require.NoError(t, err)
		defer o.storage.closeIdle()
		id := uuid.NewString()
		blob := o.sessionBlob(id)
		etag := raw.put(blob, "", sessionRecord("x"))
		seen := listed{name: id, info: LeaseInfo{Exists: true, ETag: etag}, md: map[string]*string{}}
		for k, v := range sessionRecord("x") {
			seen.md[k] = &v
		}
		require.True(t, o.markEnded(context.Background(), seen), "the first mark")
		require.True(t, o.markEnded(context.Background(), seen), "a second mark, at the ETag before the first, finds it written")
	})
}

// A session's record that carries the end mark is never written over by a
// session, even one whose lease is ours again under its ID: the term's
// write is refused as a lease lost, and a renewal whose write was refused
// does not take the mark for a write of its own.
func TestASessionsEndMarkIsNeverWrittenOver(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		raw := newRawBlob(t, s)
		o, err := NewShardOwner(s, []string{"a"}, func(context.Context, string) error { return nil }, WithLogger(testLogger(t, "o")))
		require.NoError(t, err)
		defer o.storage.closeIdle()
		id := uuid.NewString()
		ended := sessionRecord("x")
		ended[wire.MetaEnded] = time.Now().UTC().Format(time.RFC3339Nano)
		raw.put(o.sessionBlob(id), id, ended)
		lm := o.newSession(id).term.blob()
		_, _, err = lm.recordTerm(context.Background(), "x")
		require.ErrorIs(t, err, ErrLeaseLost)
		assert.Contains(t, err.Error(), "never taken up again")

		// A renewal refused because the blob changed, which finds our term
		// with the end mark on it: lost, not ours to write again.
		_, md, err := lm.inspect(context.Background())
		require.NoError(t, err)
		r := &termRecord{leaseID: id, term: readRecord(s.Container, lm.blob, md).term(), etag: `"0xstale"`}
		err = lm.writtenSince(context.Background(), r, &StorageError{kind: ErrTransient})
		require.ErrorIs(t, err, ErrLeaseLost)
	})
}

// A process restarted with the lease ID file whose session's container is
// gone has seen the container deleted: its next session claims nothing for
// as long as the sessions that ran before the deletion may still run their
// shards (shardfloors.go).
func TestARestartThatFindsTheContainerGoneWaitsOutTheDoomedSessions(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		file := t.TempDir() + "/session"
		require.NoError(t, os.WriteFile(file, []byte(uuid.NewString()+"\n"), 0o600))
		var logs syncBuffer
		log := &shardLog{}
		started := time.Now()
		own := startOwner(t, "a", s, []string{"a"}, log.fn("a", nil), WithLeaseIDFile(file),
			WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
		waitFor(t, 60*time.Second, "a runs", func() bool { return len(log.running()["a"]) == 1 })
		assert.GreaterOrEqual(t, time.Since(started), own.owner.quietFor(), "claimed before the doomed sessions could have stopped")
		assert.Contains(t, logs.String(), "the session in the lease ID file found the container gone")
		assert.Equal(t, 1, strings.Count(logs.String(), "claims no shard until every session that ran before it may have stopped"))
	})
}

// A dead session's list (heldlist.go) is not read from the shards' blobs: a
// shard it names that is free is taken by an acquire If-Match the ETag the
// list gives, and its term then continues the list's. So a list that says,
// at the blob's own ETag, a lower term than the blob carries (rewritten by
// another writer) is not trusted: the claim reads the blob first, reports
// the disagreement, and takes nothing; the blob keeps its term, for a
// listing to find.
func TestAListThatLowersAFreeShardsTermIsNotTrusted(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, raw, o, logs := ownerOfX(t)
		blob := o.shardBlob("x")
		etag := raw.put(blob, "", map[string]string{wire.MetaIdentity: "y", wire.MetaTerm: "7", wire.MetaRole: string(RoleShard), wire.MetaSession: "dead"})
		g := bareManager(o)
		e := heldEntry{name: "x", term: 3, sessionTerm: 1, etag: etag}
		require.True(t, o.reserve("x", takingBack, nil))
		won, why := g.claimOne(candidate{name: "x", exists: true, etag: etag, leased: true, prev: e.term, dead: true, oldID: e.derivedID("dead"), fromList: true})
		assert.False(t, won)
		assert.Equal(t, "held", why)
		assert.Contains(t, logs.String(), "names a term its shard's blob does not carry")
		info := leaderOnBlob(t, s, blob)
		assert.False(t, info.Held(), "nothing taken")
		assert.Equal(t, int64(7), info.Leader.Number, "the blob keeps its term")
		assert.Equal(t, etag, info.ETag)
	})
}

// A resumed session's listing, made to take back its own shards, keeps the
// terms of every shard of its set it shows, as any listing of the shards
// does: the process is then a witness of them, and a blob deleted and
// created again continues above them. (Found by the simulator: a resumed
// process whose only listing was this one created a deleted shard's blob
// again, and recorded its term 1 under a term 5 that it had listed.)
func TestAResumedSessionsListingKeepsTheTermsOfEveryShard(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		raw := newRawBlob(t, s)
		o, err := NewShardOwner(s, []string{"x", "y"}, func(context.Context, string) error { return nil })
		require.NoError(t, err)
		defer o.storage.closeIdle()
		raw.put(o.shardBlob("x"), "", map[string]string{wire.MetaIdentity: "other", wire.MetaTerm: "5", wire.MetaRole: string(RoleShard), wire.MetaSession: "another"})
		raw.put(o.shardBlob("z"), "", map[string]string{wire.MetaIdentity: "other", wire.MetaTerm: "9", wire.MetaRole: string(RoleShard), wire.MetaSession: "another"})
		g := bareManager(o)
		g.takeBack()
		assert.Equal(t, int64(5), o.state.floorOf("x"), "a shard of the set, another session's")
		assert.Equal(t, int64(0), o.state.floorOf("y"), "no blob")
		assert.Equal(t, int64(0), o.state.floorOf("z"), "not in the set: kept by no listing")
		assert.False(t, g.ownTerms.recorded("x", 5), "another session's term is not this session's own")
	})
}

// A session whose lease duration is longer than the other live sessions'
// instances know of runs no shard until their records say they know it:
// after a deletion of the container, each of them waits out the longest
// lease duration it knows before it claims a shard blob created again
// (shardfloors.go), and so must know this one's.
func TestALongerLeaseRunsNoShardUntilTheOthersKnowIt(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s := shardSettings(t)
		raw := newRawBlob(t, s)
		names := shardNames(8)
		log := &shardLog{}
		a := startOwner(t, "a", s, names, log.fn("a", nil))
		waitFor(t, 30*time.Second, "a runs every shard", func() bool { return balanced(log, len(names), "a") })
		aSession := a.owner.Session()
		long := s
		long.LeaseDuration = 2 * s.LeaseDuration
		var mu sync.Mutex
		var known []time.Duration // what a's record said it knows, as each of b's shards started
		var logs syncBuffer
		startOwner(t, "b", long, names, log.fn("b", func(ctx context.Context, _ string) error {
			props, err := raw.cc.NewBlobClient(a.owner.sessionBlob(aSession)).GetProperties(context.Background(), nil)
			d := time.Duration(-1) // the read failed
			if err == nil {
				d, _ = time.ParseDuration(wire.Value(props.Metadata, wire.MetaLongest))
			}
			mu.Lock()
			known = append(known, d)
			mu.Unlock()
			<-ctx.Done()
			return nil
		}), WithLogger(slog.New(slog.NewTextHandler(io.MultiWriter(&logs, tWriter{t}), nil)).With("contender", "b")))
		waitFor(t, 30*time.Second, "the shards spread over a and b, each of b's having read a's record", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return balanced(log, len(names), "a", "b") && len(known) == len(names)/2
		})
		mu.Lock()
		defer mu.Unlock()
		for _, k := range known {
			assert.GreaterOrEqual(t, k, long.LeaseDuration, "b ran a shard before a's record said a knows b's lease duration")
		}
		assert.Contains(t, logs.String(), "runs no shard until their records say they know it")
		log.requireNeverTwice(t)
	})
}

// What the gate above keeps off, end to end: an instance (p) whose session
// is live, but whose listings of the sessions fail, never learns of a
// session (b) of a longer lease that starts meanwhile. Were b to run a
// shard, and be cut off from storage as the container is deleted, p would
// claim that shard once its own, shorter, quiet is over (here the other
// instance, a, which knew b's lease, leaves), while b still runs it up to
// its deadline: without the gate, p started b's shard 29.3 s before b's
// func returned. b runs nothing until p's record says it knows b's lease,
// so no shard runs twice.
func TestALongerLeaseCutOffAsTheContainerGoesRunsNothingBesideAPeerThatNeverLearntIt(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, svc *memblob.Service) {
		s := shardSettings(t)
		names := shardNames(6)
		log := &shardLog{}
		a := startOwner(t, "a", s, names, log.fn("a", nil))
		sp, pt := withTransport(t, s)
		var blind atomic.Bool // p's listings of the sessions fail
		sp.ClientOptions.Transport = sessionListingsFail{next: pt, on: &blind}
		startOwner(t, "p", sp, names, log.fn("p", nil))
		waitFor(t, 30*time.Second, "the shards over a and p", func() bool { return balanced(log, len(names), "a", "p") })

		blind.Store(true)
		time.Sleep(2 * s.RetryInterval) // a listing of p's now fails
		long, cut := withTransport(t, s)
		long.LeaseDuration = 10 * s.LeaseDuration
		startOwner(t, "b", long, names, log.fn("b", nil))
		time.Sleep(20 * s.LeaseDuration) // long enough for b to run its share, were it let
		assert.Zero(t, log.perOwner()["b"], "b runs shards while p, live, cannot know its lease")

		cut.Blackhole()
		require.NoError(t, svc.DeleteContainer(s.Container))
		require.ErrorIs(t, a.stop(t), context.Canceled) // p is left to claim every shard
		blind.Store(false)
		time.Sleep(long.LeaseDuration + 10*s.LeaseDuration) // b's deadline, and p's quiet and claims
		assert.NotZero(t, log.perOwner()["p"], "p runs shards again after the deletion")
		log.requireNeverTwice(t)
	})
}

// sessionListingsFail fails the listings of the sessions sent through it
// while on is set: a connection reset, as the SDK would see a network's.
type sessionListingsFail struct {
	next policy.Transporter
	on   *atomic.Bool
}

func (f sessionListingsFail) Inner() policy.Transporter { return f.next }

func (f sessionListingsFail) Do(req *http.Request) (*http.Response, error) {
	if q := req.URL.Query(); f.on.Load() && q.Get("comp") == "list" && strings.Contains(q.Get("prefix"), wire.SessionsDir) {
		return nil, &url.Error{Op: req.Method, URL: req.URL.String(), Err: syscall.ECONNRESET}
	}
	return f.next.Do(req)
}

// A lease under the ID a dead session derived that is not one the library
// takes (a fixed one: another writer guessed the ID and acquired a free
// shard's blob with it) is not taken by a change and run: it would expire
// on its own under a func that never renews it. The claim gives it back.
// (Found by the simulator's other writer, seed 783364844376.)
func TestAFixedLeaseUnderADerivedIDIsNotTakenByAChange(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		s, raw, o, logs := ownerOfX(t)
		blob := o.shardBlob("x")
		etag := raw.put(blob, "", map[string]string{wire.MetaIdentity: "y", wire.MetaTerm: "3", wire.MetaRole: string(RoleShard), wire.MetaSession: "dead"})
		e := heldEntry{name: "x", term: 3, sessionTerm: 1, etag: etag}
		id := e.derivedID("dead")
		lc, err := lease.NewBlobClient(raw.cc.NewBlobClient(blob), &lease.BlobClientOptions{LeaseID: &id})
		require.NoError(t, err)
		_, err = lc.AcquireLease(context.Background(), 38, nil) // fixed: another writer's
		require.NoError(t, err)
		g := bareManager(o)
		ended, end := context.WithCancel(context.Background())
		end() // a session ending: a claim that got through releases its shard at start
		g.releases, g.shardsCtx, g.stopNow = context.Background(), ended, ended
		require.True(t, o.reserve("x", takingBack, nil))
		won, why := g.claimOne(candidate{name: "x", exists: true, etag: etag, leased: true, prev: e.term, dead: true, oldID: id, fromList: true})
		assert.False(t, won, "a fixed lease is not run under")
		assert.Equal(t, "held", why)
		assert.Contains(t, logs.String(), "is not one the library takes")
		info := leaderOnBlob(t, s, blob)
		assert.False(t, info.Held(), "given back")
		assert.Equal(t, int64(3), info.Leader.Number, "no term recorded under it")
	})
}

// bareManager is a session's manager with no session running: enough to
// make one claim (claimOne) by hand.
func bareManager(o *ShardOwner) *shardManager {
	return &shardManager{o: o, s: &session{id: uuid.NewString()}, ctx: context.Background(),
		ownTerms: ownTerms{terms: map[ownTerm]bool{}, highest: map[string]int64{}}, shardListing: shardListing{owners: map[string]shardHolder{}}}
}

// ownerOfX is a ShardOwner of the one shard x that nothing runs, its logs,
// and a raw handle on its container: for claims made by hand.
func ownerOfX(t *testing.T) (BlobSettings, rawBlob, *ShardOwner, *syncBuffer) {
	s := shardSettings(t)
	raw := newRawBlob(t, s)
	logs := &syncBuffer{}
	o, err := NewShardOwner(s, []string{"x"}, func(context.Context, string) error { return nil },
		WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	require.NoError(t, err)
	t.Cleanup(o.storage.closeIdle)
	return s, raw, o, logs
}
