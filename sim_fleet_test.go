package leaderelection

import (
	"bufio"
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
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
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
	nativeLanes, etagLanes, shardLanes int
	native, etag, session              time.Duration // lease durations
	retry, shardRetry                  time.Duration // RetryInterval: the mutexes', the ShardOwners'
	notesPoll                          time.Duration // how often a ShardOwner that expects shards reads its notes (0: the library's)
	strayAfter                         time.Duration // how long before a ShardOwner at its share looks for a stray lease (0: the library's)
	reserveWait                        time.Duration // the most a ShardOwner waits before it reserves a shard (see withReserveWaits)

	shards      int    // the first set's size
	sets        [2]int // the sizes SetShards draws from
	storm, calm time.Duration
	length      time.Duration
	perStorm    int
	lateMax     time.Duration
}

// defaultShape is the default run's fleet: a mutex on a native 30 s lease
// with 3 contenders, a mutex on a 12 s ETag lease with 2, and 3 ShardOwner
// instances on 24 s sessions running 3 to 6 shards (5 at first); in each,
// one instance has a lease ID file. The mutexes retry every 16 s, the
// ShardOwners every 20 s, and a ShardOwner reads its notes every 300 ms
// while it expects shards (the library's 100 ms, through a seam): the
// listings of notes and of sessions were most of a fleet's time, and no
// timing of the argument, nor any bound, rests on how often a receiver
// reads its notes. A ShardOwner at its share looks for a stray lease (a
// claim that died between its acquire and its record) after 1 to 2
// minutes, not the library's 5 to 10 (the existing seam): a fleet's hour
// would otherwise hold few, and each would hold its shard for longer than
// a storm and its calm. Before each reservation of a shard (a claim's, an
// adoption's) a ShardOwner waits up to 500 ms, drawn from the seed (the
// seam beforeReserve), as a busy host might: what its caller decided
// before the lock then meets what the others did meanwhile.
var defaultShape = simShape{
	nativeLanes: 3, etagLanes: 2, shardLanes: 3,
	native: 30 * time.Second, etag: 12 * time.Second, session: 24 * time.Second,
	retry: 16 * time.Second, shardRetry: 20 * time.Second, notesPoll: 300 * time.Millisecond, strayAfter: time.Minute,
	reserveWait: 500 * time.Millisecond,
	shards:      5, sets: [2]int{3, 6},
	storm: 150 * time.Second, calm: 180 * time.Second,
	length:   time.Hour,
	perStorm: 10,
	lateMax:  40 * time.Second,
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
	dir   string // lease ID files
	log   bool   // the library's logs, to stderr
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
	lastRun   map[string]simRun
	// lastRecord is, for each mutex, who recorded its highest term, and
	// when first: a term recorded whose func never ran (its answer lost)
	// is a term all the same (see witness).
	lastRecord map[string]simRun
	held       map[string]int
	termed     map[string]bool // shard elections whose blob carries a term's record
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
	cmds chan laneCmd
	done chan struct{} // the supervisor returned

	mu       sync.Mutex
	rng      *rand.Rand // the lane's draws (its transports' rates), from the seed and the lane
	inc      int
	name     string            // the current incarnation's, its identity
	tr       *faults.Transport // the current incarnation's
	spent    []*faults.Transport
	cut      int                   // partitions in force
	slow     map[int]time.Duration // by fault id
	rates    map[int]sim.Fault     // by fault id
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
	booting  bool // its start is sent, its process not begun yet (the last may still wind down)
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
	// term (its floor for it is then above 0).
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
// not depend on what other goroutines drew first.
func (f *simFleet) rngFor(parts ...string) *rand.Rand {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return rand.New(rand.NewPCG(f.seed, h.Sum64()))
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

func (f *simFleet) note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.notes) < 20 {
		f.notes = append(f.notes, fmt.Sprintf("%.1fs ", time.Since(f.begin).Seconds())+fmt.Sprintf(format, args...))
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
		repaired:   map[string]time.Time{},
		malformed:  map[string]string{},
		names:      map[string]*simLane{},
		pending:    map[string]time.Time{},
		witnesses:  map[string]map[[2]int]bool{},
		lastRun:    map[string]simRun{},
		lastRecord: map[string]simRun{},
		held:       map[string]int{},
		termed:     map[string]bool{},
		trace:      &simTracer{},
	}
	f.chk.DeleteGrace = max(shape.native, shape.etag, shape.session)
	f.svc = memblob.New(memblob.WithObserver(f.observe))
	var files []int
	add := func(kind laneKind, n int) {
		for i := range n {
			l := &simLane{f: f, idx: len(f.lanes), kind: kind, cmds: make(chan laneCmd, 16), done: make(chan struct{}),
				slow: map[int]time.Duration{}, rates: map[int]sim.Fault{}, set: f.set,
				rng: f.rngFor("lane", strconv.Itoa(len(f.lanes)))}
			if i == 0 {
				files = append(files, l.idx)
				l.file = filepath.Join(dir, fmt.Sprintf("lane%d.id", l.idx))
			}
			f.lanes = append(f.lanes, l)
		}
	}
	add(laneNative, shape.nativeLanes)
	add(laneETag, shape.etagLanes)
	add(laneShard, shape.shardLanes)
	f.plan = sim.NewPlan(seed, sim.Shape{
		Lanes: len(f.lanes), FileLanes: files, Elections: 2 + shape.shards,
		// A shard's record made malformed under a held lease cannot be
		// repaired by the rules (RepairRecord needs the lease free, and
		// nobody may break a shard's lease by hand), so only the mutexes'
		// records are.
		Malformed: 2,
		ShardSets: shape.sets, Storm: shape.storm, Calm: shape.calm, Length: shape.length,
		PerStorm: shape.perStorm, LateMax: shape.lateMax,
		StorageOdd: 0.25, MalformOdd: 0.25, SetOdd: 0.3,
	})
	return f
}

// observe turns the fake's events into the checker's, under the fake's
// lock: the order in which requests took effect.
func (f *simFleet) observe(e memblob.Event) {
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
	term, holder, ended := simRecord(e.Metadata)
	n, err := strconv.ParseInt(term, 10, 64)
	if err != nil || n <= 0 {
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
		var idx, inc int
		if _, err := fmt.Sscanf(holder, "lane%d.%d", &idx, &inc); err == nil && !ended && f.kindOf(election) != laneShard && n > f.lastRecord[election].term {
			f.lastRecord[election] = simRun{lane: idx, inc: inc, at: e.Time, term: n}
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

// simLogs keeps an instance's logs, at every level, in the fleet's trace:
// a fleet-hour logs a thousand lines or so, kept as records and formatted
// only if a trace file is written.
type simLogs struct {
	tr    *simTracer
	name  string
	attrs []slog.Attr
}

func (h simLogs) Enabled(context.Context, slog.Level) bool { return true }

func (h simLogs) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	if len(h.attrs) > 0 {
		r.AddAttrs(h.attrs...)
	}
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	h.tr.entries = append(h.tr.entries, simEntry{at: r.Time, log: &r, text: h.name})
	return nil
}

func (h simLogs) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clip(h.attrs), as...)
	return h
}

func (h simLogs) WithGroup(string) slog.Handler { return h }

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
	if ex.Status == http.StatusOK {
		l.mu.Lock()
		if l.inc == inc && l.alive {
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
				l.readAt = ex.Sent // it saw what was stored before it was sent
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

// supervise runs the lane's incarnations, one after another, as the
// timeline commands: a new one starts only once the last one's Run has
// returned (its lease ID file free).
func (l *simLane) supervise() {
	defer close(l.done)
	cancel := context.CancelFunc(func() {})
	defer func() { cancel() }()
	var ran chan struct{}
	wait := func() {
		if ran != nil {
			<-ran
			ran = nil
		}
	}
	for cmd := range l.cmds {
		switch cmd {
		case cmdCrash:
			l.mu.Lock()
			if l.tr != nil {
				// Nothing it sends reaches storage again (but what the
				// network already holds late); its funcs run on, counted
				// as acting, until they return.
				l.tr.Blackhole()
				l.spent = append(l.spent, l.tr)
				l.tr = nil
			}
			l.mu.Unlock()
			cancel()
		case cmdStop:
			cancel()
		case cmdStart:
			wait()
			ctx, stop := context.WithCancel(l.f.ctx)
			cancel = stop
			ran = make(chan struct{})
			go l.incarnation(ctx, ran)
		case cmdFinish:
			cancel()
			wait()
			return
		}
	}
}

// incarnation runs one instance of the lane until ctx ends.
func (l *simLane) incarnation(ctx context.Context, ran chan struct{}) {
	defer close(ran)
	f := l.f
	tr := faults.Over(f.svc)
	l.mu.Lock()
	l.inc++
	inc := l.inc
	tr.Observe(func(ex faults.Exchange) { f.onExchange(l, inc, ex) })
	name := fmt.Sprintf("lane%d.%d", l.idx, l.inc)
	l.name = name
	l.seenAt, l.readAt, l.recorded, l.published, l.sawShard = time.Time{}, time.Time{}, false, 0, map[string]bool{}
	l.booting = false
	if l.tr != nil {
		l.spent = append(l.spent, l.tr)
	}
	l.tr = tr
	l.applyLocked()
	set := slices.Clone(l.set)
	l.mu.Unlock()
	f.mu.Lock()
	f.names[name] = l
	f.mu.Unlock()
	f.trace.printf(time.Now(), "%s starts", name)
	defer func() { f.trace.printf(time.Now(), "%s returned", name) }()
	opts := []Option{WithIdentity(name), bubbleClock(), WithLogger(f.logger(name))}
	if l.file != "" {
		opts = append(opts, WithLeaseIDFile(l.file))
	}
	var run func(context.Context) error
	switch l.kind {
	case laneNative, laneETag:
		blob, d := simNativeBlob, f.shape.native
		if l.kind == laneETag {
			blob, d = simETagBlob, f.shape.etag
		}
		s := f.settings(blob, d, tr)
		election := simContainer + "/" + blob
		opts = append(opts, WithEvents(func(e Event) {
			f.trace.printf(time.Now(), "%s event %s term %d", name, e.Kind, e.Term.Number)
		}))
		var m *BlobDistributedMutex
		m, err := NewBlobDistributedMutex(s, func(ctx context.Context) error {
			id := m.LeaseManager().LeaseID()
			return f.act(ctx, l, election, name, s.withDefaults().StopMargin, func(lease string) bool { return lease == id })
		}, opts...)
		if err != nil {
			f.note("%s: %v", name, err)
			return
		}
		run = m.RunTaskWhenMutexAcquired
	case laneShard:
		s := f.settings(simPrefix, f.shape.session, tr)
		s.RetryInterval = f.shape.shardRetry
		opts = append(opts, withHandoffPoll(f.shape.notesPoll), withStrayAfter(f.shape.strayAfter),
			withReserveWaits(f.rngFor(name, "reserve"), f.shape.reserveWait))
		opts = append(opts, WithEvents(func(e Event) {
			f.trace.printf(time.Now(), "%s event %s shard %s term %d session %s", name, e.Kind, e.Shard, e.Term.Number, e.Session)
			if e.Kind == StartedLeading && e.Shard != "" {
				l.mu.Lock()
				l.sessions[e.Shard] = e.Session
				l.mu.Unlock()
			}
		}))
		o, err := NewShardOwner(s, set, func(ctx context.Context, shard string) error {
			l.mu.Lock()
			session := l.sessions[shard]
			l.mu.Unlock()
			term, _ := TermFromContext(ctx)
			return f.act(ctx, l, simContainer+"/"+wire.ShardBlob(simPrefix+"/", shard), name, s.withDefaults().StopMargin, func(lease string) bool {
				if lease == wire.HandoffLeaseID(session, shard, term.Number) {
					return true
				}
				for gen := range int64(100) {
					if lease == wire.ClaimLeaseID(session, gen, shard, term.Number) {
						return true
					}
				}
				return false
			})
		}, opts...)
		if err != nil {
			f.note("%s: %v", name, err)
			return
		}
		l.mu.Lock()
		l.owner, l.sessions = o, map[string]string{}
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.owner = nil
			l.mu.Unlock()
		}()
		run = o.Run
	}
	for ctx.Err() == nil {
		if err := run(ctx); err != nil && ctx.Err() == nil {
			// Storage refused it for good (a permanent error): a process
			// would exit and be restarted.
			f.note("%s returned: %v", name, err)
			select {
			case <-ctx.Done():
			case <-time.After(f.shape.retry):
			}
		}
	}
}

// act is every leader func of the fleet: it records its start and end
// with the checker, runs until its context ends (or, sometimes, returns
// by itself), then winds down: at once, or for a while, watching
// LeaseContext, and stopping within 9/10 of StopMargin once it ends, as
// the contract asks.
func (f *simFleet) act(ctx context.Context, l *simLane, election, instance string, margin time.Duration, owns func(string) bool) error {
	term, ok := TermFromContext(ctx)
	if !ok {
		f.note("%s: a func without a term", instance)
	}
	now := time.Now()
	id := f.chk.Start(now, election, instance, term.Number, owns)
	defer func() { f.chk.End(time.Now(), id) }()
	l.mu.Lock()
	inc := l.inc
	if l.sawShard != nil {
		l.sawShard[election] = true
	}
	l.mu.Unlock()
	f.mu.Lock()
	delete(f.pending, election)
	delete(f.witnesses, election)
	f.lastRun[election] = simRun{lane: l.idx, inc: inc, at: now, term: term.Number}
	f.mu.Unlock()
	f.trace.printf(now, "%s func starts on %s term %d", instance, election, term.Number)
	// The func's own draws, from the seed and who it is: the same func
	// draws the same whatever else ran first.
	rng := f.rngFor("act", election, instance, strconv.FormatInt(term.Number, 10))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	var life <-chan time.Time
	if rng.Float64() < 0.15 {
		life = time.After(between(5*time.Second, 5*time.Minute))
	}
	select {
	case <-ctx.Done():
	case <-life:
		return nil
	}
	wind := time.Duration(0)
	if rng.Float64() < 0.5 {
		wind = between(0, 3*f.shape.native)
	}
	select {
	case <-time.After(wind):
	case <-LeaseContext(ctx).Done():
		time.Sleep(between(0, margin*9/10))
	}
	return ctx.Err()
}

// applyLocked puts the lane's faults in force on its current transport.
func (l *simLane) applyLocked() {
	if l.tr == nil {
		return
	}
	switch {
	case l.cut > 0:
		l.tr.Blackhole()
	case len(l.slow) > 0:
		l.tr.Delay(slices.Max(slices.Collect(mapValues(l.slow))))
	default:
		l.tr.Heal()
	}
	var r faults.Rates
	for _, ft := range l.rates {
		switch ft.Kind {
		case sim.LoseAnswers:
			r.Lose = max(r.Lose, ft.Rate)
		case sim.Late:
			r.Late = max(r.Late, ft.Rate)
			r.LateMin, r.LateMax = time.Second, l.f.shape.lateMax
		case sim.Throttle, sim.Failing:
			if ft.Rate > r.Fail {
				r.Fail, r.FailStatus, r.FailCode = ft.Rate, ft.Status, "ServerBusy"
				switch {
				case ft.Kind == sim.Failing:
					r.FailStatus, r.FailCode = http.StatusInternalServerError, "InternalError"
				case ft.Status == http.StatusTooManyRequests:
					r.FailCode = "TooManyRequests"
				}
			}
		}
	}
	l.tr.SetRates(r, rand.New(rand.NewPCG(l.rng.Uint64(), l.rng.Uint64())))
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
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
		term := ""
		for k, v := range st.Metadata {
			if strings.EqualFold(k, wire.MetaTerm) {
				term = v
			}
		}
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

// The fault model around deletions. A blob or the container deleted under
// a running fleet is within the library's promise but for what its
// argument names as not covered (renew.go: "What cannot be kept: a blob
// deleted while no instance that saw its terms runs, or created again
// first by one that never saw them"; vanished.go's "What is not covered":
// an instance that never saw the fleet before the deletion, a process
// started after it or whose first session had not yet written its record
// then; recreated.go, the same for a mutex's blob). The plan stays out of
// exactly those, and nothing more:
//
//   - a deletion happens only while every live process of the elections
//     it hits has seen the fleet (a mutex contender has read its blob; a
//     ShardOwner's session has stored its record and listed the
//     sessions), no record made malformed awaits its repair (nobody has
//     seen a term on it), none was repaired within 2 R (a contender may
//     not have read it yet), and each election it hits that ever ran has
//     a live witness of its last term (see witness);
//   - from a deletion until each election it hit runs again (pending), no
//     new process of that election's kind starts (its start waits), and
//     the last live witness of a pending election is not crashed or
//     stopped (the fault is held back); for a ShardOwner, only the shards
//     of a set count (a shard out of every set is claimed by nobody), and
//     a shard still pending comes back into a set only while every live
//     ShardOwner saw the fleet before its deletion (else it is left out);
//   - a shard's blob is deleted alone only while every live ShardOwner saw
//     its terms (ran it, read it, or listed the shards while it carried
//     one): nobody sees such a deletion, and one that never saw its terms
//     creates it again unmarked and records 1 (renew.go: "created again
//     first by one that never saw them").
//
// A deletion's storm may crash and stop processes like any other.

// witness reports whether l's current process is a witness of election
// e's last term: for a mutex, the contender that ran it or one that read
// the blob after it began (every contender reads it each R), or, if a
// term was recorded since whose func never ran (its answer lost), the
// contender that recorded it (it seeds and raises a blob created again
// with the term it proposed) or one that read the blob since; for a shard,
// the process that ran it or one whose session's record published a
// highest term seen at least as high as any run or recorded there (its
// instance's seenMax, which a claimer of a blob created again goes above;
// a record whose answer was lost, that nobody read, is vanished.go's
// stated limit). Under f.mu.
func (f *simFleet) witness(l *simLane, e string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.alive || l.kind != f.kindOf(e) {
		return false
	}
	run, ran := f.lastRun[e]
	if rec, ok := f.lastRecord[e]; ok && l.kind != laneShard && (!ran || rec.term > run.term) {
		run, ran = rec, true // a term recorded since, that never ran
	}
	if ran && run.lane == l.idx && run.inc == l.inc {
		return true
	}
	if l.kind != laneShard {
		return !l.readAt.IsZero() && (!ran || l.readAt.After(run.at))
	}
	return l.recorded && l.published >= f.chk.MaxTerm(e)
}

// kindOf is the kind of lane that runs election e.
func (f *simFleet) kindOf(e string) laneKind {
	switch {
	case strings.HasSuffix(e, "/"+simNativeBlob):
		return laneNative
	case strings.HasSuffix(e, "/"+simETagBlob):
		return laneETag
	}
	return laneShard
}

// inSets reports whether shard election e is in the set of the fleet or of
// a ShardOwner (mutexes always are). Under f.mu.
func (f *simFleet) inSets(e string) bool {
	if f.kindOf(e) != laneShard {
		return true
	}
	shard := path.Base(e)
	if slices.Contains(f.set, shard) {
		return true
	}
	for _, l := range f.lanes {
		l.mu.Lock()
		in := slices.Contains(l.set, shard)
		l.mu.Unlock()
		if in {
			return true
		}
	}
	return false
}

// ran is every election a func ran on, as "container/blob".
func (f *simFleet) ran() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.lastRun))
}

// deletable reports whether a deletion of the elections targets (each ran
// before) stays within the promise now (see above), and if so marks them
// pending: the caller deletes them at once.
func (f *simFleet) deletable(targets []string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	why := ""
	switch {
	case len(f.malformed) > 0:
		why = "a malformed record awaits its repair"
	case len(f.pending) > 0:
		why = "an election deleted before has not run since"
	}
	for _, r := range f.repaired {
		if time.Since(r) < 2*f.shape.retry {
			why = "a record was repaired less than 2 R ago"
		}
	}
	kinds := map[laneKind]bool{}
	for _, e := range targets {
		kinds[f.kindOf(e)] = true
	}
	for _, l := range f.lanes {
		l.mu.Lock()
		unseen := l.alive && kinds[l.kind] && (l.seenAt.IsZero() || l.starting || l.booting)
		l.mu.Unlock()
		if unseen && why == "" {
			why = "a live process has not seen the fleet yet"
		}
	}
	for _, e := range targets {
		if f.termedOnce(e) && why == "" && !slices.ContainsFunc(f.lanes, func(l *simLane) bool { return f.witness(l, e) }) {
			why = "no live process is a witness of " + e + "'s last term"
		}
	}
	if len(targets) == 1 && f.kindOf(targets[0]) == laneShard && why == "" {
		// A shard's blob deleted alone: no session sees that (no quiet,
		// no seeds from those that did not see it gone), and one that
		// never saw its terms would create it again unmarked, from 1.
		for _, l := range f.lanes {
			l.mu.Lock()
			unseen := l.alive && l.kind == laneShard && !l.sawShard[targets[0]]
			l.mu.Unlock()
			if unseen {
				why = "a live process never saw the shard's terms"
			}
		}
	}
	if why != "" {
		f.held["delete: "+why]++
		return false
	}
	now := time.Now()
	for _, e := range targets {
		if f.termedOnce(e) {
			f.pending[e] = now
			ws := map[[2]int]bool{}
			for _, l := range f.lanes {
				if f.witness(l, e) {
					l.mu.Lock()
					ws[[2]int{l.idx, l.inc}] = true
					l.mu.Unlock()
				}
			}
			f.witnesses[e] = ws
		}
	}
	return true
}

// termedOnce reports whether a func ran on election e, or a mutex's term
// was recorded there. Under f.mu.
func (f *simFleet) termedOnce(e string) bool {
	_, ran := f.lastRun[e]
	_, recorded := f.lastRecord[e]
	return ran || recorded
}

// mayStart reports whether a new process of l's kind may start now: no
// election of that kind, in a set, is pending. Under f.mu.
func (f *simFleet) mayStart(l *simLane) bool {
	for e := range f.pending {
		if f.kindOf(e) == l.kind && f.inSets(e) {
			return false
		}
	}
	return true
}

// mayKill reports whether l's process may be crashed or stopped now: it is
// not the last live witness of a pending election. Under f.mu.
func (f *simFleet) mayKill(l *simLane) bool {
	alive := func(o *simLane, ws map[[2]int]bool) bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.alive && ws[[2]int{o.idx, o.inc}]
	}
	for e := range f.pending {
		ws := f.witnesses[e]
		if !alive(l, ws) {
			continue
		}
		if !slices.ContainsFunc(f.lanes, func(o *simLane) bool { return o != l && alive(o, ws) }) {
			return false
		}
	}
	return true
}

// keepOut is set without the pending shards that may not come back into a
// set now: while a live ShardOwner did not see the fleet before a shard's
// deletion (see above). Under f.mu.
func (f *simFleet) keepOut(set []string) []string {
	return slices.DeleteFunc(slices.Clone(set), func(shard string) bool {
		e := simContainer + "/" + wire.ShardBlob(simPrefix+"/", shard)
		at, pending := f.pending[e]
		if !pending || f.inSets(e) {
			return false
		}
		for _, l := range f.lanes {
			l.mu.Lock()
			fresh := l.kind == laneShard && l.alive && (l.seenAt.IsZero() || !l.seenAt.Before(at))
			l.mu.Unlock()
			if fresh {
				f.held["set: a pending shard kept out"]++
				return true
			}
		}
		return false
	})
}

// kill crashes or stops l's process (cmd), unless the fault model holds
// it back; it reports whether it did.
func (f *simFleet) kill(l *simLane, cmd laneCmd, kind sim.Kind) bool {
	f.mu.Lock()
	ok := f.mayKill(l)
	if !ok {
		f.held[string(kind)+": the last witness of a pending election"]++
	}
	f.mu.Unlock()
	if !ok {
		return false
	}
	l.mu.Lock()
	l.down++
	wasAlive := l.alive
	l.alive = false
	l.mu.Unlock()
	if wasAlive {
		f.count(string(kind), 1)
	}
	f.trace.printf(time.Now(), "lane%d: %s", l.idx, kind)
	l.cmds <- cmd
	return true
}

// revive ends one planned fault holding l down, and starts it again once
// none does, as soon as the fault model lets it (mayStart).
func (f *simFleet) revive(l *simLane) {
	l.mu.Lock()
	l.down--
	start := l.down == 0 && !l.alive && !l.starting
	if start {
		l.starting = true
	}
	l.mu.Unlock()
	if start {
		f.startLane(l)
	}
}

// startLane starts l's next process, at once or once the fault model lets
// it (checking every second, until the fleet ends).
func (f *simFleet) startLane(l *simLane) {
	try := func() bool {
		f.mu.Lock()
		ok := f.mayStart(l)
		f.mu.Unlock()
		if !ok {
			return false
		}
		l.mu.Lock()
		start := l.down == 0 && !l.alive
		if start {
			l.alive, l.born, l.booting = true, time.Now(), true
		}
		l.starting = false
		l.mu.Unlock()
		if start {
			f.trace.printf(time.Now(), "lane%d: start", l.idx)
			l.cmds <- cmdStart
		}
		return true
	}
	if try() {
		return
	}
	f.mu.Lock()
	f.held["start: an election of its kind is pending"]++
	f.mu.Unlock()
	f.wg.Go(func() {
		for {
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if try() {
				return
			}
		}
	})
}

// deleteBlob deletes blob as a request without its lease ID does, which
// Azure refuses while the blob is leased: it tries every second, for 20 s
// at most, each time only if the fault model lets it (deletable), and
// reports whether it deleted it.
func (f *simFleet) deleteBlob(blob string) bool {
	cc, err := container.NewClientFromConnectionString(memblob.ConnectionString, simContainer,
		&container.ClientOptions{ClientOptions: f.svc.ClientOptions()})
	if err != nil {
		f.note("delete: %v", err)
		return false
	}
	election := simContainer + "/" + blob
	for range 20 {
		if st, ok := f.svc.Blob(simContainer, blob); ok && st.LeaseState != "leased" && st.LeaseState != "breaking" && f.deletable([]string{election}) {
			_, err := cc.NewBlobClient(blob).Delete(f.ctx, nil)
			if err == nil {
				return true
			}
			f.mu.Lock()
			delete(f.pending, election) // not deleted after all
			delete(f.witnesses, election)
			f.mu.Unlock()
			if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
				return false
			}
		}
		select {
		case <-f.ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
	return false
}

// bound is how long after a calm began election must run again (see
// sim_test.go's doc of the bounds).
func (f *simFleet) bound(election string) (time.Duration, string) {
	r, sh := f.shape.retry, f.shape
	f.mu.Lock()
	_, pending := f.pending[election]
	f.mu.Unlock()
	mutex := func(kind string, d time.Duration) (time.Duration, string) {
		s := BlobSettings{LeaseDuration: d, RetryInterval: r}.withDefaults()
		b, why := 2*d+max(r, d)*5/4+2*s.RequestTimeout+r, kind+" mutex: 2 D + 1.25 max(R, D) + 2 T + R"
		if pending {
			// Deleted, and not run since: the blob created again stands
			// its settle time (recreated.go) as a contender watched it,
			// from the calm at the latest.
			b, why = b+s.RenewInterval+s.RequestTimeout+s.StopMargin+2*r, why+" + RI + T + SM + 2 R (created again)"
		}
		return b, why
	}
	switch {
	case strings.HasSuffix(election, "/"+simNativeBlob):
		return mutex("native", sh.native)
	case strings.HasSuffix(election, "/"+simETagBlob):
		return mutex("ETag", sh.etag)
	}
	d, r := sh.session, sh.shardRetry
	def := BlobSettings{LeaseDuration: d}.withDefaults()
	t, ri := def.RequestTimeout, def.RenewInterval
	stray := 2*sh.strayAfter + d + r
	if sh.strayAfter == 0 {
		stray = 20*time.Minute + d + r
	}
	return 4*d + max(r, d)*5/4 + 3*t + 3*r + 4*(ri+2*r) + stray, "shard: 4 D + 1.25 max(R, D) + 3 T + 3 R + 4 (RI + 2 R) + 2 S + D + R"
}

// withHandoffPoll sets how often a ShardOwner that expects shards reads
// its notes (0: the library's handoffPoll).
func withHandoffPoll(d time.Duration) Option {
	return func(o *options) { o.seams.handoffPoll = d }
}

// withReserveWaits makes a ShardOwner wait, before each reservation of a
// shard, a time drawn from rng up to most (0: no wait).
func withReserveWaits(rng *rand.Rand, most time.Duration) Option {
	var mu sync.Mutex
	return func(o *options) {
		if most <= 0 {
			return
		}
		o.seams.beforeReserve = func() {
			mu.Lock()
			d := time.Duration(rng.Int64N(int64(most) + 1))
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

// simTracer keeps a fleet's steps, for a trace file written when the
// fleet breaks a rule, or for a replay (-sim.trace): the plan's actions,
// the instances' starts and events, the funcs, and every request the fake
// applied or refused but listings and successful reads. It keeps the
// fake's events as they came (formatting them only for the file), so
// that every fleet of a run can keep one: a failure found in a run of
// many fleets is rarely met again in a replay.
type simTracer struct {
	mu      sync.Mutex
	entries []simEntry
}

type simEntry struct {
	at   time.Time
	text string
	ev   memblob.Event // when text is ""
	log  *slog.Record  // a log of instance text's, when not nil
}

// printf keeps a line stamped with at (the bubble's clock, which starts
// at midnight).
func (tr *simTracer) printf(at time.Time, format string, args ...any) {
	if tr == nil {
		return
	}
	text := fmt.Sprintf(format, args...)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.entries = append(tr.entries, simEntry{at: at, text: text})
}

// fake keeps an event of the fake's.
func (tr *simTracer) fake(e memblob.Event) {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.entries = append(tr.entries, simEntry{at: e.Time, ev: e})
}

// write writes the steps kept to the file at path.
func (tr *simTracer) write(path string) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(file)
	for _, en := range tr.entries {
		text := en.text
		if en.log != nil {
			var b strings.Builder
			fmt.Fprintf(&b, "%s log %s %s", text, en.log.Level, en.log.Message)
			en.log.Attrs(func(a slog.Attr) bool {
				fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
				return true
			})
			text = b.String()
		} else if text == "" {
			e := en.ev
			term, who, ended := simRecord(e.Metadata)
			text = fmt.Sprintf("fake %s %s/%s: %d %s lease %s %s etag %s", e.Op, e.Container, e.Blob, e.Status, e.ErrorCode,
				e.LeaseState, e.Lease, e.ETag)
			if e.LeaseID != "" || e.ProposedLeaseID != "" {
				text += fmt.Sprintf(" (asked with %s proposing %s)", e.LeaseID, e.ProposedLeaseID)
			}
			if term != "" {
				text += fmt.Sprintf(" record term %s for %q ended %v", term, who, ended)
			}
		}
		fmt.Fprintf(w, "%s %s\n", en.at.Format("15:04:05.000"), text)
	}
	if err := w.Flush(); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}
