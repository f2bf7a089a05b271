package leaderelection

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/sim"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/stretchr/testify/assert"
)

// A simulated instance's life (see sim_test.go): its supervisor, each of
// its processes, and the faults applied to its transport.

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
			late := ran != nil && !closedChan(ran)
			if late {
				l.f.windingDown(l, true)
			}
			wait()
			if late {
				l.f.windingDown(l, false)
			}
			l.f.newVolume(l)
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

// closedChan reports whether c is closed (it is only ever closed).
func closedChan(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// windingDown notes that lane l's next process waits (on) for its last
// one's Run to return, or (off) has started at last. A process stopped
// while a func winds down is renewed for as long as the func takes
// (limits.md, "Your func must honour its context": a long wind-down under
// a renewed lease is healthy), and a ShardOwner's with a lease ID file
// keeps its other shards, stopped, for its next process meanwhile: the
// recovery of its kind's elections waits for the start, and is timed from
// it if later than the calm (expectRecovery), as a start the fault model
// held back is. (Seed 629359021849 at 756b0d9, class mixed: a func of
// lane 5 wound down 10 minutes after a rolling restart stopped it, under
// its 4 min 37 s native mutex's wind-down bound, and two shards its kept
// session held stood idle past their bound.)
func (f *simFleet) windingDown(l *simLane, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if on {
		f.repaired[simWinding(l.idx)] = time.Now()
		return
	}
	delete(f.repaired, simWinding(l.idx))
	f.repaired[simStartedLate(l.kind)] = time.Now()
}

// simWinding is the key of f.repaired under which windingDown notes that
// lane idx's next process waits for its last one to return.
func simWinding(idx int) string { return "winding down: " + strconv.Itoa(idx) }

// windingKind reports whether a lane of kind k waits for its last
// process to return (windingDown). Under f.mu.
func (f *simFleet) windingKind(k laneKind) bool {
	return slices.ContainsFunc(f.lanes, func(l *simLane) bool {
		_, ok := f.repaired[simWinding(l.idx)]
		return l.kind == k && ok
	})
}

// runs reports whether incarnation inc is the lane's running process:
// not from a start command (alive) to the next incarnation's begin, while
// inc is still the last one's, whose funcs, renewals and requests may run
// on, and a point may strike them; nor while another start is queued
// behind a kill (booting counts the starts not begun), as the incarnation
// that begins first is the kill's. A kill from the last incarnation's
// request, let through as the running process's, waited on the lane's
// supervisor, which was waiting for that very process to return before it
// began the next: the fleet stood still, its ShardOwners' loops going on
// in virtual time, until the run's hang watch ended it (seed 408791291540
// at 1393956; very likely the hang met at b34d828). Under l.mu.
func (l *simLane) runs(inc int) bool {
	return l.inc == inc && l.alive && l.booting == 0
}

// incarnation runs one instance of the lane until ctx ends.
func (l *simLane) incarnation(ctx context.Context, ran chan struct{}) {
	defer close(ran)
	f := l.f
	tr := faults.Over(f.storage(l))
	l.mu.Lock()
	l.inc++
	inc := l.inc
	tr.Observe(func(ex faults.Exchange) { f.onExchange(l, inc, ex) })
	name := fmt.Sprintf("lane%d.%d", l.idx, l.inc)
	l.name = name
	l.seenAt, l.readAt, l.recorded, l.published, l.sawShard = time.Time{}, time.Time{}, false, 0, map[string]bool{}
	l.booting--
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
	f.actors.points.restart(l)
	f.actors.procs[l.idx].Store(true)
	defer f.actors.procs[l.idx].Store(false)
	defer func() { f.trace.printf(time.Now(), "%s returned", name) }()
	opts := []Option{WithIdentity(name), bubbleClock(), WithLogger(f.logger(name))}
	if l.file != "" {
		opts = append(opts, WithLeaseIDFile(l.file))
	}
	var run func(context.Context) error
	switch l.kind {
	case laneNative, laneETag:
		if f.quorum != nil && l.kind == laneNative {
			if run = f.quorum.mutex(l, inc, name, tr, opts); run == nil {
				return
			}
			break
		}
		blob := simNativeBlob
		if l.kind == laneETag {
			blob = simETagBlob
		}
		s := f.timed(f.settings(blob, 0, tr), l)
		s.ClientOptions.Transport = f.actors.points.transport(l, inc, tr)
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
		s := f.timed(f.settings(simPrefix, 0, tr), l)
		s.ClientOptions.Transport = f.actors.points.transport(l, inc, tr)
		points, _ := s.ClientOptions.Transport.(*simPointTransport) // nil: no point enabled
		opts = append(opts, withHandoffPoll(f.shape.notesPoll), withStrayAfter(f.shape.strayAfter),
			withReserveWaits(f.rngFor(name, "reserve"), f.shape.reserveWait, l.noteWait))
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
			if points != nil {
				points.beginsToRun(session, wire.ShardBlob(simPrefix+"/", shard))
			}
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
	if f.ranAgain(election, term.Number) {
		delete(f.pending, election)
		delete(f.witnesses, election)
	}
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
	// The rates of each kind of request: a fault narrowed to one kind
	// (sim.Fault's Ops) counts for that kind alone.
	byOp := map[string]faults.Rates{}
	for _, op := range faults.Ops {
		byOp[op] = l.ratesFor(op)
	}
	r := byOp[faults.OpWrite] // every kind's alike, unless a fault is narrowed: For then gives each its own
	for _, ft := range l.rates {
		if ft.Ops != "" {
			r.For = func(req *http.Request) faults.Rates { return byOp[faults.OpOf(req)] }
		}
		if ft.Kind == sim.CrashInStep {
			tr := l.tr
			r.Die, r.Dying = max(r.Die, ft.Rate), func(req *http.Request) bool { return l.f.dieInStep(l, tr, req) }
		}
	}
	l.tr.SetRates(r, rand.New(rand.NewPCG(l.rng.Uint64(), l.rng.Uint64())))
}

// ratesFor is the Fail, Lose and Late of the lane's rate faults in force
// that hit requests of kind op (faults.OpOf): the highest of each. Under
// l.mu.
func (l *simLane) ratesFor(op string) faults.Rates {
	var r faults.Rates
	for _, ft := range l.rates {
		if ft.Ops != "" && ft.Ops != op {
			continue
		}
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
	return r
}

// dieInStep is the Rates.Dying of transport tr of lane l while a
// CrashInStep fault is in force: the request drawn (req) is the process's
// last, unless the fault model holds the crash back (killIf), or tr is no
// longer the running process's, or req rewrites a session's record: a
// ShardOwner does that at every renewal, and a crash there is one between
// steps, which Crash makes. (An ETag lease's renewal is a write of its
// record too, and may be drawn.) In the step that ends the process, the
// fault (the lowest id in force) is spent, so that no other request of
// the process draws it, and tr goes silent and is detached from the lane,
// so that no other fault's end heals it; the process starts again the
// fault's Delay later (reviveDied), or at its Until.
func (f *simFleet) dieInStep(l *simLane, tr *faults.Transport, req *http.Request) bool {
	if path, _ := url.PathUnescape(req.URL.Path); req.URL.Query().Get("comp") == "metadata" && strings.Contains(path, "/"+wire.SessionsDir) {
		return false
	}
	var ft sim.Fault
	id := -1
	dies := f.killIf(l, cmdCrash, sim.CrashInStep, func() bool {
		for i, x := range l.rates {
			if x.Kind == sim.CrashInStep && (id < 0 || i < id) {
				id = i
			}
		}
		if id < 0 || l.tr != tr || !l.alive || l.booting > 0 {
			return false
		}
		ft = l.rates[id]
		delete(l.rates, id)
		l.died[id] = true
		tr.Blackhole()
		l.spent = append(l.spent, tr)
		l.tr = nil
		return true
	})
	if dies {
		f.wg.Go(func() {
			select {
			case <-f.ctx.Done():
			case <-time.After(ft.Delay):
				f.reviveDied(l, id)
			}
		})
	}
	return dies
}

// reviveDied starts lane l again if CrashInStep fault id killed its
// process and it has not been started again since.
func (f *simFleet) reviveDied(l *simLane, id int) {
	l.mu.Lock()
	died := l.died[id]
	delete(l.died, id)
	l.mu.Unlock()
	if died {
		f.revive(l)
	}
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

// groups are the fleet's lanes of each kind, in order (those of no lane
// left out): what a fleet fault hits, one group or all.
func (shape simShape) groups() [][]int {
	var out [][]int
	first := 0
	for _, n := range []int{shape.nativeLanes, shape.etagLanes, shape.shardLanes} {
		if n > 0 {
			g := make([]int, n)
			for i := range g {
				g[i] = first + i
			}
			out = append(out, g)
		}
		first += n
	}
	return out
}

// fleetLanes are the lanes a fleet fault of target hits (sim.Redeploy's
// Target): one group of the plan's Groups (a kind of instance), or, -1,
// every lane.
func (shape simShape) fleetLanes(target int) []int {
	if target >= 0 {
		return shape.groups()[target]
	}
	return slices.Concat(shape.groups()...)
}

// faultLanes are the lanes fleet fault ft stops and starts again: its
// target's, or, for a rolling restart that pauses, the first Count.
func (shape simShape) faultLanes(ft sim.Fault) []int {
	lanes := shape.fleetLanes(ft.Target)
	if ft.Kind == sim.RollingRestart && ft.Count > 0 {
		lanes = lanes[:min(ft.Count, len(lanes))]
	}
	return lanes
}

// fleetTimes are when a fleet fault stops each of its lanes and starts it
// again (see sim.Redeploy and sim.RollingRestart): a redeploy's, each
// drawn from the seed and the fault; a rolling restart's, the j-th lane
// stopped j Gaps after At (swept relies on it) and started Delay later.
func (f *simFleet) fleetTimes(ft sim.Fault) (lanes []int, stops, starts []time.Duration) {
	lanes = f.shape.faultLanes(ft)
	rng := f.rngFor("fleet fault", string(ft.Kind), strconv.FormatInt(int64(ft.At), 10))
	draw := func(d time.Duration) time.Duration {
		if d <= 0 {
			return 0
		}
		return time.Duration(rng.Int64N(int64(d)))
	}
	for j := range lanes {
		if ft.Kind == sim.RollingRestart {
			stop := rollingStop(ft, j)
			stops, starts = append(stops, stop), append(starts, stop+ft.Delay)
			continue
		}
		stops, starts = append(stops, ft.At+draw(ft.Gap)), append(starts, ft.Until+draw(ft.Delay))
	}
	return lanes, stops, starts
}

// rollingStop is when rolling restart ft stops its j-th lane.
func rollingStop(ft sim.Fault, j int) time.Duration { return ft.At + time.Duration(j)*ft.Gap }

// scheduleFleetFault puts a fleet fault on the timeline (at): each of its
// lanes stopped gracefully, then started again, through the lane commands
// as a planned Stop is, so the fault model holds back a stop or a start
// where, and only where, it holds back any other (mayKill, mayStart). Each
// instance stopped counts as one fault of the kind. In a fleet whose lease
// ID files are ephemeral, each lane it stops is a pod replaced: its file
// is gone when it starts again (replacePod).
func (f *simFleet) scheduleFleetFault(at func(time.Duration, func()), ft sim.Fault) {
	lanes, stops, starts := f.fleetTimes(ft)
	for j, idx := range lanes {
		l := f.lanes[idx]
		killed := false
		at(stops[j], func() {
			if killed = f.kill(l, cmdStop, ft.Kind); killed {
				f.replacePod(l)
			}
		})
		at(starts[j], func() {
			if killed {
				f.revive(l)
			}
		})
	}
}

// replacePod notes that a fleet fault stopped lane l as a pod is replaced:
// in a fleet whose lease ID files are ephemeral (simFilesFor), l's next
// process starts without its file (a new emptyDir), and the library
// creates a new one. The file goes only once l's last process has
// returned (newVolume, in supervise): removed under a process still
// running, it would be another fault (two processes of one pod).
func (f *simFleet) replacePod(l *simLane) {
	if !f.files.ephemeral || l.file == "" {
		return
	}
	l.mu.Lock()
	l.replaced = true
	l.mu.Unlock()
}

// newVolume removes lane l's lease ID file if its pod was replaced since
// its last process started (replacePod), once that process has returned
// and before the next starts; a file lost that named an ID counts as a
// fault (an empty one, its session ended, as none). A crash, a
// stop at a point, a planned Stop keep the file (a restart in place).
func (f *simFleet) newVolume(l *simLane) {
	l.mu.Lock()
	replaced := l.replaced
	l.replaced = false
	l.mu.Unlock()
	if !replaced {
		return
	}
	b, _ := os.ReadFile(l.file)
	if err := os.Remove(l.file); err != nil && !os.IsNotExist(err) {
		f.note("lane%d: %v", l.idx, err)
		return
	}
	if id := strings.TrimSpace(string(b)); id != "" {
		f.count(simFileLost, 1)
		f.trace.printf(time.Now(), "lane%d: its lease ID file lost (its pod replaced), naming %s", l.idx, id)
	}
}

// simFileLost counts the lease ID files naming an ID that a fleet fault
// lost (newVolume).
const simFileLost = "lease ID file lost to a fleet fault"

// A lease ID file that a fleet fault loses (ephemeral files) goes between
// its lane's processes: once the last has returned, before the next
// starts, which does not resume the session its predecessor kept for it.
func TestSimEphemeralFileGoesBetweenProcesses(t *testing.T) {
	const seed = 44 // its 4 minutes lose ShardOwners' files that name a session kept: ephemeral files, a redeploy
	synctest.Test(t, func(t *testing.T) {
		dir, err := leaseIDDir()
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		f := newSimFleet(seed, simShapeFor(seed, simSmokeLength), dir, false, t)
		f.run()
		running := map[string]bool{} // lane -> a process of it runs
		kept := map[string]bool{}    // lane -> its last process kept its session for the next
		lost := map[string]int{}     // lane -> 1: its file lost; 2: and its next process started
		mattered := 0                // files lost that named a session kept
		for _, en := range f.trace.entries {
			name, rest, _ := strings.Cut(en.text, " ")
			lane, _, _ := strings.Cut(strings.TrimSuffix(name, ":"), ".")
			switch {
			case en.log != nil && strings.Contains(en.log.Message, "session kept for the next process"):
				kept[lane] = true
			case en.log != nil && strings.Contains(en.log.Message, "resuming the session") && lost[lane] == 2:
				t.Fatalf("%s: %s resumed the session in a file lost", en.at.Format("15:04:05.000"), name)
			case rest == "starts":
				running[lane], kept[lane] = true, false
				lost[lane] = min(2*lost[lane], 2)
			case rest == "returned":
				running[lane] = false
				delete(lost, lane)
			case strings.HasPrefix(rest, "its lease ID file lost"):
				if running[lane] {
					t.Fatalf("%s: %s while its process runs", en.at.Format("15:04:05.000"), en.text)
				}
				lost[lane] = 1
				if kept[lane] {
					mattered++
				}
			}
		}
		if mattered == 0 {
			t.Fatalf("seed %d lost no lease ID file naming a session kept (its draws changed?): take a seed that does", seed)
		}
	})
}

// A rate fault narrowed to one kind of request (sim.Fault's Ops) hits
// requests of that kind alone, beside a fault on every request; the
// simulator's kinds are the transport's.
func TestSimARateFaultNarrowedHitsItsKindOfRequestAlone(t *testing.T) {
	assert.Equal(t, faults.Ops, sim.RequestKinds)
	l := &simLane{f: &simFleet{shape: defaultShape}, rates: map[int]sim.Fault{
		1: {Kind: sim.Failing, Rate: 0.6, Ops: faults.OpList},
		2: {Kind: sim.LoseAnswers, Rate: 0.2},
		3: {Kind: sim.Late, Rate: 0.3, Ops: faults.OpLease},
	}}
	for _, op := range faults.Ops {
		r := l.ratesFor(op)
		assert.Equal(t, 0.2, r.Lose, op)
		assert.Equal(t, map[bool]float64{true: 0.6}[op == faults.OpList], r.Fail, op)
		assert.Equal(t, map[bool]float64{true: 0.3}[op == faults.OpLease], r.Late, op)
	}
}

// From a lane's start command to its next incarnation's begin, the last
// incarnation's requests are not the running process's: a point that
// strikes one of them kills nothing (see runs).
func TestSimALastIncarnationIsNotTheRunningProcessWhileTheNextBoots(t *testing.T) {
	l := &simLane{inc: 3, alive: true}
	assert.True(t, l.runs(3))
	l.alive = false // crashed
	assert.False(t, l.runs(3))
	l.alive, l.booting = true, 1 // started: startLane
	assert.False(t, l.runs(3), "the last incarnation, winding down while the next boots")
	l.alive = false              // a kill queued behind the start
	l.alive, l.booting = true, 2 // and another start
	l.inc, l.booting = 4, 1      // the first begins: the kill ends it
	assert.False(t, l.runs(4), "an incarnation a queued kill ends, while the next start waits for it")
	l.inc, l.booting = 5, 0 // the second begins
	assert.True(t, l.runs(5))
	assert.False(t, l.runs(4))
}
