// Package shardchaos runs leaderelection.ShardOwner instances as separate OS
// processes against Azurite, each behind a fault-injecting TCP proxy of its
// own (toxiproxy, embedded), kills, freezes, partitions and stops them, and
// checks the log of every shard's runs for two funcs at once: per shard,
// with the chaos harness's checker (package chaos). The shard benchmark
// (internal/tools/shardbench) drives the same harness.
//
// Every process it starts (instances, Azurite) is stopped by its PID before
// Close returns. An instance also exits when its standard input closes, and
// on Linux the kernel kills it if the harness dies (even while it is
// stopped). Package childproc starts and stops the instances, as it does the
// chaos harness's contenders.
package shardchaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/childproc"
	"github.com/blobelect/leaderelection/internal/tools/tamper"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Record is one line of a run's log (JSON lines): chaos.Record's, with the
// shard a run is of, and the session for session records. Stamps are
// CLOCK_MONOTONIC nanoseconds, comparable across the processes of a machine.
type Record struct {
	Mono     int64  `json:"mono"`
	Who      string `json:"who"`
	Kind     string `json:"kind"` // chaos.Kind*, KindSession or KindSessionEnd
	Shard    string `json:"shard,omitempty"`
	Term     int64  `json:"term,omitempty"`
	Expires  int64  `json:"expires,omitempty"`
	Fault    string `json:"fault,omitempty"`
	Target   string `json:"target,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Requests int64  `json:"requests,omitempty"`
	Session  string `json:"session,omitempty"`
	// Set is, for set records, the instance's set of shards, sorted.
	Set []string `json:"set,omitempty"`
	// Blob is, for phantom records, the phantom session's blob.
	Blob string `json:"blob,omitempty"`
}

// Record kinds of sessions and sets (the others are chaos's; the other
// writer's malformed and repair records carry the Shard they wrote).
const (
	KindSession    = "session"     // an instance started a session (Session)
	KindSessionEnd = "session-end" // it ended (Session, Detail: reason)
	// KindSet is an instance's set of shards (Set), as it started with
	// it, or once SetShards took a set the harness sent (Detail: an
	// error, if SetShards refused it).
	KindSet = "set"
	// KindPhantom: the other writer created a phantom session blob
	// (Blob); KindPhantomGone: it deleted it.
	KindPhantom     = "phantom"
	KindPhantomGone = "phantom-gone"
	// KindLateAcquire: the harness leased a dead session's blob again
	// under its ID (Blob, Session), as a late acquire would.
	KindLateAcquire = "late-acquire"
)

// Fault kinds: an instance killed, frozen past its lease, cut off from
// storage, or stopped gracefully; or killed and its session's blob leased
// again, after the others judged it dead, by an acquire under the
// session's ID that reached the server late. The names are chaos's where
// they mean the same.
const (
	FaultKill      = chaos.FaultKill
	FaultFreeze    = chaos.FaultFreeze
	FaultPartition = chaos.FaultBlackhole
	FaultGraceful  = chaos.FaultGraceful
	// FaultLateAcquire: SIGKILL; then, once the others have judged the
	// session dead (its blob shows no lease, and the end mark), the
	// acquire of that blob's lease under the session's ID that its
	// starter sent, delayed in the network, reaches the server; then a
	// new process in the lane, which, in a static lane, finds the dead
	// session named in its lease ID file. A static lane is hit when there is one (the next one up).
	FaultLateAcquire = chaos.FaultLateAcquire
)

// azureKeepAlive is how long the harness's Azurite keeps an idle
// connection: as Azure's load balancers do by default (4 minutes), not
// Azurite's 5 s, at which a session renewed every 5 s on a connection of
// its own would open a new connection for nearly every renewal, and wait
// seconds for it while the instances claim thousands of shards.
const azureKeepAlive = 4 * time.Minute

// AllFaults is every fault kind.
var AllFaults = []string{FaultKill, FaultFreeze, FaultPartition, FaultGraceful, FaultLateAcquire}

// Timings are the instances' settings.
type Timings struct {
	LeaseDuration time.Duration
	RenewInterval time.Duration // 0: the library's default
	RetryInterval time.Duration
	StopMargin    time.Duration
}

// Config configures a Harness.
type Config struct {
	Algo    string // AlgoOwner (default) or AlgoMutex
	Shards  int
	Timings Timings
	// Command starts an instance: a binary that calls MaybeInstance first.
	// Default: this executable.
	Command []string
	// Dir receives records.jsonl, each lane's log, and Azurite's log.
	Dir      string
	Progress io.Writer // progress lines; nil discards
	// CountEvery is how often instances report their request count.
	CountEvery time.Duration
	// Direct connects the instances straight to Azurite, not each through
	// a proxy of its own: a benchmark's requests then cost the machine
	// what they cost a deployment (a proxy copies every byte on the same
	// cores as Azurite), as its floors' do. Partition refuses.
	Direct bool
	// Static gives the instances of every other lane (i01, i03, ...) a
	// lease ID file of the lane's own, in Dir (leaderelection.WithLeaseIDFile):
	// a process started again in such a lane resumes its predecessor's
	// session and shards, and one stopped by SIGTERM hands nothing on.
	Static bool
	// Brief is the chance that a shard's run returns by itself, 1 to 3 s
	// after it started, freeing the shard for any instance to claim: after
	// a fault moves shards, some go free again and again for a while.
	Brief float64
}

type lane struct {
	name    string
	proxy   *toxiproxy.Proxy   // nil if Config.Direct
	blobURL string             // its instances' endpoint: the proxy's, or Azurite's
	proc    *childproc.Process // nil until its first process starts
	toxics  []string
	// set is the shards the lane's instance is to run, sorted; nil: the
	// first Config.Shards. A new process starts with it.
	set []string
	// ctl orders a process's start and the sets sent to it, so that a new
	// process starts with the last set sent to its lane, or is sent it.
	ctl sync.Mutex
}

// Harness runs instances as processes and tracks, from their records, which
// shard runs where.
type Harness struct {
	cfg     Config
	azurite *azurite.Server
	server  *toxiproxy.ApiServer
	log     *childproc.Log[Record]

	mu      sync.Mutex
	lanes   map[string]*lane
	order   []string
	running map[string]map[string]bool // shard -> lanes running it
	owned   map[string]int             // lane -> shards it runs
	// How many shards run on one lane or more, and on two or more: kept
	// as records come, so that a wait on them costs nothing per record
	// (State, built afresh at each of 10,000 starts, took half a core of
	// a 2-core machine from Azurite during a benchmark's cold start).
	nRunning, nDoubled int
	alive              map[string]bool     // lanes with a process
	reqs               map[string]int64    // lane -> requests of its current process
	sets               map[string][]string // lane -> its current process's set, as it confirmed it
	sessions           map[string]string   // lane -> the session its last process started last
	inSession          map[string]string   // lane -> the session its current process runs (none before it starts one, or after it ends)

	messy messy
}

// Start starts Azurite (in memory) and the proxy server; no instance yet.
func Start(ctx context.Context, cfg Config) (*Harness, error) {
	if cfg.Algo == "" {
		cfg.Algo = AlgoOwner
	}
	if len(cfg.Command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.Command = []string{exe}
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	h := &Harness{cfg: cfg, lanes: map[string]*lane{}, running: map[string]map[string]bool{}, owned: map[string]int{},
		alive: map[string]bool{}, reqs: map[string]int64{}, sets: map[string][]string{}, sessions: map[string]string{}, inSession: map[string]string{}}
	h.log = childproc.NewLog(h.track)
	if err := h.log.Create(filepath.Join(cfg.Dir, "records.jsonl")); err != nil {
		return nil, err
	}
	azLog, err := os.Create(filepath.Join(cfg.Dir, "azurite.log"))
	if err != nil {
		h.log.Close()
		return nil, err
	}
	h.azurite, err = azurite.Start(ctx, azurite.Options{Log: azLog, KeepAlive: azureKeepAlive})
	azLog.Close() // Azurite holds its own descriptor
	if err != nil {
		h.log.Close()
		return nil, fmt.Errorf("shardchaos: starting Azurite: %w", err)
	}
	h.server = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	// Straight to Azurite, not through an instance's proxy.
	h.messy.other, err = tamper.New(azurite.ConnectionStringFor(h.azurite.URL()), Container)
	if err != nil {
		_ = h.azurite.Stop()
		h.log.Close()
		return nil, err
	}
	h.messy.setMu = make(chan struct{}, 1)
	for i := range cfg.Shards {
		h.messy.fleet = append(h.messy.fleet, ShardName(i))
	}
	h.messy.next = cfg.Shards
	return h, nil
}

// Azurite is the storage the instances use.
func (h *Harness) Azurite() *azurite.Server { return h.azurite }

func (h *Harness) progress(format string, args ...any) {
	fmt.Fprintf(h.cfg.Progress, "shardchaos: "+format+"\n", args...)
}

// Note stamps a harness record (a fault, its heal, a phase of a benchmark).
func (h *Harness) Note(kind, fault, target, detail string) int64 {
	r := Record{Mono: chaos.Mono(), Who: "harness", Kind: kind, Fault: fault, Target: target, Detail: detail}
	h.log.Add(r)
	return r.Mono
}

// AddLane creates a lane (a proxy to Azurite, unless Config.Direct) and
// starts an instance in it.
func (h *Harness) AddLane() (string, error) {
	h.mu.Lock()
	name := fmt.Sprintf("i%02d", len(h.order)+1)
	h.mu.Unlock()
	l := &lane{name: name, blobURL: h.azurite.URL()}
	if !h.cfg.Direct {
		upstream := strings.TrimPrefix(strings.TrimSuffix(h.azurite.URL(), "/"+azurite.AccountName), "http://")
		l.proxy = toxiproxy.NewProxy(h.server, name, "127.0.0.1:0", upstream)
		if err := l.proxy.Start(); err != nil {
			return "", fmt.Errorf("shardchaos: proxy for %s: %w", name, err)
		}
		l.blobURL = "http://" + l.proxy.Listen + "/" + azurite.AccountName
	}
	h.mu.Lock()
	h.lanes[name] = l
	h.order = append(h.order, name)
	h.mu.Unlock()
	return name, h.Spawn(name)
}

// Lanes returns the lanes, in the order they were added.
func (h *Harness) Lanes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.order...)
}

func (h *Harness) lane(name string) *lane {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lanes[name]
}

// proc is lane name's current process.
func (h *Harness) proc(name string) *childproc.Process {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lanes[name].proc
}

// static reports whether lane name's instances have a lease ID file (see
// Config.Static): every other lane, i01, i03, ...
func (h *Harness) static(name string) bool {
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "i"))
	return h.cfg.Static && n%2 == 1
}

// Spawn starts an instance process in lane name (whose previous process, if
// any, has exited), with the lane's set.
func (h *Harness) Spawn(name string) error {
	l := h.lane(name)
	l.ctl.Lock()
	defer l.ctl.Unlock()
	leaseIDFile := ""
	if h.static(name) {
		leaseIDFile = filepath.Join(h.cfg.Dir, name+".session")
	}
	p, err := childproc.Start(childproc.Spec[Record]{
		Command: h.cfg.Command, Env: envInstance, Log: filepath.Join(h.cfg.Dir, name+".log"),
		Config: instanceConfig{
			Lane: name, Algo: h.cfg.Algo, BlobURL: l.blobURL,
			Container: Container, Prefix: Prefix, Shards: h.cfg.Shards, Names: l.set, Timings: h.cfg.Timings, CountEvery: h.cfg.CountEvery,
			LeaseIDFile: leaseIDFile, Brief: h.cfg.Brief,
		},
		Started: func(pid int) {
			h.log.Add(Record{Mono: chaos.Mono(), Who: name, Kind: chaos.KindSpawn, Detail: fmt.Sprint(pid)})
		},
		Record: h.log.Add,
		Exited: func(status string) {
			h.log.Add(Record{Mono: chaos.Mono(), Who: name, Kind: chaos.KindExit, Detail: status})
		},
	})
	if err != nil {
		return fmt.Errorf("shardchaos: starting instance %s: %w", name, err)
	}
	h.mu.Lock()
	l.proc = p
	h.mu.Unlock()
	return nil
}

// Where the instances keep their blobs: BlobSettings.Container and Blob
// (the ShardOwner's prefix).
const (
	Container = "shards"
	Prefix    = "bench"
)

// SetShards makes set (sorted here) lane name's set: its instance is sent
// it, to call ShardOwner.SetShards with, and a new process in the lane
// starts with it. An instance that has exited is not sent it; a frozen one
// takes it when it thaws. The instance confirms with a set record.
func (h *Harness) SetShards(name string, set []string) {
	set = slices.Sorted(slices.Values(set))
	l := h.lane(name)
	l.ctl.Lock()
	defer l.ctl.Unlock()
	l.set = set
	if l.proc == nil {
		return
	}
	line, _ := json.Marshal(control{Set: set})
	_ = l.proc.Send(string(line), time.Second) // fails only once it has exited: its next process starts with set
}

// SetOf is lane name's set, as last given to SetShards (nil: the first
// Config.Shards).
func (h *Harness) SetOf(name string) []string {
	l := h.lane(name)
	l.ctl.Lock()
	defer l.ctl.Unlock()
	return slices.Clone(l.set)
}

// PID is the process ID of lane name's instance.
func (h *Harness) PID(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.lanes[name]
	if l == nil || l.proc == nil {
		return 0
	}
	return l.proc.PID()
}

// Kill SIGKILLs lane name's instance and waits until it is reaped.
func (h *Harness) Kill(name string) { h.proc(name).Kill() }

// Terminate SIGTERMs lane name's instance and waits up to d for it to exit,
// then kills it.
func (h *Harness) Terminate(name string, d time.Duration) error {
	if !h.proc(name).Terminate(d) {
		return fmt.Errorf("shardchaos: %s did not exit within %v of SIGTERM", name, d)
	}
	return nil
}

// Freeze stops lane name's instance (SIGSTOP); Thaw continues it.
func (h *Harness) Freeze(name string) { h.proc(name).Freeze() }

// Thaw continues a frozen instance (SIGCONT).
func (h *Harness) Thaw(name string) { h.proc(name).Thaw() }

// Partition cuts lane name off from storage: its proxy drops everything.
func (h *Harness) Partition(name string) error {
	l := h.lane(name)
	if l.proxy == nil {
		return fmt.Errorf("shardchaos: partition %s: the instances connect straight to Azurite (Config.Direct)", name)
	}
	for _, t := range []string{
		`{"name":"bh-up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`,
		`{"name":"bh-down","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`,
	} {
		w, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(t))
		if err != nil {
			return fmt.Errorf("shardchaos: partition %s: %w", name, err)
		}
		l.toxics = append(l.toxics, w.Name)
	}
	return nil
}

// Heal ends lane name's partition.
func (h *Harness) Heal(name string) {
	l := h.lane(name)
	for _, n := range l.toxics {
		_ = l.proxy.Toxics.RemoveToxic(context.Background(), n)
	}
	l.toxics = nil
}

// track follows who runs what, from each record as the log adds it.
func (h *Harness) track(r Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Kind {
	case chaos.KindStart:
		h.messy.other.Observe(shardBlob(r.Shard), r.Term)
		if h.running[r.Shard] == nil {
			h.running[r.Shard] = map[string]bool{}
		}
		if !h.running[r.Shard][r.Who] {
			h.setRunning(r.Shard, r.Who, true)
		}
	case chaos.KindEnd:
		if h.running[r.Shard][r.Who] {
			h.setRunning(r.Shard, r.Who, false)
		}
	case chaos.KindSpawn:
		h.alive[r.Who] = true
		h.reqs[r.Who] = 0
		delete(h.sets, r.Who)
		delete(h.inSession, r.Who)
	case KindSet:
		if r.Detail == "" {
			h.sets[r.Who] = r.Set
		}
	case KindSession:
		h.sessions[r.Who], h.inSession[r.Who] = r.Session, r.Session
	case KindSessionEnd:
		if h.inSession[r.Who] == r.Session {
			delete(h.inSession, r.Who)
		}
	case chaos.KindExit:
		h.alive[r.Who] = false
		delete(h.sets, r.Who)
		for shard, lanes := range h.running {
			if lanes[r.Who] {
				h.setRunning(shard, r.Who, false)
			}
		}
	case chaos.KindRequests:
		h.reqs[r.Who] = r.Requests
	}
}

// setRunning records that lane runs shard, or no longer does, and keeps the
// counts. The caller holds h.mu.
func (h *Harness) setRunning(shard, lane string, on bool) {
	lanes := h.running[shard]
	before := len(lanes)
	if on {
		lanes[lane] = true
		h.owned[lane]++
	} else {
		delete(lanes, lane)
		h.owned[lane]--
	}
	after := len(lanes)
	switch {
	case before == 0 && after == 1:
		h.nRunning++
	case before == 1 && after == 0:
		h.nRunning--
	case before == 1 && after == 2:
		h.nDoubled++
	case before == 2 && after == 1:
		h.nDoubled--
	}
}

// Counts is how many shards run, how many run twice, and how many each
// lane runs: what State says of them, at a cost that does not grow with
// the shards.
type Counts struct {
	Running int            // shards running on at least one lane
	Doubled int            // shards running on more than one lane
	Owned   map[string]int // lane -> shards it runs
}

// Converged reports whether every one of n shards runs on exactly one of
// lanes, and their counts differ by at most one.
func (c Counts) Converged(n int, lanes []string) bool {
	if c.Running != n || c.Doubled > 0 {
		return false
	}
	return converged(n, lanes, c.Owned)
}

// WaitCounts waits up to d for cond to hold, and returns how long it took.
// Prefer it to WaitFor where cond needs only the counts.
func (h *Harness) WaitCounts(ctx context.Context, d time.Duration, cond func(Counts) bool) (time.Duration, bool) {
	return h.log.Wait(ctx, d, func() bool {
		h.mu.Lock()
		c := Counts{Running: h.nRunning, Doubled: h.nDoubled, Owned: make(map[string]int, len(h.owned))}
		for l, n := range h.owned {
			if n != 0 {
				c.Owned[l] = n
			}
		}
		h.mu.Unlock()
		return cond(c)
	})
}

// State is who runs what, from the records so far.
type State struct {
	Running int            // shards running on at least one lane
	Doubled []string       // shards running on more than one lane (frozen ones count until they thaw)
	Owned   map[string]int // lane -> shards it runs
	Alive   map[string]bool
	// Sets are the live lanes' sets, as their instances confirmed them
	// (a lane whose instance has not yet is missing).
	Sets map[string][]string
	// Runs are the lanes each running shard runs on.
	Runs map[string][]string
	// Sessions are the sessions the live lanes' processes run (a lane
	// whose process has not started one yet, or whose session ended, is
	// missing).
	Sessions map[string]string
}

// State returns the current state.
func (h *Harness) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := State{Owned: map[string]int{}, Alive: map[string]bool{}, Sets: map[string][]string{}, Runs: map[string][]string{}, Sessions: maps.Clone(h.inSession)}
	for shard, lanes := range h.running {
		if len(lanes) > 0 {
			s.Running++
			s.Runs[shard] = slices.Sorted(maps.Keys(lanes))
		}
		if len(lanes) > 1 {
			s.Doubled = append(s.Doubled, shard)
		}
	}
	for l, set := range h.sets {
		s.Sets[l] = set
	}
	for l, n := range h.owned {
		if n != 0 {
			s.Owned[l] = n
		}
	}
	for l, a := range h.alive {
		s.Alive[l] = a
	}
	sort.Strings(s.Doubled)
	return s
}

// Converged reports whether every one of n shards runs on exactly one of
// lanes, and their counts differ by at most one.
func (s State) Converged(n int, lanes []string) bool {
	if s.Running != n || len(s.Doubled) > 0 {
		return false
	}
	return converged(n, lanes, s.Owned)
}

func converged(n int, lanes []string, owned map[string]int) bool {
	lo, hi, total := n, 0, 0
	for _, l := range lanes {
		lo, hi = min(lo, owned[l]), max(hi, owned[l])
		total += owned[l]
	}
	return total == n && hi-lo <= 1
}

// Covered reports whether every shard in a live lane's set runs on exactly
// one lane, a live one that has it in its set, and no other shard runs;
// and, when every live lane has the same set, their counts differ by at
// most one. It is false while a live lane's set is not known (its
// instance has not confirmed it yet).
func (s State) Covered() bool {
	var lanes []string
	for l, alive := range s.Alive {
		if alive {
			if _, ok := s.Sets[l]; !ok {
				return false
			}
			lanes = append(lanes, l)
		}
	}
	if unrun, stray := s.Misplaced(); len(unrun) > 0 || len(stray) > 0 {
		return false
	}
	for _, l := range lanes {
		if !slices.Equal(s.Sets[l], s.Sets[lanes[0]]) {
			return true // the share is each instance's own guess
		}
	}
	return s.Spread(lanes) <= 1
}

// Misplaced returns the shards in a live lane's set that do not run on
// exactly one lane that has them in its set (unrun), and those that run
// where they are in no live set, or on a lane whose set lacks them (stray).
func (s State) Misplaced() (unrun, stray []string) {
	return misplaced(s.Alive, s.Sets, s.Runs)
}

func misplaced(alive map[string]bool, sets, runs map[string][]string) (unrun, stray []string) {
	wanted := map[string]bool{}
	for l, set := range sets {
		if alive[l] {
			for _, sh := range set {
				wanted[sh] = true
			}
		}
	}
	for sh := range wanted {
		lanes := runs[sh]
		if len(lanes) != 1 || !alive[lanes[0]] || !slices.Contains(sets[lanes[0]], sh) {
			unrun = append(unrun, sh)
		}
	}
	for sh, lanes := range runs {
		if len(lanes) == 0 || wanted[sh] {
			continue
		}
		stray = append(stray, sh)
	}
	slices.Sort(unrun)
	slices.Sort(stray)
	return unrun, stray
}

// Spread is the largest difference between two of lanes' counts.
func (s State) Spread(lanes []string) int {
	lo, hi := int(^uint(0)>>1), 0
	for _, l := range lanes {
		lo, hi = min(lo, s.Owned[l]), max(hi, s.Owned[l])
	}
	return hi - lo
}

// WaitFor waits up to d for cond to hold, and returns how long it took.
func (h *Harness) WaitFor(ctx context.Context, d time.Duration, cond func(State) bool) (time.Duration, bool) {
	return h.log.Wait(ctx, d, func() bool { return cond(h.State()) })
}

// Requests is how many requests lane name's current process has reported.
func (h *Harness) Requests(name string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reqs[name]
}

// Records returns a copy of every record so far.
func (h *Harness) Records() []Record { return h.log.Records() }

// Close stops every instance by its PID (thawed, SIGTERM, then SIGKILL after
// 30 s), the proxies and Azurite.
func (h *Harness) Close() error {
	h.Note(chaos.KindShutdown, "", "", "")
	h.mu.Lock()
	lanes := make([]*lane, len(h.order))
	procs := make([]*childproc.Process, len(h.order))
	for i, name := range h.order {
		lanes[i], procs[i] = h.lanes[name], h.lanes[name].proc
	}
	h.mu.Unlock()
	var errs []error
	for _, i := range childproc.Stop(procs, 30*time.Second) {
		errs = append(errs, fmt.Errorf("shardchaos: %s did not exit within 30s of SIGTERM", lanes[i].name))
	}
	for _, l := range lanes {
		if l.proxy != nil {
			l.proxy.Stop()
		}
	}
	h.messy.other.Close()
	if h.azurite != nil {
		errs = append(errs, h.azurite.Stop())
	}
	errs = append(errs, h.log.Close())
	return errors.Join(errs...)
}
