package leaderelection

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
)

// The other writer (issue 38): an actor that does to the fleet's blobs what
// an operator, a script or another program does. In each storm it lists the
// container and, at times drawn from the seed, picks a blob (a mutex's, a
// session's, a shard's, a note, a held list) and an action: acquire, renew,
// release, break (with and without a period) or change a lease, under an ID
// it made up, or one it read or guessed (a session's lease ID is its name;
// a shard's derives from its record, wire.ClaimLeaseID and HandoffLeaseID;
// a mutex contender's is in its lease ID file); write metadata (the record
// as it is, a stale one, an unknown key, a term that does not read);
// rewrite a blob's content (sim_writers_content_test.go); delete a blob or
// the container; and leaderctl's calls (status, break, break -force,
// repair, repair -allow-lower, shards), made as leaderctl makes them. It
// also acts at protocol points (sim_points_test.go), on the blob a request
// just wrote; and, in half the fleets, as a function triggered by blobs
// created in the container (simTrigger, sim_writers_trigger_test.go: Event
// Grid's BlobCreated, an Azure Functions blob trigger): an instance's
// upload fires it (every upload, or a share drawn from 5 to 50%), and 0 to
// 2 s later it does one of these actions to that blob, counted as "trigger
// ...".
//
// It holds back, by name, only what the docs say is not covered
// (simWriterLimits), judged on the fake's true state just before the
// request: an action that would end a lease held under an ID not its own
// sooner than the lease would end without it. Deletions of an election's
// blob, or of the container, go through the fault model's deletable, as the
// plan's do. Everything else may happen, and the checker judges it with
// every rule but one: a func whose lease another writer changed
// (ChangeLease under its ID) no longer holds that lease on the fake, which
// the library cannot prevent; only the lease rule spares it from then on
// (sim.Checker.Taken). Its own leases (acquired under an ID it made up on a
// blob nobody held) it releases before the calm; what it left behind (a
// lease under a guessed ID, a changed lease) the library's own rules must
// clear within the calm's bounds.

// simWriterLimits are the sections of docs/limits.md (and the section of
// docs/shardowner.md it points to) that name what another writer may do
// that the library does not survive; each hold-back of the writer cites
// one.
//
// Two were found by this writer (issue 38's report) and are stated since:
// a record whose term is lower than one the fleet saw (written by hand, or
// by leaderctl repair -allow-lower), which an instance that never saw the
// higher trusts (limits.md "A term written lower by hand is trusted";
// -sim.stale lets it happen); and a fixed lease acquired again under its
// holder's ID (which only its lease ID file tells: "A lease ID file is
// sound on one host only") as infinite, which the followers then break as
// a silent ETag lease while its native holder renews, or for less than the
// holder's duration, which its renewals then extend it by, while the holder
// times its deadline with its own.
var simWriterLimits = struct{ breakShortens, etagBreak, shardBreak, staleTerm, redone string }{
	breakShortens: `limits.md "A break shortens the lease"`,
	etagBreak:     `limits.md "An ETag lease trusts the followers' clocks" (the safe break of an ETag lease is BreakWhenSilent)`,
	shardBreak:    `limits.md "A break shortens the lease": "Never break a ShardOwner's shard by hand"`,
	staleTerm:     `limits.md "A term written lower by hand is trusted": "an instance that did not (one started since, or restarted) trusts it"`,
	redone:        `limits.md "A lease ID file is sound on one host only" (a native lease acquired again under its holder's ID, infinite or shorter)`,
}

var simStale = flag.Bool("sim.stale", false, "simulator: let the other writer write terms lower than the fleet saw (see simWriterLimits)")

// The writer's actions, by weight: every kind may be drawn in every
// fleet.
var simWriterActions = []struct {
	kind   string
	weight int
}{
	{"acquire", 4}, {"renew", 2}, {"release", 2}, {"break", 3}, {"change", 3},
	{"metadata", 3}, {"content", 3}, {"delete", 2}, {"ctl-status", 1}, {"ctl-break", 2}, {"ctl-repair", 2}, {"ctl-shards", 1},
}

// simWriterMarker is a metadata key the writer adds to every record it
// writes by hand, so that the driver does not take it for the library's
// (the checker's rule "record" judges the library's records); the
// library's next write of its own replaces it.
const simWriterMarker = "simwriter"

type simWriter struct {
	f  *simFleet
	cc *container.Client

	mu    sync.Mutex
	rng   *rand.Rand        // the timeline's draws
	ids   map[string]bool   // lease IDs it made up
	owned map[string]string // blob -> its own lease (acquired on a blob nobody held)
}

func newSimWriter(f *simFleet) *simWriter {
	cc, err := container.NewClientFromConnectionString(memblob.ConnectionString, simContainer,
		&container.ClientOptions{ClientOptions: f.svc.ClientOptions()})
	if err != nil {
		panic(err) // a constant connection string
	}
	return &simWriter{f: f, cc: cc, rng: f.rngFor("writer"), ids: map[string]bool{}, owned: map[string]string{}}
}

// schedule adds the writer's actions to the fleet's timeline: in each
// storm (the first from the fleet's start), 0 to 2 × perStorm/3 actions,
// and the release of its own leases before the calm.
func (w *simWriter) schedule(at func(time.Duration, func())) {
	for _, st := range w.f.plan {
		last := st.Calm - 10*time.Second
		if last <= st.Start {
			continue
		}
		n := w.rng.IntN(2*max(1, defaultShape.perStorm/3) + 1) // as in any weather (drawWeather)
		for range n {
			t := st.Start + time.Duration(w.rng.Int64N(int64(last-st.Start)))
			r := rand.New(rand.NewPCG(w.rng.Uint64(), w.rng.Uint64()))
			at(t, func() { w.act(r, "", st.Calm) })
		}
		at(last+5*time.Second, w.releaseOwned)
	}
}

// act does one action drawn from r, on blob (or, if "", on a blob drawn
// from a listing), before calm. Each action draws from a source of its
// own, drawn from the seed by what called for it (the timeline, a point),
// so that its draws do not depend on the order in which others drew.
func (w *simWriter) act(r *rand.Rand, blob string, calm time.Duration) {
	simWriterCall{simWriter: w, r: r}.actAs(blob, calm, "")
}

// simWriterCall is one action of the writer, with its own draws; as is
// who its actions and hold-backs are counted as ("": the writer;
// "trigger": simTrigger's).
type simWriterCall struct {
	*simWriter
	r  *rand.Rand
	as string
}

// simWriterLeaseActions are the writer's lease actions: what a process's
// stale twin, or a script given its lease ID file, does under its ID.
var simWriterLeaseActions = []string{"acquire", "renew", "release", "break", "change"}

// actAs is act; if id is not "", the action is a lease action drawn from
// simWriterLeaseActions, made under id (read from a lease ID file).
func (w simWriterCall) actAs(blob string, calm time.Duration, id string) {
	ctx := w.f.ctx
	if blob == "" {
		var names []string
		pager := w.cc.NewListBlobsFlatPager(nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				break
			}
			for _, it := range page.Segment.BlobItems {
				names = append(names, *it.Name)
			}
		}
		if len(names) == 0 {
			names = []string{simNativeBlob, simETagBlob}
		}
		blob = names[w.intn(len(names))]
	}
	total := 0
	for _, a := range simWriterActions {
		total += a.weight
	}
	x := w.intn(total)
	kind := ""
	for _, a := range simWriterActions {
		if x < a.weight {
			kind = a.kind
			break
		}
		x -= a.weight
	}
	if st, ok := w.f.svc.Blob(simContainer, blob); ok && len(st.Content) > 0 && w.intn(3) < 2 {
		// A blob that holds content (a held list, a note) is edited, as a
		// script that reads it edits it: two times in three.
		kind = "content"
	}
	if id != "" {
		kind = simWriterLeaseActions[w.intn(len(simWriterLeaseActions))]
	}
	last := simLastList(w.f.svc, simContainer, blob)
	what, err := w.do(ctx, kind, blob, calm, id)
	if what == "" {
		return
	}
	if last && strings.HasPrefix(what, "content") && err == nil {
		w.f.met(w.who()+" "+what+", on a dead session's list", 1)
	}
	result := "ok"
	if err != nil {
		result = "refused"
	}
	w.f.count(w.who()+" "+what, 1)
	w.f.trace.printf(time.Now(), "%s: %s on %s: %s %v", w.who(), what, blob, result, err)
}

// who is what the call's actions and hold-backs are counted as.
func (w simWriterCall) who() string { return cmp.Or(w.as, "writer") }

func (w simWriterCall) intn(n int) int { return w.r.IntN(n) }

func (w simWriterCall) float() float64 { return w.r.Float64() }

// newID is a lease ID the writer made up.
func (w simWriterCall) newID() string {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(w.r.UintN(256))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	id := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	w.ids[id] = true
	return id
}

// holds reports whether id is the writer's own lease on blob: one it took
// on a blob nobody held.
func (w *simWriter) holds(blob, id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.owned[blob] == id
}

// liveFileID reports whether id is one a lane whose process runs proposes
// from its lease ID file (it renews under it).
func (w simWriterCall) liveFileID(id string) bool {
	for _, l := range w.f.lanes {
		if l.file == "" || !w.f.actors.procs[l.idx].Load() {
			continue
		}
		if b, err := os.ReadFile(l.file); err == nil && slices.Contains(w.f.fileIDs(l, strings.TrimSpace(string(b))), id) {
			return true
		}
	}
	return false
}

// fileIDs are the lease IDs a process of mutex lane l may propose from its
// lease ID file, which holds raw (fileLeaseID: derived from raw and the
// duration asked, a native lease's seconds or infinite), for each of the
// lane's timings (before and after a rolling change); and raw, as a script
// given the file, or a process of a version before fileLeaseID, would use
// it. None for an empty file.
func (f *simFleet) fileIDs(l *simLane, raw string) []string {
	if raw == "" {
		return nil
	}
	ids := []string{raw}
	lt := f.shape.laneTimings(l.idx, l.kind)
	for _, tm := range lt.all() {
		if id := fileLeaseID(raw, tm.blob().withDefaults().leaseSeconds()); !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// ownID reports whether id is one the writer made up.
func (w *simWriter) ownID(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ids[id]
}

// guessID is a lease ID for blob as another writer finds one: one it made
// up, the one it holds, or one read or derived (guesses).
func (w simWriterCall) guessID(blob string, st memblob.BlobState) (string, string) {
	var guesses []string
	md := st.Metadata
	switch {
	case strings.HasPrefix(blob, simPrefix+"/"+wire.SessionsDir):
		guesses = append(guesses, strings.TrimPrefix(blob, simPrefix+"/"+wire.SessionsDir))
	case strings.HasPrefix(blob, simPrefix+"/"+wire.ShardsDir):
		shard := strings.TrimPrefix(blob, simPrefix+"/"+wire.ShardsDir)
		session := storedValue(md, wire.MetaSession)
		term, _ := strconv.ParseInt(storedValue(md, wire.MetaTerm), 10, 64)
		if session != "" {
			if gen, err := strconv.ParseInt(storedValue(md, wire.MetaClaimGen), 10, 64); err == nil {
				guesses = append(guesses, wire.ClaimLeaseID(session, gen, shard, term))
			}
			guesses = append(guesses, wire.HandoffLeaseID(session, shard, term), wire.HandoffLeaseID(session, shard, term+1))
		}
	case blob == simNativeBlob || blob == simETagBlob:
		for _, l := range w.f.lanes {
			if l.file == "" || (l.kind == laneNative) != (blob == simNativeBlob) || l.kind == laneShard {
				continue
			}
			if b, err := os.ReadFile(l.file); err == nil {
				guesses = append(guesses, w.f.fileIDs(l, strings.TrimSpace(string(b)))...)
			}
		}
	}
	w.mu.Lock()
	own := w.owned[blob]
	w.mu.Unlock()
	switch x := w.intn(10); {
	case x < 2 || len(guesses) == 0 && own == "":
		return w.newID(), "made up"
	case x < 4 && own != "":
		return own, "its own"
	case len(guesses) > 0:
		return guesses[w.intn(len(guesses))], "guessed"
	}
	return own, "its own"
}

// limit is the section that holds back a change of blob's lease, whose
// state is st, that would end it at end while it stands, not as the
// writer's own lease (one it took on a blob nobody held), sooner than it
// would end without it (zero if the lease is not held, or the change ends it no
// sooner): "" if nothing holds it back.
func (w *simWriter) limit(blob string, st memblob.BlobState, end time.Time, infinite bool) string {
	now := time.Now()
	var ends time.Time // zero: never
	switch st.LeaseState {
	case lease.StateTypeLeased:
		if st.LeaseDuration == lease.DurationTypeFixed {
			ends = st.LeaseExpiry
		}
	case lease.StateTypeBreaking:
		ends = st.BreakTime
	default:
		return ""
	}
	if w.holds(blob, st.LeaseID) || !ends.IsZero() && !ends.After(now) {
		// Its own (taken on a blob nobody held), or over already. A lease
		// it changed from a holder to an ID it made up is not its own.
		return ""
	}
	if infinite || !ends.IsZero() && !end.Before(ends) {
		return ""
	}
	switch {
	case strings.HasPrefix(blob, simPrefix+"/"+wire.ShardsDir):
		return simWriterLimits.shardBreak
	case st.LeaseDuration == lease.DurationTypeFixed:
		return simWriterLimits.breakShortens
	case st.LeaseState == lease.StateTypeBreaking && blob == simNativeBlob:
		return simWriterLimits.breakShortens
	}
	return simWriterLimits.etagBreak
}

// breakLimit is the section that holds back a break of blob's lease with
// period p (st is the blob as read before the break): "" if nothing holds
// it back. Unlike limit, it does not judge the break on the lease st
// shows, which may not be the lease the break finds: an instance may take
// the blob between that read and the break (seed 865483552802: a break
// judged, and meant, for the lease its last holder had declared landed
// on one an instance had just acquired, and cut it short). It judges it
// on any lease the break may find: a break of the native mutex's blob
// with a period of at least the longest LeaseDuration of its instances
// (the fleet's shape.native) ends no lease sooner than its holder's
// deadline, whoever took it; so does a break of the writer's own lease
// (acquired on a blob nobody held; st shows it held and not breaking),
// which no instance can take before it ends. Any other break may cut a
// lease short: of a shard ("Never break a ShardOwner's shard by hand"),
// of the native mutex with a shorter period ("A break shortens the
// lease"), of an ETag lease (no period covers it: BreakWhenSilent is its
// safe break).
func (w *simWriter) breakLimit(blob string, st memblob.BlobState, p time.Duration) string {
	switch {
	case blob == simNativeBlob && p >= w.f.shape.native && !w.f.etagAmong(laneNative):
		// A native lease, as every instance of the election holds: the
		// break ends it no sooner than it would end unrenewed. (An ETag
		// holder, in a fleet that mixes kinds, learns of a break only as
		// it ends, whatever its period: "An ETag lease trusts the
		// followers' clocks", below.)
		return ""
	case st.LeaseState == lease.StateTypeLeased && w.holds(blob, st.LeaseID):
		return ""
	case strings.HasPrefix(blob, simPrefix+"/"+wire.ShardsDir):
		return simWriterLimits.shardBreak
	case blob == simNativeBlob:
		return simWriterLimits.breakShortens
	}
	return simWriterLimits.etagBreak
}

// etagAmong reports whether an instance of the election of kind k may
// hold an ETag lease (its timings, first or after a rolling change).
func (f *simFleet) etagAmong(k laneKind) bool {
	for _, l := range f.lanes {
		if l.kind != k {
			continue
		}
		for _, tm := range f.shape.laneTimings(l.idx, k).all() {
			if tm.blob().withDefaults().kind() == ETagLease {
				return true
			}
		}
	}
	return false
}

// declared is the lease duration blob's record declares, or, if none, the
// fleet's for its kind.
func (w *simWriter) declared(blob string, st memblob.BlobState) time.Duration {
	if d, err := time.ParseDuration(storedValue(st.Metadata, wire.MetaLeaseDuration)); err == nil && d > 0 {
		return d
	}
	if blob == simETagBlob {
		return w.f.shape.etag
	}
	return w.f.shape.native
}

// heldBack counts a hold-back of action on blob by section why.
func (w simWriterCall) heldBack(action, why string) {
	w.f.mu.Lock()
	w.f.held[w.who()+" "+action+": "+why]++
	w.f.mu.Unlock()
	w.f.trace.printf(time.Now(), "%s: %s held back: %s", w.who(), action, why)
}

// do does the action kind on blob; it returns what it did ("" if it did
// nothing) and the storage's refusal.
func (w simWriterCall) do(ctx context.Context, kind, blob string, calm time.Duration, fileID string) (string, error) {
	st, exists := w.f.svc.Blob(simContainer, blob)
	bc := w.cc.NewBlobClient(blob)
	id, whose := fileID, "its file's"
	if id == "" {
		id, whose = w.guessID(blob, st)
	}
	lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		return "", err
	}
	left := time.Until(w.f.begin.Add(calm)) - 5*time.Second
	switch kind {
	case "acquire":
		// A fixed lease that ends within the storm, or an infinite one
		// (released before the calm if its own, broken as silent by a
		// follower if not).
		secs := int32(-1)
		if w.float() < 0.6 && left >= 15*time.Second {
			secs = int32(15 + w.intn(int(min(left, 60*time.Second)/time.Second)-14))
		}
		if exists && st.LeaseID == id && st.LeaseState == lease.StateTypeLeased && st.LeaseDuration == lease.DurationTypeFixed &&
			!w.holds(blob, id) && (secs < 0 || time.Duration(secs)*time.Second < w.declared(blob, st)) && !*simStale {
			// Its next renewals would extend it by that, not by the
			// duration its holder times its deadline with.
			w.heldBack(kind, simWriterLimits.redone)
			return "", nil
		}
		if free := !exists || st.LeaseState != lease.StateTypeLeased && st.LeaseState != lease.StateTypeBreaking; free &&
			(blob == simNativeBlob || blob == simETagBlob) && w.liveFileID(id) &&
			(secs < 0 || time.Duration(secs)*time.Second < w.declared(blob, st)) && !*simStale {
			// The same, on a blob nobody leases now (created again under a
			// leader that has not seen the deletion yet, or whose lease
			// ended), under the ID a running process renews under: its
			// renewals take the lease for its own (seed 6966566902 at
			// 51a0288: the writer acquired the native mutex's blob created
			// again, infinite, under its leader's ID, read from the
			// leader's lease ID file; the leader, unaware of the deletion,
			// renewed it, and a follower broke it as a silent ETag lease
			// once its ETag had stood 15 s, and led beside it).
			w.heldBack(kind, simWriterLimits.redone)
			return "", nil
		}
		if exists && st.LeaseID == id {
			end := time.Now().Add(time.Duration(secs) * time.Second)
			if why := w.limit(blob, st, end, secs < 0); why != "" {
				w.heldBack(kind, why)
				return "", nil
			}
		}
		held := exists && (st.LeaseState == lease.StateTypeLeased || st.LeaseState == lease.StateTypeBreaking)
		_, err := lc.AcquireLease(ctx, secs, nil)
		if err == nil && whose == "made up" && !held {
			w.mu.Lock()
			w.owned[blob] = id
			w.mu.Unlock()
		}
		if err == nil && strings.HasPrefix(blob, simPrefix+"/"+wire.SessionsDir) && storedValue(st.Metadata, wire.MetaEnded) != "" {
			// Not aimed at, counted: the trigger of 60bef19's late acquire.
			w.f.count(w.who()+" acquire: a session marked ended, leased again", 1)
		}
		return kind + " (" + whose + " ID)", err
	case "renew":
		_, err := lc.RenewLease(ctx, nil)
		return kind + " (" + whose + " ID)", err
	case "release":
		if exists && st.LeaseID == id {
			if why := w.limit(blob, st, time.Now(), false); why != "" {
				w.heldBack(kind, why)
				return "", nil
			}
		}
		_, err := lc.ReleaseLease(ctx, nil)
		return kind + " (" + whose + " ID)", err
	case "break":
		period := int32(w.intn(61))
		if w.float() < 0.3 {
			period = 0
		}
		if why := w.breakLimit(blob, st, time.Duration(period)*time.Second); exists && why != "" {
			w.heldBack(kind, why)
			return "", nil
		}
		_, err := lc.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: &period})
		what := "break (period 0)"
		if period > 0 {
			what = "break (a period)"
		}
		return what, err
	case "change":
		to := w.newID()
		_, err := lc.ChangeLease(ctx, to, nil)
		if err == nil {
			// Its own from now on only if it took it from nobody: a lease
			// it took from a holder still bounds that holder's func.
			w.mu.Lock()
			if !exists || st.LeaseState != lease.StateTypeLeased && st.LeaseState != lease.StateTypeBreaking {
				w.owned[blob] = to
			}
			w.mu.Unlock()
		}
		return kind + " (" + whose + " ID)", err
	case "metadata":
		return w.metadata(ctx, bc, blob, st, id, whose)
	case "content":
		return w.content(ctx, blob, st, exists, id, whose)
	case "delete":
		return w.delete(ctx, bc, blob, st, id, whose)
	}
	return w.leaderctl(ctx, kind, blob, st)
}

// metadata writes blob's metadata by hand: its record as it stands (a
// touch), a stale one (a term lower), one with a key of another tool's,
// or one whose term does not read (which an operator then repairs, as the
// plan's Malform). It writes If-Match the ETag it read, without a lease
// ID or under the one it guessed.
func (w simWriterCall) metadata(ctx context.Context, bc *blob.Client, name string, st memblob.BlobState, id, whose string) (string, error) {
	md := map[string]*string{}
	for k, v := range st.Metadata {
		md[k] = &v
	}
	marker := "1"
	md[simWriterMarker] = &marker
	what := "metadata: the record as it is"
	bad := ""
	term, err := strconv.ParseInt(storedValue(st.Metadata, wire.MetaTerm), 10, 64)
	switch x := w.intn(4); {
	case x == 0 && err == nil && term > 1 && !*simStale:
		w.heldBack("metadata: a stale term", simWriterLimits.staleTerm)
		return "", nil
	case x == 0 && err == nil && term > 1:
		lower := strconv.FormatInt(1+int64(w.intn(int(min(term-1, 1000)))), 10)
		setStored(md, wire.MetaTerm, lower)
		what = "metadata: a stale term"
	case x == 1:
		other := "another tool's value"
		md["othertool"] = &other
		what = "metadata: another tool's key"
	case x == 2 && (name == simNativeBlob || name == simETagBlob) && err == nil:
		w.f.mu.Lock()
		_, pending := w.f.malformed[name]
		w.f.mu.Unlock()
		if !pending {
			bad = storedValue(st.Metadata, wire.MetaTerm) + "x"
			setStored(md, wire.MetaTerm, bad)
			what = "metadata: a term that does not read"
		}
	}
	opts := &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &st.ETag}}}
	if w.intn(2) == 0 {
		opts.AccessConditions.LeaseAccessConditions = &blob.LeaseAccessConditions{LeaseID: &id}
		what += " (" + whose + " ID)"
	}
	if bad != "" {
		// Pending before the write lands, so that no deletion sees it
		// unrepaired and unknown (deletable).
		w.f.mu.Lock()
		w.f.malformed[name] = bad
		w.f.mu.Unlock()
	}
	_, err = bc.SetMetadata(ctx, md, opts)
	if bad != "" {
		if err != nil {
			w.f.mu.Lock()
			delete(w.f.malformed, name)
			w.f.mu.Unlock()
		} else {
			w.f.wg.Add(1)
			go w.f.repair(name)
		}
	}
	return what, err
}

// setStored sets key in md, under the case it is stored with.
func setStored(md map[string]*string, key, v string) {
	for k := range md {
		if strings.EqualFold(k, key) {
			md[k] = &v
			return
		}
	}
	md[key] = &v
}

// delete deletes blob by hand: without a lease ID (refused while it is
// leased) or under the one it guessed; or, once in four, the container.
// An election's blob, or the container, only as the fault model lets it
// (deletable).
func (w simWriterCall) delete(ctx context.Context, bc *blob.Client, name string, st memblob.BlobState, id, whose string) (string, error) {
	f := w.f
	if w.intn(4) == 0 {
		targets := f.ran()
		if !f.deletable(targets) {
			return "", nil
		}
		_, err := w.cc.Delete(ctx, nil)
		if err != nil {
			// Not deleted after all: back to what the fault model knew
			// before, which keeps the marks of an earlier deletion still
			// pending (a refusal is often that: the container is gone).
			f.undelete(targets)
		}
		return "delete the container", err
	}
	opts := &blob.DeleteOptions{}
	what := "delete a blob"
	if w.intn(2) == 0 {
		opts.AccessConditions = &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &id}}
		what += " (" + whose + " ID)"
		if st.LeaseID == id {
			if why := w.limit(name, st, time.Now(), false); why != "" {
				w.heldBack("delete", why)
				return "", nil
			}
		}
	}
	election := simContainer + "/" + name
	if name == simNativeBlob || name == simETagBlob || strings.HasPrefix(name, simPrefix+"/"+wire.ShardsDir) {
		if !f.deletable([]string{election}) {
			return "", nil
		}
	}
	_, err := bc.Delete(ctx, opts)
	if err != nil {
		f.undelete([]string{election}) // not deleted after all
	}
	return what, err
}

// releaseOwned releases the leases the writer holds of its own, before a
// calm.
func (w *simWriter) releaseOwned() {
	w.mu.Lock()
	owned := maps.Clone(w.owned)
	clear(w.owned)
	w.mu.Unlock()
	for _, blob := range slices.Sorted(maps.Keys(owned)) {
		id := owned[blob]
		lc, err := lease.NewBlobClient(w.cc.NewBlobClient(blob), &lease.BlobClientOptions{LeaseID: &id})
		if err != nil {
			continue
		}
		if _, err := lc.ReleaseLease(w.f.ctx, nil); err == nil {
			w.f.count("writer release (its own, before the calm)", 1)
		}
	}
}

// observe is the writer's part of the fleet's observer, under the fake's
// lock, before the checker hears of e: a change of a lease to an ID the
// writer made up takes it from whoever held it (the checker's Taken).
func (w *simWriter) observe(e memblob.Event) {
	if e.Op == memblob.OpChange && e.OK() && w.ownID(e.ProposedLeaseID) {
		w.f.chk.Taken(e.Time, e.Container+"/"+e.Blob, e.LeaseID, e.ProposedLeaseID)
	}
}

// byWriter reports whether a stored record was written by the writer by
// hand.
func byWriter(md map[string]string) bool {
	return storedValue(md, simWriterMarker) != ""
}
