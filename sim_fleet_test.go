package leaderelection

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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

	shards      int    // the first set's size
	sets        [2]int // the sizes SetShards draws from
	storm, calm time.Duration
	length      time.Duration
	perStorm    int
	lateMax     time.Duration
}

// defaultShape is the default run's fleet: a mutex on a native 15 s lease
// with 3 contenders, a mutex on an 8 s ETag lease with 2, and 3 ShardOwner
// instances on 8 s sessions running 4 to 8 shards; in each, one instance
// has a lease ID file.
var defaultShape = simShape{
	nativeLanes: 3, etagLanes: 2, shardLanes: 3,
	native: 30 * time.Second, etag: 12 * time.Second, session: 24 * time.Second,
	retry: 8 * time.Second, shardRetry: 12 * time.Second,
	shards: 5, sets: [2]int{3, 6},
	storm: 150 * time.Second, calm: 180 * time.Second,
	length:   time.Hour,
	perStorm: 10,
	lateMax:  40 * time.Second,
}

const simContainer = "sim"

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

	mu        sync.Mutex
	rng       *rand.Rand
	set       []string             // the shard set the fleet converges to
	faults    map[string]int       // injected, by kind
	requests  int                  // sent by the instances
	repaired  map[string]time.Time // election -> when an operator repaired its record
	malformed map[string]string    // election -> the malformed term it was given
	recovery  time.Duration        // the longest recovery measured
	notes     []string             // what the driver saw go wrong that is not the library's
}

type simLane struct {
	f    *simFleet
	idx  int
	kind laneKind
	file string // lease ID file, or ""
	cmds chan laneCmd
	done chan struct{} // the supervisor returned

	mu       sync.Mutex
	inc      int
	tr       *faults.Transport // the current incarnation's
	spent    []*faults.Transport
	cut      int                   // partitions in force
	slow     map[int]time.Duration // by fault id
	rates    map[int]sim.Fault     // by fault id
	set      []string
	owner    *ShardOwner
	sessions map[string]string // shard -> the session that started its run (events)
}

type laneCmd int

const (
	cmdCrash laneCmd = iota
	cmdStop
	cmdStart
	cmdFinish
)

func (f *simFleet) float() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64()
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
		chk:       sim.NewChecker(),
		rng:       rand.New(rand.NewPCG(seed, 0x5eed)),
		set:       simShardNames(shape.shards),
		faults:    map[string]int{},
		repaired:  map[string]time.Time{},
		malformed: map[string]string{},
	}
	f.chk.DeleteGrace = max(shape.native, shape.etag, shape.session)
	f.svc = memblob.New(memblob.WithObserver(f.observe))
	var files []int
	add := func(kind laneKind, n int) {
		for i := range n {
			l := &simLane{f: f, idx: len(f.lanes), kind: kind, cmds: make(chan laneCmd, 16), done: make(chan struct{}),
				slow: map[int]time.Duration{}, rates: map[int]sim.Fault{}, set: f.set}
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
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("sim", name)
}

// settings are an instance's on transport tr.
func (f *simFleet) settings(blob string, d time.Duration, tr *faults.Transport) BlobSettings {
	return BlobSettings{
		ConnectionString: memblob.ConnectionString,
		Container:        simContainer,
		Blob:             blob,
		LeaseDuration:    d,
		RetryInterval:    f.shape.retry,
		ClientOptions:    &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}},
	}
}

// onExchange counts an instance's requests, and the faults injected into
// them one request at a time.
func (f *simFleet) onExchange(ex faults.Exchange) {
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
	tr.Observe(f.onExchange)
	l.mu.Lock()
	l.inc++
	name := fmt.Sprintf("lane%d.%d", l.idx, l.inc)
	if l.tr != nil {
		l.spent = append(l.spent, l.tr)
	}
	l.tr = tr
	l.applyLocked()
	set := slices.Clone(l.set)
	l.mu.Unlock()
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
		var m *BlobDistributedMutex
		m, err := NewBlobDistributedMutex(s, func(ctx context.Context) error {
			id := m.LeaseManager().LeaseID()
			return f.act(ctx, election, name, s.withDefaults().StopMargin, func(lease string) bool { return lease == id })
		}, opts...)
		if err != nil {
			f.note("%s: %v", name, err)
			return
		}
		run = m.RunTaskWhenMutexAcquired
	case laneShard:
		s := f.settings(simPrefix, f.shape.session, tr)
		s.RetryInterval = f.shape.shardRetry
		opts = append(opts, WithEvents(func(e Event) {
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
			return f.act(ctx, simContainer+"/"+wire.ShardBlob(simPrefix+"/", shard), name, s.withDefaults().StopMargin, func(lease string) bool {
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
func (f *simFleet) act(ctx context.Context, election, instance string, margin time.Duration, owns func(string) bool) error {
	term, ok := TermFromContext(ctx)
	if !ok {
		f.note("%s: a func without a term", instance)
	}
	id := f.chk.Start(time.Now(), election, instance, term.Number, owns)
	defer func() { f.chk.End(time.Now(), id) }()
	var life <-chan time.Time
	if f.float() < 0.15 {
		life = time.After(f.between(5*time.Second, 5*time.Minute))
	}
	select {
	case <-ctx.Done():
	case <-life:
		return nil
	}
	wind := time.Duration(0)
	if f.float() < 0.5 {
		wind = f.between(0, 3*f.shape.native)
	}
	select {
	case <-time.After(wind):
	case <-LeaseContext(ctx).Done():
		time.Sleep(f.between(0, margin*9/10))
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
	l.f.mu.Lock()
	rng := rand.New(rand.NewPCG(l.f.rng.Uint64(), l.f.rng.Uint64()))
	l.f.mu.Unlock()
	l.tr.SetRates(r, rng)
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

// deletable reports whether a deletion now stays within the library's
// promise. A blob created again first by an instance that never saw its
// terms restarts its count, and is taken at once, while the leader that
// missed the deletion may still act: the library's stated limit
// (renew.go). So no deletion while a record made malformed is not yet
// repaired (an instance started since has seen no term on it), nor while
// a shard that ran is out of some instance's set (an instance seeds, after
// a deletion, only the shards of its set; one that joins the set later
// creates its blob afresh).
func (f *simFleet) deletable() bool {
	f.mu.Lock()
	set := slices.Clone(f.set)
	pending := len(f.malformed) > 0
	f.mu.Unlock()
	if pending {
		return false
	}
	for _, l := range f.lanes {
		l.mu.Lock()
		same := l.kind != laneShard || slices.Equal(l.set, set)
		l.mu.Unlock()
		if !same {
			return false
		}
	}
	for _, fn := range f.chk.Funcs() {
		shard, ok := strings.CutPrefix(fn.Election, simContainer+"/"+simPrefix+"/"+wire.ShardsDir)
		if ok && !slices.Contains(set, strings.TrimPrefix(shard, "/")) {
			return false
		}
	}
	return true
}

// deleteBlob deletes blob as a request without its lease ID does, which
// Azure refuses while the blob is leased: it tries every second, for 20 s
// at most, and reports whether it deleted it.
func (f *simFleet) deleteBlob(blob string) bool {
	cc, err := container.NewClientFromConnectionString(memblob.ConnectionString, simContainer,
		&container.ClientOptions{ClientOptions: f.svc.ClientOptions()})
	if err != nil {
		f.note("delete: %v", err)
		return false
	}
	for range 20 {
		if _, err := cc.NewBlobClient(blob).Delete(f.ctx, nil); err == nil {
			return true
		} else if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
			return false
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
	switch {
	case strings.HasSuffix(election, "/"+simNativeBlob):
		d := sh.native
		t := BlobSettings{LeaseDuration: d}.withDefaults().RequestTimeout
		return 2*d + max(r, d)*5/4 + 2*t + r, "native mutex: 2 D + 1.25 max(R, D) + 2 T + R"
	case strings.HasSuffix(election, "/"+simETagBlob):
		d := sh.etag
		t := BlobSettings{LeaseDuration: d}.withDefaults().RequestTimeout
		return 2*d + max(r, d)*5/4 + 2*t + r, "ETag mutex: 2 D + 1.25 max(R, D) + 2 T + R"
	}
	d, r := sh.session, sh.shardRetry
	t := BlobSettings{LeaseDuration: d}.withDefaults().RequestTimeout
	return 4*d + max(r, d)*5/4 + 3*t + 3*r, "shard: 4 D + 1.25 max(R, D) + 3 T + 3 R"
}

// leaseIDDir makes a directory for the fleet's lease ID files.
func leaseIDDir() (string, error) {
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	return os.MkdirTemp(base, "leaderelection-sim-")
}
