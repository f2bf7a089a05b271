// Package chaos runs leader-election contenders as separate OS processes
// against Azurite, each behind a fault-injecting TCP proxy of its own
// (toxiproxy, embedded), injects faults chosen at random from a seed, and
// checks the log of every term for overlaps, failover gaps, stop margins and
// liveness.
//
// Every process it starts (contenders, Azurite) is stopped by its PID before
// Run returns. A contender also exits when its standard input closes, so none
// outlives a harness that was killed.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/childproc"
	"github.com/blobelect/leaderelection/internal/tools/tamper"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Fault kinds. "low" faults last less than a leader tolerates and must not
// move leadership; "high" ones outlast the stop margin and must move it
// without overlap.
const (
	FaultKill           = "kill"            // SIGKILL the leader; a new process takes its lane
	FaultFreeze         = "freeze"          // SIGSTOP the leader for longer than the lease, then SIGCONT
	FaultBlackhole      = "blackhole"       // the leader's proxy drops everything, then heals
	FaultLatencyLow     = "latency-low"     // 150-450 ms added to the leader's responses
	FaultLatencyHigh    = "latency-high"    // 5 s added: every request times out
	FaultResetLow       = "reset-low"       // the leader's connections reset, for 1-4 s
	FaultResetHigh      = "reset-high"      // ... for longer than the lease
	FaultStorageRestart = "storage-restart" // Azurite stopped and started again, data on disk
	FaultGraceful       = "graceful"        // SIGTERM the leader; a new process takes its lane
	// FaultLateAcquire: SIGKILL, then a late acquire under the dead
	// session's ID once the others judged it dead (shardchaos); a new
	// process takes the lane.
	FaultLateAcquire = "late-acquire"
)

// AllFaults is every process fault kind, the default mix. FaultCutOffDelete,
// which needs Azurite and another writer, is drawn when Kinds names it or
// with Deletes (the messy world's cycle).
var AllFaults = []string{FaultKill, FaultFreeze, FaultBlackhole, FaultLatencyLow, FaultLatencyHigh,
	FaultResetLow, FaultResetHigh, FaultStorageRestart, FaultGraceful}

// Config configures Run.
type Config struct {
	Seed       int64         // the run is replayed by the same seed (and Kinds)
	Contenders int           // default 5
	Duration   time.Duration // no fault starts after this; default 3 min
	MaxFaults  int           // stop after this many faults; 0 means no limit, -1 no faults at all
	Kinds      []string      // fault kinds to draw from; default AllFaults
	// Fleet is what the lanes run: lane i runs Fleet[i%len(Fleet)], so a
	// fleet may mix algorithms and timings (but not etcd with the others).
	// Empty: every lane runs Algo at its defaults.
	Fleet []Contender
	Algo  string // AlgoLibrary (default), AlgoBaseline or AlgoEtcd; used when Fleet is empty
	// Command starts a contender: a binary that calls MaybeContend first.
	// Default: this executable.
	Command []string
	// Dir receives records.jsonl, each lane's log and Azurite's data.
	Dir      string
	Progress io.Writer // a line per fault; nil discards
	// Malformed and Deletes add the messy world's faults (MessyFaults):
	// every MessyEvery-th fault is then one of them, in turn, rather than
	// a process fault: a malformed record of each tamper.Case, repaired
	// seconds later (Malformed); the lease blob deleted, the third
	// deletion the whole container, and the fourth the container under a
	// leader cut off from storage (FaultCutOffDelete), in turn (Deletes).
	// The fleet must run on Azurite.
	Malformed, Deletes bool
	MessyEvery         int // default 3
	// Sequence, if set, is the faults' kinds in order, a process fault's
	// or the messy world's (which takes the messy cycle's next fault of
	// its kind: set Malformed or Deletes for those); only their lengths
	// are drawn, and Kinds, MessyEvery and MaxFaults are not used.
	Sequence []string
	// LeadFirst starts lane c1 alone, and the other lanes once it leads:
	// the first fault then hits what c1 runs.
	LeadFirst bool
	// Accounts is how many storage accounts, each an Azurite process, the
	// fleet leads over: 3 or 5 make every contender a quorum mutex (the
	// library's, native leases), and allow FaultCutMajority (quorum.go);
	// 0 means 1. AccountDown is how long FaultAccountDown (any fleet on
	// Azurite) keeps an account down (default 2 min).
	Accounts    int
	AccountDown time.Duration
	// Tail is how long the run goes on after its last fault, once a
	// leader is back: what follows a fault's end is then in the records.
	Tail time.Duration
}

// Timings the checker judges a run by.
type Timings struct {
	LeaseDuration time.Duration
	RetryInterval time.Duration
	// Slack is added to LeaseDuration + RetryInterval for the liveness
	// bound: request latency, timer jitter and a loaded machine.
	Slack time.Duration
	// Detect is how soon after storage comes back a leader must notice
	// that storage forgot its lease: its next renewal, and that request's
	// timeout, with Slack.
	Detect time.Duration
}

// TimingsFor returns the timings of an algorithm at its defaults.
func TimingsFor(algo string) Timings {
	t, err := TimingsOf([]Contender{{Algo: algo}})
	if err != nil {
		panic(err) // an unknown algorithm: a programming error
	}
	return t
}

// SeedFromEnv returns the seed LEADERELECTION_CHAOS_SEED holds, to replay a
// run, or else a new one.
func SeedFromEnv() (int64, error) {
	if s := os.Getenv("LEADERELECTION_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("LEADERELECTION_CHAOS_SEED: %w", err)
		}
		return n, nil
	}
	return time.Now().UnixNano() % 1_000_000, nil
}

// Run runs one chaos run and checks it.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Contenders == 0 {
		cfg.Contenders = 5
	}
	if cfg.Duration == 0 {
		cfg.Duration = 3 * time.Minute
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = AllFaults
	}
	if cfg.Algo == "" {
		cfg.Algo = AlgoLibrary
	}
	if len(cfg.Fleet) == 0 {
		cfg.Fleet = []Contender{{Algo: cfg.Algo}}
	}
	timings, err := TimingsOf(cfg.Fleet)
	if err != nil {
		return Report{}, err
	}
	useEtcd, err := etcdFleet(cfg.Fleet)
	if err != nil {
		return Report{}, err
	}
	if len(cfg.Command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return Report{}, err
		}
		cfg.Command = []string{exe}
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return Report{}, err
	}
	if cfg.writes() && useEtcd {
		return Report{}, errors.New("chaos: the messy world's faults and " + FaultCutOffDelete + " write blobs: they need a fleet on Azurite")
	}
	if err := cfg.checkQuorum(); err != nil {
		return Report{}, err
	}
	if cfg.MessyEvery == 0 {
		cfg.MessyEvery = 3
	}
	h := &harness{cfg: cfg, timings: timings, etcd: useEtcd, open: map[string]int64{}, seen: map[string]int64{}, whole: map[string]bool{}}
	h.log = childproc.NewLog(h.track)
	err = h.run(ctx)
	rep := Check(h.log.Records(), h.timings)
	rep.Seed = cfg.Seed
	return rep, err
}

type lane struct {
	name    string
	who     Contender
	timings laneTimings
	proxy   *toxiproxy.Proxy   // to the first account
	proxies []*toxiproxy.Proxy // to each account (proxy first)
	proc    *childproc.Process // nil until its first process starts
}

// storage is the server the contenders share: Azurite, or etcd.
type storage interface {
	Restart(context.Context) error
	Stop() error
}

type harness struct {
	cfg     Config
	timings Timings
	etcd    bool // the fleet runs against etcd, not Azurite
	store   storage
	more    []*azurite.Server // the accounts after the first (a quorum)
	lanes   []*lane
	log     *childproc.Log[Record]

	// other writes into the fleet's blob (the messy world's faults); nil
	// without them.
	other *tamper.Writer
	blob  string // the fleet's lease blob

	mu   sync.Mutex
	open map[string]int64 // lane -> start stamp of its running term
	// seen and top tell whether a deletion could make a term repeat: a
	// blob created again is seeded from what its contenders remember, so
	// the highest term started (top) must be remembered by a running
	// process other than the leader stopped for the deletion.
	seen  map[string]int64 // lane -> highest term its running process started or saw lead
	whole map[string]bool  // lane -> its quorum leader holds every account (KindHeld)
	top   int64            // highest term started on the blob (since a storage restart: see track)
	// restarted: storage restarted since top's start; it may have
	// forgotten terms, and the next start's term is then top, as storage
	// knows it (CheckTermOrder excuses that amnesia).
	restarted bool
}

func (h *harness) progress(format string, args ...any) {
	fmt.Fprintf(h.cfg.Progress, "chaos: "+format+"\n", args...)
}

// track follows who leads, from each record as the log adds it.
func (h *harness) track(r Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Kind {
	case KindStart:
		h.open[r.Who] = r.Mono
		h.seen[r.Who] = max(h.seen[r.Who], r.Term)
		if r.Term > h.top || h.restarted {
			h.top, h.restarted = r.Term, false
		}
		if h.other != nil {
			h.other.Observe(h.blob, r.Term)
		}
	case KindObserved:
		h.seen[r.Who] = max(h.seen[r.Who], r.Term)
	case KindFault:
		h.restarted = h.restarted || r.Fault == FaultStorageRestart
	case KindEnd:
		delete(h.open, r.Who)
		delete(h.whole, r.Who)
	case KindHeld:
		h.whole[r.Who] = r.Detail == heldAll
	case KindExit, KindSpawn:
		// A new process remembers nothing of the old one's terms.
		delete(h.open, r.Who)
		delete(h.seen, r.Who)
		delete(h.whole, r.Who)
	}
}

func (h *harness) note(kind, fault, target, detail string) int64 {
	r := Record{Mono: Mono(), Who: "harness", Kind: kind, Fault: fault, Target: target, Detail: detail}
	h.log.Add(r)
	return r.Mono
}

// leader returns the lane whose term started last among those running.
func (h *harness) leader() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	who, at := "", int64(0)
	for w, s := range h.open {
		if s > at {
			who, at = w, s
		}
	}
	return who
}

// waitLeader waits up to d for a leader and returns it ("" if none).
func (h *harness) waitLeader(ctx context.Context, d time.Duration) string {
	var who string
	h.log.Wait(ctx, d, func() bool {
		who = h.leader()
		return who != ""
	})
	return who
}

func (h *harness) run(ctx context.Context) (err error) {
	if err := h.log.Create(filepath.Join(h.cfg.Dir, "records.jsonl")); err != nil {
		return err
	}
	defer func() {
		h.shutdown()
		if cerr := h.log.Close(); err == nil {
			err = cerr
		}
	}()

	var upstreams []string
	for i := range max(1, h.cfg.Accounts) {
		upstream, closeLog, err := h.startStorage(ctx, i)
		if err != nil {
			return err
		}
		defer closeLog()
		upstreams = append(upstreams, upstream)
	}
	upstream := upstreams[0]

	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	blob := fmt.Sprintf("chaos-%d", h.cfg.Seed)
	h.blob = blob
	messy := h.messyCycle()
	if h.cfg.writes() {
		// Straight to Azurite, not through a contender's proxy: the other
		// writer is no contender, and the faults do not reach it.
		w, err := tamper.New(azurite.ConnectionStringFor("http://"+upstream+"/"+azurite.AccountName), containerName)
		if err != nil {
			return err
		}
		defer w.Close()
		h.mu.Lock()
		h.other = w
		h.mu.Unlock()
	}
	bound := h.timings.LeaseDuration + h.timings.RetryInterval + h.timings.Slack
	for i := 1; i <= h.cfg.Contenders; i++ {
		if i == 2 && h.cfg.LeadFirst && h.waitLeader(ctx, 2*bound) == "" {
			return errors.New("chaos: c1, started alone, did not become leader")
		}
		name := fmt.Sprintf("c%d", i)
		var proxies []*toxiproxy.Proxy
		for a, up := range upstreams {
			p := toxiproxy.NewProxy(server, accountName(name, a), "127.0.0.1:0", up)
			if err := p.Start(); err != nil {
				return fmt.Errorf("chaos: proxy for %s: %w", accountName(name, a), err)
			}
			proxies = append(proxies, p)
		}
		who := h.cfg.Fleet[(i-1)%len(h.cfg.Fleet)]
		lt, err := who.timings()
		if err != nil {
			return err
		}
		l := &lane{name: name, who: who, timings: lt, proxy: proxies[0], proxies: proxies}
		h.lanes = append(h.lanes, l)
		if err := h.spawn(l, blob); err != nil {
			return err
		}
	}
	var labels []string
	for _, l := range h.lanes {
		labels = append(labels, l.who.Label())
	}
	h.progress("seed %d: %d contenders (%s) on blob %s, faults from %v for %v", h.cfg.Seed, h.cfg.Contenders, strings.Join(labels, ", "), blob, h.cfg.Kinds, h.cfg.Duration)
	if len(messy) > 0 {
		h.progress("every %d faults one of %v", h.cfg.MessyEvery, messy)
	}

	rng := rand.New(rand.NewPCG(uint64(h.cfg.Seed), uint64(h.cfg.Seed)>>32|1))
	deadline := time.Now().Add(h.cfg.Duration)
	if h.waitLeader(ctx, 2*bound) == "" {
		return errors.New("chaos: no contender became leader")
	}
	if h.cfg.MaxFaults < 0 {
		Sleep(ctx, time.Until(deadline))
		return ctx.Err()
	}
	// n counts faults injected: one skipped for want of a leader (or of a
	// deletion's witness) does not count, so that a benchmark gets the
	// trials it asked for.
	skipped, nMessy := 0, 0
	for n := 0; (h.cfg.MaxFaults == 0 || n < h.cfg.MaxFaults) && (h.cfg.Sequence == nil || n < len(h.cfg.Sequence)) &&
		time.Now().Before(deadline) && ctx.Err() == nil; {
		// Every draw comes from rng in the same order whatever happens,
		// so a seed replays the same faults.
		kind := h.cfg.Kinds[rng.IntN(len(h.cfg.Kinds))]
		settle := time.Duration(1000+rng.IntN(3000)) * time.Millisecond
		u := rng.Float64() // how long the fault lasts, within its kind's range
		var m messyFault
		switch {
		case h.cfg.Sequence != nil:
			kind, m = h.cfg.Sequence[n], messyFault{}
			for i := range messy {
				if f := messy[(nMessy+i)%len(messy)]; f.kind == kind {
					m = f
					break
				}
			}
		case len(messy) > 0 && (n+1)%h.cfg.MessyEvery == 0:
			m = messy[nMessy%len(messy)]
			kind = m.kind
		}
		if !Sleep(ctx, settle) {
			break
		}
		var injected bool
		var err error
		if m.kind != "" {
			injected, err = h.injectMessy(ctx, m, u, blob)
			if injected {
				nMessy++
			}
		} else {
			injected, err = h.inject(ctx, kind, u, blob)
		}
		if err != nil {
			return err
		}
		if !injected {
			if skipped++; skipped == 5 {
				h.progress("no fault injected %d times in a row; the run ends here", skipped)
				break
			}
			continue
		}
		n, skipped = n+1, 0
		if who := h.waitLeader(ctx, bound+h.timings.Slack); who == "" && ctx.Err() == nil {
			h.progress("no leader %v after the %s healed", bound+h.timings.Slack, kind)
		}
	}
	Sleep(ctx, h.cfg.Tail)
	return ctx.Err()
}

// holdFor is how long a fault on a leader with timings t lasts, u (in
// [0, 1)) of the way through its kind's range. Faults "past the lease" last
// the leader's lease duration and 2-6 s more. Low resets last 1/7 to 4/7 of
// how long a leader can go without a confirmed renewal and keep its term,
// counted from a renewal due at the fault's start (LeaseDuration -
// StopMargin - RenewInterval: 7 s, so 1-4 s, at the defaults; 0.14-0.57 s
// for a 3 s ETag lease); low latency (300 +- 150 ms) holds for 6-12 s. A
// cut-off leader's container is deleted 0-1 s into the cut, before the
// leader's deadline (1 s at least after the cut: a 3 s ETag lease's
// LeaseDuration - StopMargin - RenewInterval); the cut then lasts as long
// as the fleet takes to move on (see cutOffDelete).
func holdFor(kind string, u float64, t laneTimings) time.Duration {
	switch kind {
	case FaultCutOffDelete:
		return time.Duration(u * float64(time.Second))
	case FaultFreeze, FaultBlackhole, FaultLatencyHigh, FaultResetHigh, FaultCutMajority:
		return t.LeaseDuration + 2*time.Second + time.Duration(u*float64(4*time.Second))
	case FaultLatencyLow:
		return 6*time.Second + time.Duration(u*float64(6*time.Second))
	case FaultResetLow:
		tolerance := t.LeaseDuration - t.StopMargin - t.RenewInterval
		if t.Kind == "" {
			tolerance = 7 * time.Second // the baseline and etcd: the library's default
		}
		return time.Duration((1 + 3*u) * float64(tolerance) / 7)
	}
	return 0
}

// inject applies one fault to the current leader (or to storage), holds it
// (see holdFor), and heals it.
// It reports false, having done nothing, when there is no leader to hit.
func (h *harness) inject(ctx context.Context, kind string, u float64, blob string) (bool, error) {
	target := h.leader()
	var l *lane
	for _, x := range h.lanes {
		if x.name == target {
			l = x
		}
	}
	if l == nil && kind != FaultStorageRestart {
		h.progress("no leader to hit with %s; skipped", kind)
		return false, nil
	}
	var hold time.Duration
	if l != nil {
		hold = holdFor(kind, u, l.timings)
	}
	detail := ""
	if hold > 0 {
		detail = "hold " + hold.Round(time.Millisecond).String()
	}
	switch kind {
	case FaultKill:
		h.note(KindFault, kind, target, "SIGKILL")
		l.proc.Kill()
		h.note(KindHeal, kind, target, "")
		return true, h.respawn(ctx, l, blob)
	case FaultGraceful:
		h.note(KindFault, kind, target, "SIGTERM")
		l.proc.Terminate(30 * time.Second)
		h.note(KindHeal, kind, target, "")
		return true, h.respawn(ctx, l, blob)
	case FaultFreeze:
		h.note(KindFault, kind, target, detail)
		l.proc.Freeze()
		Sleep(ctx, hold)
		// Stamped before the signal: the thawed process stamps its own
		// records at once.
		h.note(KindHeal, kind, target, "SIGCONT")
		l.proc.Thaw()
		return true, nil
	case FaultCutOffDelete:
		return h.cutOffDelete(ctx, l, hold)
	case FaultAccountDown, FaultCutMajority:
		return h.injectQuorum(ctx, kind, u, l, hold)
	case FaultStorageRestart:
		h.note(KindFault, kind, "", "")
		// On a loaded machine a start can exceed its timeout: try again
		// (the fault then lasts longer, which the checker allows for).
		for attempt := 1; ; attempt++ {
			err := h.store.Restart(ctx)
			if err == nil {
				break
			}
			if attempt == 3 || ctx.Err() != nil {
				return false, fmt.Errorf("chaos: restarting storage: %w", err)
			}
			h.progress("restarting storage: %v; trying again", err)
		}
		h.note(KindHeal, kind, "", "")
		return true, nil
	}
	h.note(KindFault, kind, target, detail)
	names, err := addToxics(l.proxy, kind)
	if err != nil {
		return false, err
	}
	Sleep(ctx, hold)
	for _, n := range names {
		_ = l.proxy.Toxics.RemoveToxic(context.Background(), n)
	}
	h.note(KindHeal, kind, target, "")
	return true, nil
}

// addToxics adds the toxics of a proxy fault of kind to proxy p and
// returns their names.
func addToxics(p *toxiproxy.Proxy, kind string) ([]string, error) {
	var toxics []string
	switch kind {
	case FaultBlackhole:
		toxics = []string{
			`{"name":"bh-up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`,
			`{"name":"bh-down","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`,
		}
	case FaultLatencyLow:
		toxics = []string{`{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":300,"jitter":150}}`}
	case FaultLatencyHigh:
		toxics = []string{`{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":5000}}`}
	case FaultResetLow, FaultResetHigh:
		toxics = []string{`{"name":"rst","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`}
	default:
		return nil, fmt.Errorf("chaos: unknown fault kind %q", kind)
	}
	var names []string
	for _, t := range toxics {
		w, err := p.Toxics.AddToxicJson(strings.NewReader(t))
		if err != nil {
			return names, fmt.Errorf("chaos: %s toxic: %w", kind, err)
		}
		names = append(names, w.Name)
	}
	return names, nil
}

// respawn starts a new process in the lane of one that was stopped, once
// another contender leads (or the liveness bound passed): the failover
// measured is to the instances that were waiting, not to a fresh process
// that finds the lease just released.
func (h *harness) respawn(ctx context.Context, l *lane, blob string) error {
	h.waitLeader(ctx, h.timings.LeaseDuration+h.timings.RetryInterval+2*h.timings.Slack)
	return h.spawn(l, blob)
}

// spawn starts a contender process in lane l.
func (h *harness) spawn(l *lane, blob string) error {
	cc := contenderConfig{Name: l.name, Contender: l.who, Container: containerName, Blob: blob, CountEvery: 5 * time.Second}
	if h.etcd {
		cc.Endpoint = l.proxy.Listen
	} else {
		for _, p := range l.proxies {
			cc.BlobURLs = append(cc.BlobURLs, "http://"+p.Listen+"/"+azurite.AccountName)
		}
		cc.BlobURL = cc.BlobURLs[0]
	}
	p, err := childproc.Start(childproc.Spec[Record]{
		Command: h.cfg.Command, Env: envContender, Config: cc, Log: filepath.Join(h.cfg.Dir, l.name+".log"),
		Started: func(pid int) {
			h.log.Add(Record{Mono: Mono(), Who: l.name, Kind: KindSpawn, Detail: fmt.Sprint(pid), Contender: l.who.Label()})
		},
		Record: h.log.Add,
		Exited: func(status string) { h.log.Add(Record{Mono: Mono(), Who: l.name, Kind: KindExit, Detail: status}) },
	})
	if err != nil {
		return fmt.Errorf("chaos: starting contender %s: %w", l.name, err)
	}
	l.proc = p
	return nil
}

// shutdown stops every contender by its PID (gracefully, then by force), the
// proxies, and Azurite.
func (h *harness) shutdown() {
	h.note(KindShutdown, "", "", "")
	procs := make([]*childproc.Process, len(h.lanes))
	for i, l := range h.lanes {
		procs[i] = l.proc
	}
	childproc.Stop(procs, 20*time.Second)
	for _, l := range h.lanes {
		for _, p := range l.proxies {
			p.Stop()
		}
	}
	if h.store != nil {
		_ = h.store.Stop()
	}
	for _, s := range h.more {
		_ = s.Stop()
	}
}

// containerName is the container of the fleet's blob.
const containerName = "chaos"

// Sleep waits d, or until ctx is done; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
