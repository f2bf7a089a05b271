package leaderelection

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/sim"
	"github.com/blobelect/leaderelection/internal/wire"
)

// One fleet of the simulator (sim_test.go): mutex contenders and ShardOwner
// instances in one synctest bubble, on one in-memory Blob service, each
// instance behind a fault-injecting transport of its own, under the faults
// a plan drawn from the fleet's seed says, judged by internal/sim's
// checker at every step.

// simShape is what a fleet is.
type simShape struct {
	class                              string           // its configuration class (sim_config_test.go)
	quorum                             int              // the accounts the native mutex leads over (sim_quorum_test.go); 0: one, the fleet's service
	timings                            []simLaneTimings // by lane (nil: each lane the lease of its kind, and retry or shardRetry)
	nativeLanes, etagLanes, shardLanes int
	native, etag, session              time.Duration // lease durations (the longest of each election's lanes)
	retry, shardRetry                  time.Duration // RetryInterval: the mutexes', the ShardOwners' (the longest)
	notesPoll                          time.Duration // how often a ShardOwner that expects shards reads its notes (0: the library's)
	strayAfter                         time.Duration // how long before a ShardOwner at its share looks for a stray lease (0: the library's)
	reserveWait                        time.Duration // the most a ShardOwner waits before it reserves a shard (see withReserveWaits)
	noteWait                           time.Duration // the most one ShardOwner waits before it reserves a shard a note handed it

	shards      int    // the first set's size
	sets        [2]int // the sizes SetShards draws from
	storm, calm time.Duration
	length      time.Duration
	asked       time.Duration // the length the run asked for (-sim.hours): length is less for a costly fleet (simShapeFor)
	perStorm    int           // lane faults a storm holds, on average (internal/sim's Shape.PerStorm)
	weather     string        // the storms' weather drawn (drawWeather)
	lateMax     time.Duration
}

// defaultShape is the default run's fleet: a mutex on a native 30 s lease
// with 3 contenders, a mutex on a 12 s ETag lease with 2, and 3 ShardOwner
// instances on 24 s sessions running 3 to 6 shards (5 at first); which
// have a lease ID file, and whether a pod's replacement loses it, is drawn
// (simFilesFor). The mutexes retry every 16 s, the
// ShardOwners every 20 s, and a ShardOwner reads its notes every 300 ms
// while it expects shards (the library's 100 ms, through a seam): the
// listings of notes and of sessions were most of a fleet's time, and no
// timing of the argument, nor any bound, rests on how often a receiver
// reads its notes. A ShardOwner at its share looks for a stray lease (a
// claim that died between its acquire and its record) after 1 to 2
// minutes, not the library's 5 to 10 (the existing seam): a fleet's hour
// would otherwise hold few, and each would hold its shard for longer than
// a storm and its calm. Before each reservation of a shard (a claim's, an
// adoption's) a ShardOwner waits up to 3 s, drawn from the seed (the
// seam beforeReserve), as a busy host might: what its caller decided
// before the lock then meets what the others did meanwhile. And one
// ShardOwner of the three, drawn from the seed, is slow to act on its
// notes: before it reserves a shard a note handed it, it waits 15 to 30 s
// (its other reservations, like the others', up to 3 s). A race between
// two paths needs one to wait while the other goes on, as a scheduler's
// priorities make it: here a listing finds the shard handed to it
// meanwhile, and adopts it on its own path. (An adoption from a listing
// began while one from a note of the same term waited 8 times in 316
// fleet-hours with waits of up to 500 ms, 44 times in 292 with waits of
// up to 3 s, and 539 times in 413 with the slow one.)
var defaultShape = simShape{
	nativeLanes: 3, etagLanes: 2, shardLanes: 3,
	native: 30 * time.Second, etag: 12 * time.Second, session: 24 * time.Second,
	retry: 16 * time.Second, shardRetry: 20 * time.Second, notesPoll: 300 * time.Millisecond, strayAfter: time.Minute,
	reserveWait: 3 * time.Second, noteWait: 30 * time.Second,
	shards: 5, sets: [2]int{3, 6},
	storm: 150 * time.Second, calm: 180 * time.Second,
	length:   time.Hour,
	perStorm: 10, weather: weatherUsual,
	lateMax: 40 * time.Second,
}

const simContainer = "sim"

// simSASURL is the container's URL with a SAS token the fake ignores, as
// it ignores every credential: a request then carries the token in its
// query, and the SDK computes no signature for it (an account key's
// HMAC of each request cost a tenth of a fleet's time).
const simSASURL = memblob.Endpoint + "/" + simContainer + "?sv=2025-01-05&sr=c&sp=racwdl&sig=c2ltdWxhdG9y"

// Mutex blobs and the ShardOwner's prefix.
const (
	simNativeBlob = "m-native"
	simETagBlob   = "m-etag"
	simPrefix     = "jobs"
)

type laneKind int

const (
	laneNative laneKind = iota
	laneETag
	laneShard
)

type simFleet struct {
	t     interface{ Logf(string, ...any) }
	seed  uint64
	shape simShape
	svc   *memblob.Service
	chk   *sim.Checker
	dir   string   // lease ID files
	files simFiles // which lanes have one, and whether a fleet fault loses it (simFilesFor)
	log   bool     // the library's logs, to stderr
	lanes []*simLane
	plan  []sim.Stretch
	begin time.Time
	ctx   context.Context // ends with the fleet
	wg    sync.WaitGroup  // the fleet's own goroutines (operators, checks)

	trace *simTracer // every step of the fleet, kept for a trace file (see simTracer)

	mu        sync.Mutex
	rng       *rand.Rand           // the timeline's draws (one goroutine, in virtual-time order)
	set       []string             // the shard set the fleet converges to
	faults    map[string]int       // injected, by kind
	seen      map[string]int       // protocol events met, not faults (met)
	requests  int                  // sent by the instances
	repaired  map[string]time.Time // election -> when an operator repaired its record
	malformed map[string]string    // election -> the malformed term it was given
	recovery  time.Duration        // the longest recovery measured
	notes     []string             // what the driver saw go wrong that is not the library's
	names     map[string]*simLane  // an incarnation's name -> its lane
	// The fault model's bookkeeping (see deletable): elections deleted and
	// not run since, when; who last ran each election; what the plan held
	// back to stay within the library's promise.
	pending map[string]time.Time
	// witnesses are, for each pending election, the processes (lane and
	// incarnation) that were witnesses of its last term at its deletion:
	// a read after the deletion sees no term of before.
	witnesses map[string]map[[2]int]bool
	// pendings are, for each pending election, its last term at its
	// deletion and whether its blob was created again and seeded since
	// (noteStored); before, what deletable marked, for undelete.
	pendings map[string]simPending
	before   map[string]simBefore
	lastRun  map[string]simRun
	// lastRecord is, for each election, who recorded its highest term,
	// and when first: a term recorded whose func never ran (its answer
	// lost) is a term all the same (see witness). named is, for each
	// shard election, the process its last record named (see recorder).
	lastRecord map[string]simRun
	named      map[string]simRun
	held       map[string]int
	made       map[string]int  // cases an older fault model held back, made (see madeDeletion)
	termed     map[string]bool // shard elections whose blob carries a term's record
	actors     simActors       // the other writer and the protocol points (sim_points_test.go)
	quorum     *simQuorum      // a quorum fleet's accounts (sim_quorum_test.go), or nil
	// outOfSet is, for each shard election, when it last left the fleet's
	// set (see leaveSet).
	outOfSet map[string]time.Time
}

// simRun is who started an election's last func (or recorded its highest
// term), when, and its term.
type simRun struct {
	lane, inc int
	at        time.Time
	term      int64
}

type simLane struct {
	f    *simFleet
	idx  int
	kind laneKind
	file string // lease ID file, or ""
	// noteWait, if not 0, is how long a ShardOwner waits at most before it
	// reserves a shard a note handed it (see defaultShape).
	noteWait time.Duration
	cmds     chan laneCmd
	done     chan struct{} // the supervisor returned

	mu       sync.Mutex
	rng      *rand.Rand // the lane's draws (its transports' rates), from the seed and the lane
	inc      int
	name     string            // the current incarnation's, its identity
	tr       *faults.Transport // the current incarnation's
	spent    []*faults.Transport
	cut      int                   // partitions in force
	slow     map[int]time.Duration // by fault id
	rates    map[int]sim.Fault     // by fault id
	died     map[int]bool          // the CrashInStep faults (by id) that killed the process, until it starts again (dieInStep)
	set      []string
	setAt    time.Time // when set last changed
	owner    *ShardOwner
	sessions map[string]string // shard -> the session that started its run (events)
	// The process, as the fault model sees it: down is how many planned
	// crashes and stops hold it down; alive from the start command to the
	// crash or stop; starting while a start waits for the plan's leave
	// (startLane).
	down     int
	alive    bool
	starting bool
	replaced bool // a fleet fault replaced its pod: its file goes before its next process (replacePod)
	booting  int  // start commands sent whose process has not begun yet (the last may still wind down; a kill and a start may queue behind one)
	born     time.Time
	// What the current incarnation has seen of the fleet: seenAt, when it
	// first did (a mutex contender: its first read of its blob; a
	// ShardOwner: its first listing of the sessions once its session's
	// record is stored); readAt, a mutex contender's last read of its
	// blob; published, the highest term a ShardOwner's session record said
	// it saw on any shard (wire.MetaSeen).
	seenAt    time.Time
	readAt    time.Time
	recorded  bool
	published int64
	// sawShard: the shards whose terms a ShardOwner's current process saw:
	// it ran one, read its blob, or listed the shards while it carried a
	// term (its floor for it is then above 0); for a mutex contender, its
	// blob, once it ran it or read a term there that reads (readTerms).
	sawShard map[string]bool
}

type laneCmd int

const (
	cmdCrash laneCmd = iota
	cmdStop
	cmdStart
	cmdFinish
)

// rngFor is a source drawn from the seed and parts alone: draws that do
// not depend on what other goroutines drew first (simRngFor: before there
// is a fleet).
func (f *simFleet) rngFor(parts ...string) *rand.Rand { return simRngFor(f.seed, parts...) }

func simRngFor(seed uint64, parts ...string) *rand.Rand {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

func (f *simFleet) between(lo, hi time.Duration) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(f.rng.Int64N(int64(hi-lo)))
}

func (f *simFleet) count(kind string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[kind] += n
}

// met counts n protocol events of kind that are not faults (sim.Result.Met).
func (f *simFleet) met(kind string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen[kind] += n
}

func (f *simFleet) note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := fmt.Sprintf("%.1fs ", time.Since(f.begin).Seconds()) + fmt.Sprintf(format, args...)
	if len(f.notes) < 20 && !slices.Contains(f.notes, n) {
		// Each stretch's watch of an election notes a record never
		// repaired at the fleet's end: once is enough.
		f.notes = append(f.notes, n)
	}
}

func simShardNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s%02d", i)
	}
	return out
}

// newSimFleet builds the fleet of seed, inside the bubble.
func newSimFleet(seed uint64, shape simShape, dir string, log bool, t interface{ Logf(string, ...any) }) *simFleet {
	f := &simFleet{
		t: t, seed: seed, shape: shape, log: log, dir: dir,
		chk:        sim.NewChecker(),
		rng:        rand.New(rand.NewPCG(seed, 0x5eed)),
		set:        simShardNames(shape.shards),
		faults:     map[string]int{},
		seen:       map[string]int{},
		repaired:   map[string]time.Time{},
		malformed:  map[string]string{},
		names:      map[string]*simLane{},
		pending:    map[string]time.Time{},
		witnesses:  map[string]map[[2]int]bool{},
		pendings:   map[string]simPending{},
		before:     map[string]simBefore{},
		lastRun:    map[string]simRun{},
		lastRecord: map[string]simRun{},
		named:      map[string]simRun{},
		held:       map[string]int{},
		made:       map[string]int{},
		termed:     map[string]bool{},
		outOfSet:   map[string]time.Time{},
		trace:      &simTracer{},
	}
	f.chk.DeleteGrace = max(shape.native, shape.etag, shape.session)
	f.svc = memblob.New(memblob.WithObserver(f.observe))
	f.files = simFilesFor(seed, shape)
	add := func(kind laneKind, n int) {
		for range n {
			l := &simLane{f: f, idx: len(f.lanes), kind: kind, cmds: make(chan laneCmd, 16), done: make(chan struct{}),
				slow: map[int]time.Duration{}, rates: map[int]sim.Fault{}, died: map[int]bool{}, set: f.set,
				rng: f.rngFor("lane", strconv.Itoa(len(f.lanes)))}
			if slices.Contains(f.files.lanes, l.idx) {
				l.file = filepath.Join(dir, fmt.Sprintf("lane%d.id", l.idx))
			}
			f.lanes = append(f.lanes, l)
		}
	}
	add(laneNative, shape.nativeLanes)
	add(laneETag, shape.etagLanes)
	add(laneShard, shape.shardLanes)
	if shape.shardLanes > 0 && shape.noteWait > 0 {
		first := shape.nativeLanes + shape.etagLanes
		f.lanes[first+f.rngFor("note waits").IntN(shape.shardLanes)].noteWait = shape.noteWait
	}
	f.plan = sim.NewPlan(seed, shape.plan(f.files.lanes))
	f.shape = f.shape.swept(f.plan)
	f.actors = newSimActors(f)
	f.quorum = newSimQuorum(f)
	return f
}

// plan is the shape of the fleet's plan of faults, files the lanes that
// have a lease ID file.
func (shape simShape) plan(files []int) sim.Shape {
	return sim.Shape{
		Lanes: shape.nativeLanes + shape.etagLanes + shape.shardLanes, FileLanes: files, Elections: 2 + shape.shards,
		// A shard's record made malformed under a held lease cannot be
		// repaired by the rules (RepairRecord needs the lease free, and
		// nobody may break a shard's lease by hand), so only the mutexes'
		// records are.
		Malformed: 2,
		ShardSets: shape.sets, Storm: shape.storm, Calm: shape.calm, Length: shape.length,
		PerStorm: shape.perStorm, LateMax: shape.lateMax,
		StorageOdd: 0.25, MalformOdd: 0.25, SetOdd: 0.3,
		Groups: shape.groups(), FleetOdd: 0.4,
	}
}

// observe turns the fake's events into the checker's, under the fake's
// lock: the order in which requests took effect.
func (f *simFleet) observe(e memblob.Event) {
	f.actors.observe(e)
	switch {
	case e.Op == memblob.OpDeleteContainer:
		if e.OK() {
			f.chk.Lease(sim.LeaseEvent{Time: e.Time, Blob: e.Container + "/", Op: string(e.Op), Admin: e.Admin, State: sim.Gone})
		}
	case e.Blob == "":
	default:
		ev := sim.LeaseEvent{Time: e.Time, Blob: e.Container + "/" + e.Blob, Op: string(e.Op), Admin: e.Admin,
			State: string(e.LeaseState), ID: e.Lease, Expiry: e.LeaseExpiry}
		if e.ETag == "" {
			ev.State, ev.ID = sim.Gone, ""
		}
		f.chk.Lease(ev)
		if e.OK() && !e.Admin && (e.Op == memblob.OpSetMetadata || e.Op == memblob.OpUpload) {
			f.stored(e)
		}
	}
	if e.Op != memblob.OpList && (e.Op != memblob.OpGetProperties || e.Status != http.StatusOK) {
		f.trace.fake(e)
	}
}

// simRecord reads a stored record: its term, whom it names (identity and,
// for a shard, session), and whether it carries an end mark.
func simRecord(md map[string]string) (term, holder string, ended bool) {
	var identity, session string
	for k, v := range md {
		switch strings.ToLower(k) {
		case wire.MetaTerm:
			term = v
		case wire.MetaIdentity:
			identity = v
		case wire.MetaSession:
			session = v
		case wire.MetaEnded:
			ended = v != ""
		}
	}
	if identity == "" && session == "" {
		return term, "", ended
	}
	return term, identity + " " + session, ended
}

// stored is what the driver reads in a record the fake stored, under the
// fake's lock: an election's term record, for the checker's rule
// "record"; a session's record, for what its instance has seen of the
// fleet (the fault model, see deletable).
func (f *simFleet) stored(e memblob.Event) {
	f.noteStored(e)
	term, holder, ended := simRecord(e.Metadata)
	n, err := strconv.ParseInt(term, 10, 64)
	if err != nil || n <= 0 || byWriter(e.Metadata) {
		return
	}
	switch {
	case e.Blob == simNativeBlob || e.Blob == simETagBlob || strings.HasPrefix(e.Blob, simPrefix+"/"+wire.ShardsDir):
		election := e.Container + "/" + e.Blob
		if holder != "" && !ended {
			f.chk.Record(e.Time, election, n, holder)
		}
		f.mu.Lock()
		f.termed[election] = true
		if by, ok := f.recorder(election, e.Metadata, holder); ok && !ended && n > f.lastRecord[election].term {
			f.lastRecord[election] = simRun{lane: by.lane, inc: by.inc, at: e.Time, term: n}
		}
		f.mu.Unlock()
	case strings.HasPrefix(e.Blob, simPrefix+"/"+wire.SessionsDir) && !ended:
		identity, seen := "", int64(0)
		for k, v := range e.Metadata {
			switch strings.ToLower(k) {
			case wire.MetaIdentity:
				identity = v
			case wire.MetaSeen:
				seen, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		f.mu.Lock()
		l := f.names[identity]
		f.mu.Unlock()
		if l != nil {
			l.mu.Lock()
			if l.name == identity {
				l.recorded = true
				l.published = max(l.published, seen)
			}
			l.mu.Unlock()
		}
	}
}

// recorder is the process that wrote a record naming holder on election's
// blob, whose metadata is md: the process it names; but a shard's
// handover (a record with no claim gen) is written by its giver, the
// process the blob's record before named (the giver's claim, or the
// handover to it: a handover is If-Match the ETag of the record it ran
// under). If that session was resumed since by a new process, the one
// named is dead, and the record has no live writer here: the fault model
// holds back more than it must, never less. Under f.mu.
func (f *simFleet) recorder(election string, md map[string]string, holder string) (simRun, bool) {
	var by simRun
	if _, err := fmt.Sscanf(holder, "lane%d.%d", &by.lane, &by.inc); err != nil {
		return simRun{}, false
	}
	if f.kindOf(election) != laneShard {
		return by, true
	}
	giver, ok := f.named[election]
	f.named[election] = by
	if storedValue(md, wire.MetaClaimGen) != "" {
		return by, true
	}
	return giver, ok
}

// electionBlob is the blob of election i: the two mutexes, then the shards
// of the set.
func (f *simFleet) electionBlob(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	all := append([]string{simNativeBlob, simETagBlob}, f.shardBlobs()...)
	return all[i%len(all)]
}

func (f *simFleet) shardBlobs() []string {
	out := make([]string, len(f.set))
	for i, s := range f.set {
		out[i] = wire.ShardBlob(simPrefix+"/", s)
	}
	return out
}

func (f *simFleet) logger(name string) *slog.Logger {
	if !f.log {
		return slog.New(simLogs{tr: f.trace, name: name})
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("sim", name)
}

// settings are an instance's on transport tr.
func (f *simFleet) settings(blob string, d time.Duration, tr *faults.Transport) BlobSettings {
	if os.Getenv("SIM_KEY") != "" {
		return BlobSettings{
			ConnectionString: memblob.ConnectionString,
			Container:        simContainer,
			Blob:             blob,
			LeaseDuration:    d,
			RetryInterval:    f.shape.retry,
			ClientOptions:    &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}},
		}
	}
	return BlobSettings{
		SASURL:        simSASURL,
		Container:     simContainer,
		Blob:          blob,
		LeaseDuration: d,
		RetryInterval: f.shape.retry,
		ClientOptions: &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}},
	}
}

// onExchange counts an instance's requests, and the faults injected into
// them one request at a time, and notes what incarnation inc of lane l has
// seen of the fleet (see simLane).
func (f *simFleet) onExchange(l *simLane, inc int, ex faults.Exchange) {
	var saw []string
	listing := false
	if ex.Status == http.StatusOK && l.kind == laneShard {
		shards := simContainer + "/" + simPrefix + "/" + wire.ShardsDir
		switch {
		case ex.Method == http.MethodGet && strings.Contains(ex.URL, "prefix="+url.QueryEscape(simPrefix+"/"+wire.ShardsDir)):
			f.mu.Lock()
			saw = slices.Collect(maps.Keys(f.termed))
			f.mu.Unlock()
			listing = true
		case ex.Method == http.MethodHead && strings.Contains(ex.URL, "/"+shards):
			e := ex.URL[strings.Index(ex.URL, "/"+shards)+1:]
			if i := strings.IndexAny(e, "?"); i >= 0 {
				e = e[:i]
			}
			f.mu.Lock()
			if f.termed[e] {
				saw = []string{e}
			}
			f.mu.Unlock()
		}
	}
	if ex.Status == http.StatusOK && l.kind != laneShard && ex.Method == http.MethodHead {
		saw = f.readTerms(l)
	}
	if ex.Status == http.StatusOK {
		l.mu.Lock()
		if l.runs(inc) {
			for _, e := range saw {
				// A listing keeps the terms of the shards of its set only
				// (readShards), as the set stood when it was sent.
				if listing && (!slices.Contains(l.set, path.Base(e)) || l.setAt.After(ex.Sent)) {
					continue
				}
				l.sawShard[e] = true
			}
			switch {
			case l.kind != laneShard && ex.Method == http.MethodHead:
				if len(saw) > 0 {
					l.readAt = ex.Sent // it saw what was stored before it was sent: a term that reads (readTerms)
				}
				if l.seenAt.IsZero() {
					l.seenAt = ex.Done
				}
			case l.kind == laneShard && l.recorded && l.seenAt.IsZero() && ex.Method == http.MethodGet &&
				strings.Contains(ex.URL, "prefix="+url.QueryEscape(simPrefix+"/"+wire.SessionsDir)):
				l.seenAt = ex.Done
			}
		}
		l.mu.Unlock()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	switch ex.Fault {
	case faults.FaultLose:
		f.faults[sim.ReqLost]++
	case faults.FaultLate:
		f.faults[sim.ReqLate]++
	case faults.FaultFail:
		if ex.Status == http.StatusInternalServerError {
			f.faults[sim.ReqFailed]++
		} else {
			f.faults[sim.ReqThrottled]++
		}
	}
}

// malform gives election blob's record a term that does not read.
func (f *simFleet) malform(blob string) bool {
	f.mu.Lock()
	_, pending := f.malformed[blob]
	f.mu.Unlock()
	if pending {
		return false // one malformed record at a time on a blob
	}
	st, ok := f.svc.Blob(simContainer, blob)
	if !ok {
		return false
	}
	md := st.Metadata
	key := wire.MetaTerm
	for k := range md {
		if strings.EqualFold(k, wire.MetaTerm) {
			key = k
		}
	}
	bad := md[key] + "x"
	md[key] = bad
	if _, err := f.svc.SetBlobMetadata(simContainer, blob, md); err != nil {
		return false
	}
	f.mu.Lock()
	f.malformed[blob] = bad
	f.mu.Unlock()
	return true
}

// repair is an operator's repair of a malformed record, with leaderctl's
// rule: once nobody holds the blob's lease, a clean record of a term at
// least as high as any the fleet saw (the checker's). It gives up when the
// record was rewritten meanwhile, the blob is gone, or the fleet ends.
func (f *simFleet) repair(blob string) {
	defer f.wg.Done()
	f.mu.Lock()
	bad := f.malformed[blob]
	f.mu.Unlock()
	election := simContainer + "/" + blob
	mgr, err := NewBlobLeaseManager(BlobSettings{
		ConnectionString: memblob.ConnectionString, Container: simContainer, Blob: blob,
		ClientOptions: &azblob.ClientOptions{ClientOptions: f.svc.ClientOptions()},
	}, bubbleClock(), WithLogger(f.logger("operator")))
	if err != nil {
		f.note("operator: %v", err)
		return
	}
	defer mgr.CloseIdleConnections()
	for {
		st, ok := f.svc.Blob(simContainer, blob)
		term := storedValue(st.Metadata, wire.MetaTerm)
		switch {
		case !ok || term != bad:
			f.mu.Lock()
			f.repaired[election] = time.Now()
			delete(f.malformed, blob)
			f.mu.Unlock()
			return
		case st.LeaseState == "available" || st.LeaseState == "expired" || st.LeaseState == "broken":
			if _, err := mgr.RepairRecord(f.ctx, f.chk.MaxTerm(election)); err == nil {
				continue
			}
		case blob == simETagBlob:
			// An ETag lease whose holder is gone: the operator's safe
			// break, the followers' rule.
			_, _, _ = mgr.BreakWhenSilent(f.ctx)
		}
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// withHandoffPoll sets how often a ShardOwner that expects shards reads
// its notes (0: the library's handoffPoll).
func withHandoffPoll(d time.Duration) Option {
	return func(o *options) { o.seams.handoffPoll = d }
}

// withReserveWaits makes a ShardOwner wait, before each reservation of a
// shard, a time drawn from rng up to most (0: no wait); or, if noted is
// not 0, before the reservation of a shard a note handed it, from noted/2
// to noted.
func withReserveWaits(rng *rand.Rand, most, noted time.Duration) Option {
	var mu sync.Mutex
	return func(o *options) {
		if most <= 0 && noted <= 0 {
			return
		}
		o.seams.beforeReserve = func(by reservation) {
			lo, hi := time.Duration(0), most
			if by == adoptingNote && noted > 0 {
				lo, hi = noted/2, noted
			}
			mu.Lock()
			d := lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
			mu.Unlock()
			time.Sleep(d)
		}
	}
}

// leaseIDDir makes a directory for the fleet's lease ID files.
func leaseIDDir() (string, error) {
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	return os.MkdirTemp(base, "leaderelection-sim-")
}
