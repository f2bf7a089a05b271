package leaderelection

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/faults"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
)

// Quorum fleets (issue 39). A fleet of the configuration class "quorum"
// (sim_config_test.go) runs its native mutex as a quorum mutex
// (NewQuorumMutex, quorum.go): 2 to 4 contenders over K = 3 or 5 accounts,
// each account an in-memory Blob service of its own (container simqI, the
// blob m-native), each contender's path to each account a transport of
// its own, behind the contender's own (the lane's: its crashes,
// partitions, slow and lost answers, throttling... hit every account it
// reaches). On top of the fleet's faults, each stretch draws faults per
// account (simAccountFault): an account down for all (silent), cut off
// from one contender only, slow, throttled, its container deleted, its
// record rolled back to the copy it had a stretch before (a failover to a
// stale replica, a restore). In half the stretches, a minority of the
// accounts (1 of 3, up to 2 of 5) stays down, cut off from one, slow or
// throttled through the calm: the recovery bound (bound) is then the one
// the argument gives with a minority faulted. The protocol points
// (sim_points_test.go) strike a contender's requests to each account as
// they strike any instance's (but the other writer's, which writes the
// fleet's container); and a point of the quorum's own, at a term's record
// sent to an account, takes that account down as the record is sent, so
// that the term is stored on the others only (Q3's s < K), and a contender
// may meet the account again once it is back, before the leader has taken
// it back (a contender restarted meanwhile, whose floor is empty).
//
// The checker judges the quorum as one election, "quorum/m-native":
// overlap and term as for any; lease as a quorum's (internal/sim's
// Quorum: a func acts while a majority of the accounts' leases are its
// instance's); record on each account's blob. The driver holds back a
// loss of data (a container deleted, a record rolled back) only where Q3
// of quorum.go says a term may repeat: when it would leave the highest
// term the fleet saw on fewer than K - Q + 1 accounts, the fewest that
// meet every majority (holdQuorumLoss, docs/limits.md "A quorum's
// accounts that lose their data").

// simQuorumElection is the quorum's election, for the checker.
const simQuorumElection = "quorum/" + simNativeBlob

// simQuorum is a quorum fleet's accounts and their faults.
type simQuorum struct {
	f        *simFleet
	k, need  int
	svcs     []*memblob.Service
	accounts []*faults.Transport         // each account's own faults, in front of its service, for every contender
	paths    map[int][]*faults.Transport // a lane's path to each account (its own faults: cut off from one)
	plan     []simAccountFault

	mu    sync.Mutex
	state []simAccountState
	cut   map[[2]int]int        // (lane, account) -> partitions in force
	snaps [][]map[string]string // each account's record at each stretch's start
	lost  time.Time             // when an account's container was last deleted
	// points is the id of the last account fault a point put in force
	// (downFor): below 0, below every planned fault's.
	points int
}

// simAccountState is what faults an account has in force, by fault id.
type simAccountState struct {
	down     map[int]bool
	slow     map[int]time.Duration
	throttle map[int]float64
}

// The faults per account.
const (
	acctDown     = "account down"
	acctCut      = "account cut from one contender"
	acctSlow     = "account slow"
	acctThrottle = "account throttled"
	acctDelete   = "account container deleted"
	acctRollback = "account rolled back"
)

// simAccountFault is one fault of an account, from at to until (from the
// fleet's start).
type simAccountFault struct {
	kind      string
	account   int
	lane      int // acctCut: the contender cut off
	at, until time.Duration
	delay     time.Duration
	rate      float64
	calm      bool // held through the calm
}

func (ft simAccountFault) String() string {
	s := fmt.Sprintf("%7.1fs %s %d", ft.at.Seconds(), ft.kind, ft.account)
	switch ft.kind {
	case acctCut:
		s += fmt.Sprintf(" from lane %d", ft.lane)
	case acctSlow:
		s += fmt.Sprintf(" delay %v", ft.delay)
	case acctThrottle:
		s += fmt.Sprintf(" rate %.2f", ft.rate)
	}
	if ft.until > ft.at {
		s += fmt.Sprintf(" until %.1fs", ft.until.Seconds())
	}
	if ft.calm {
		s += " (through the calm)"
	}
	return s
}

// drawQuorum is the class "quorum": K of 3 or 5, 2 to 4 contenders, on
// the tuned shape's timings or on timings drawn as "ranged" draws a
// native mutex's, every contender alike; the other lanes tuned. A calm
// lasts at least the quorum's bound.
func drawQuorum(rng *rand.Rand, sh *simShape) {
	sh.quorum = []int{3, 5}[rng.IntN(2)]
	sh.nativeLanes = 2 + rng.IntN(3)
	tm := simTiming{lease: sh.native, retry: sh.retry}
	if rng.IntN(2) == 0 {
		tm = rangedTiming(rng, laneNative)
	}
	var tms []simLaneTimings
	for i := range sh.nativeLanes + sh.etagLanes + sh.shardLanes {
		k := laneShard
		switch {
		case i < sh.nativeLanes:
			k = laneNative
		case i < sh.nativeLanes+sh.etagLanes:
			k = laneETag
		}
		lt := simLaneTimings{first: tm}
		if k != laneNative {
			lt = sh.laneTimings(i, k) // the tuned lane of its kind (no timings drawn yet)
		}
		tms = append(tms, lt)
	}
	sh.timings = tms
	b, _ := simQuorumBound(tm.blob().withDefaults(), true)
	sh.calm = max(sh.calm, b.Round(time.Minute)+time.Minute)
}

// simQuorumBound is how long after a calm began a quorum's election must
// run again, its instances' timings s (the longest of each), with a
// minority of its accounts down, cut off, slow or throttled through the
// calm (quorum.go's Q1-Q3, quorummutex.go's loop): a lease a dead holder
// held expires within D of its last renewal, and one taken in the storm
// whose holder could not record or release it stands D more (2 D, as for
// one account); a follower backing off waits up to 1.25 B (B = max(R,
// min(D, 1 min))); it tries within R (a jittered RetryInterval); a turn
// is a read of every account, an acquire of every account, and a term
// read and written on the majority taken, each phase waiting for every
// account, a faulted one for T at most (4 T); a turn that took a minority
// (contenders that split the accounts) gives it back within T and tries
// again within 1.25 R (Q2): one such split (R/4 + R + T). If an account's
// container was deleted in the storm, its blob created again stands
// RI + T + SM + 2 R (recreated.go's settleFor) before it counts for a
// majority.
func simQuorumBound(s BlobSettings, deleted bool) (time.Duration, string) {
	d, r, t := s.LeaseDuration, s.RetryInterval, s.RequestTimeout
	backoff := max(r, min(d, maxLeaseDuration))
	b, why := 2*d+backoff*5/4+r*5/2+5*t, "quorum mutex: 2 D + 1.25 B + 2.5 R + 5 T"
	if deleted {
		b, why = b+s.RenewInterval+t+s.StopMargin+2*r, why+" + RI + T + SM + 2 R (an account's blob created again)"
	}
	return b, why
}

// newSimQuorum builds a quorum fleet's accounts and draws their faults
// (nil if the fleet's mutex leads over one account).
func newSimQuorum(f *simFleet) *simQuorum {
	k := f.shape.quorum
	if k == 0 {
		return nil
	}
	q := &simQuorum{f: f, k: k, need: k/2 + 1, paths: map[int][]*faults.Transport{}, cut: map[[2]int]int{},
		state: make([]simAccountState, k)}
	var blobs []string
	for i := range k {
		svc := memblob.New(memblob.WithObserver(f.observe))
		q.svcs = append(q.svcs, svc)
		q.accounts = append(q.accounts, faults.Over(svc))
		q.state[i] = simAccountState{down: map[int]bool{}, slow: map[int]time.Duration{}, throttle: map[int]float64{}}
		blobs = append(blobs, q.container(i)+"/"+simNativeBlob)
	}
	for _, l := range f.lanes {
		if l.kind == laneNative {
			for i := range k {
				q.paths[l.idx] = append(q.paths[l.idx], faults.Over(q.accounts[i]))
			}
		}
	}
	f.chk.Quorum(simQuorumElection, blobs, q.need)
	q.draw()
	return q
}

func (q *simQuorum) container(i int) string { return fmt.Sprintf("simq%d", i) }

// draw draws each stretch's faults per account, from the seed alone.
func (q *simQuorum) draw() {
	kinds := []struct {
		kind   string
		weight int
	}{{acctDown, 3}, {acctCut, 3}, {acctSlow, 2}, {acctThrottle, 2}, {acctDelete, 1}, {acctRollback, 2}}
	for si, st := range q.f.plan {
		rng := q.f.rngFor("quorum", strconv.Itoa(si))
		between := func(lo, hi time.Duration) time.Duration {
			if hi <= lo {
				return lo
			}
			return lo + time.Duration(rng.Int64N(int64(hi-lo)))
		}
		pick := func(kind string, ft *simAccountFault) {
			ft.kind, ft.lane = kind, rng.IntN(q.f.shape.nativeLanes)
			ft.delay = between(100*time.Millisecond, 3*time.Second)
			ft.rate = 0.3 + 0.7*rng.Float64()
		}
		for range 1 + rng.IntN(4) {
			x := rng.IntN(13)
			kind := kinds[0].kind
			for _, c := range kinds {
				if x < c.weight {
					kind = c.kind
					break
				}
				x -= c.weight
			}
			ft := simAccountFault{account: rng.IntN(q.k), at: between(st.Start, st.Calm-10*time.Second)}
			pick(kind, &ft)
			ft.until = ft.at
			if kind != acctDelete && kind != acctRollback {
				ft.until = min(st.Calm-5*time.Second, ft.at+between(20*time.Second, 3*time.Minute))
			}
			q.plan = append(q.plan, ft)
		}
		if rng.IntN(2) == 0 {
			// A minority faulted through the calm.
			for _, a := range rng.Perm(q.k)[:1+rng.IntN(q.k-q.need)] {
				ft := simAccountFault{account: a, at: between(st.Start, st.Calm), until: st.End - time.Second, calm: true}
				pick(kinds[rng.IntN(4)].kind, &ft)
				q.plan = append(q.plan, ft)
			}
		}
	}
}

// schedule puts the accounts' faults on the fleet's timeline, and a
// snapshot of every account's record at each stretch's start.
func (q *simQuorum) schedule(at func(time.Duration, func())) {
	for _, st := range q.f.plan {
		at(st.Start, q.snapshot)
	}
	for id, ft := range q.plan {
		f := q.f
		switch ft.kind {
		case acctDelete, acctRollback:
			at(ft.at, func() {
				if q.lose(ft) {
					f.count(ft.kind, 1)
					f.trace.printf(time.Now(), "%s", ft)
				}
			})
			continue
		}
		at(ft.at, func() {
			f.count(ft.kind, 1)
			f.trace.printf(time.Now(), "%s", ft)
			q.set(id, ft, true)
		})
		at(ft.until, func() {
			f.trace.printf(time.Now(), "%s ends", ft.kind)
			q.set(id, ft, false)
		})
	}
}

// set puts fault id in force (on) or ends it.
func (q *simQuorum) set(id int, ft simAccountFault, on bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.state[ft.account]
	switch ft.kind {
	case acctCut:
		n := 1
		if !on {
			n = -1
		}
		c := [2]int{ft.lane, ft.account}
		q.cut[c] += n
		if tr := q.paths[ft.lane][ft.account]; q.cut[c] > 0 {
			tr.Blackhole()
		} else {
			tr.Heal()
		}
		return
	case acctDown:
		st.down[id] = on
		if !on {
			delete(st.down, id)
		}
	case acctSlow:
		st.slow[id] = ft.delay
		if !on {
			delete(st.slow, id)
		}
	case acctThrottle:
		st.throttle[id] = ft.rate
		if !on {
			delete(st.throttle, id)
		}
	}
	tr := q.accounts[ft.account]
	switch {
	case len(st.down) > 0:
		tr.Blackhole()
	case len(st.slow) > 0:
		tr.Delay(slices.Max(slices.Collect(mapValues(st.slow))))
	default:
		tr.Heal()
	}
	var r faults.Rates
	if len(st.throttle) > 0 {
		r = faults.Rates{Fail: slices.Max(slices.Collect(mapValues(st.throttle))), FailStatus: http.StatusServiceUnavailable, FailCode: "ServerBusy"}
	}
	tr.SetRates(r, q.f.rngFor("quorum rates", strconv.Itoa(id)))
}

// downFor puts account i down for d, as a planned "account down" does: a
// point's (sim_points_test.go).
func (q *simQuorum) downFor(i int, d time.Duration) {
	q.mu.Lock()
	q.points--
	id := q.points
	q.mu.Unlock()
	ft := simAccountFault{kind: acctDown, account: i}
	q.set(id, ft, true)
	q.f.wg.Go(func() {
		select {
		case <-q.f.ctx.Done():
		case <-time.After(d):
		}
		q.set(id, ft, false)
	})
}

// snapshot keeps every account's record as it stands (the copy a later
// rollback restores).
func (q *simQuorum) snapshot() {
	var snap []map[string]string
	for i, svc := range q.svcs {
		st, _ := svc.Blob(q.container(i), simNativeBlob)
		snap = append(snap, st.Metadata)
	}
	q.mu.Lock()
	q.snaps = append(q.snaps, snap)
	q.mu.Unlock()
}

// lose deletes an account's container, or rolls its record back to the
// copy of the stretch before (or of this one's start), unless the fault
// model holds that back (lossAllowed); it reports whether it did.
func (q *simQuorum) lose(ft simAccountFault) bool {
	i, c := ft.account, q.container(ft.account)
	if !q.lossAllowed(i) {
		return false
	}
	if ft.kind == acctDelete {
		if q.svcs[i].DeleteContainer(c) != nil {
			return false
		}
		q.mu.Lock()
		q.lost = time.Now()
		q.mu.Unlock()
		return true
	}
	q.mu.Lock()
	var old map[string]string
	if n := len(q.snaps); n > 0 {
		old = q.snaps[max(0, n-2)][i]
	}
	q.mu.Unlock()
	if old == nil {
		return false
	}
	_, err := q.svcs[i].SetBlobMetadata(c, simNativeBlob, old)
	return err == nil
}

// lossAllowed reports whether account i may lose its data now: the
// highest term the fleet saw (run, or recorded on any account) stays on
// at least K - Q + 1 of the other accounts, so that every majority reads
// it (quorum.go's Q3: a term stored on s accounts repeats only if more
// than Q + s - K - 1 of them lose their data).
func (q *simQuorum) lossAllowed(i int) bool {
	top := q.f.chk.MaxTerm(simQuorumElection)
	for j := range q.k {
		top = max(top, q.f.chk.MaxTerm(q.container(j)+"/"+simNativeBlob))
	}
	if top == 0 {
		return true
	}
	keep := 0
	for j, svc := range q.svcs {
		st, ok := svc.Blob(q.container(j), simNativeBlob)
		if n, err := strconv.ParseInt(storedValue(st.Metadata, wire.MetaTerm), 10, 64); j != i && ok && err == nil && n >= top {
			keep++
		}
	}
	if keep >= q.k-q.need+1 {
		return true
	}
	q.f.mu.Lock()
	q.f.hold(holdQuorumLoss)
	q.f.mu.Unlock()
	return false
}

// bound is the quorum's recovery bound from a calm beginning now.
func (q *simQuorum) bound() (time.Duration, string) {
	q.mu.Lock()
	deleted := !q.lost.IsZero() && time.Since(q.lost) < q.f.shape.storm+q.f.shape.calm
	q.mu.Unlock()
	return simQuorumBound(q.f.shape.longest(laneNative), deleted)
}

// route sends a request of lane l's process to the account it names, on
// l's path to it.
type simQuorumRoute struct {
	q    *simQuorum
	lane int
}

func (r simQuorumRoute) Do(req *http.Request) (*http.Response, error) {
	p := strings.TrimPrefix(req.URL.Path, "/"+memblob.AccountName+"/")
	c, _, _ := strings.Cut(p, "/")
	i, err := strconv.Atoi(strings.TrimPrefix(c, "simq"))
	if err != nil || i < 0 || i >= r.q.k {
		return nil, fmt.Errorf("simulator: a quorum's contender sent to %s, no account of its", req.URL.Path)
	}
	return r.q.paths[r.lane][i].Do(req)
}

// storage is what lane l's processes send to: the fleet's service, or a
// quorum's contender's accounts.
func (f *simFleet) storage(l *simLane) policy.Transporter {
	if f.quorum != nil && l.kind == laneNative {
		return simQuorumRoute{f.quorum, l.idx}
	}
	return f.svc
}

// nativeElection is the fleet's native mutex's election.
func (f *simFleet) nativeElection() string {
	if f.quorum != nil {
		return simQuorumElection
	}
	return simContainer + "/" + simNativeBlob
}

// mutex is a quorum contender's process (lane l's incarnation inc, name),
// on transport tr: its Run, or nil if it cannot be built.
func (q *simQuorum) mutex(l *simLane, inc int, name string, tr *faults.Transport, opts []Option) func(context.Context) error {
	f := q.f
	next := f.actors.points.transport(l, inc, tr)
	var accounts []BlobSettings
	for i := range q.k {
		c := q.container(i)
		s := f.timed(BlobSettings{SASURL: memblob.Endpoint + "/" + c + "?sv=2025-01-05&sr=c&sp=racwdl&sig=c2ltdWxhdG9y",
			Container: c, Blob: simNativeBlob}, l)
		s.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: next}}
		accounts = append(accounts, s)
	}
	opts = append(opts, WithEvents(func(e Event) {
		f.trace.printf(time.Now(), "%s event %s term %d", name, e.Kind, e.Term.Number)
	}))
	var m *BlobDistributedMutex
	m, err := NewQuorumMutex(accounts, func(ctx context.Context) error {
		owns := func(id string) bool {
			return slices.ContainsFunc(m.quorum.accounts, func(a *BlobLeaseManager) bool { return a.LeaseID() == id })
		}
		return f.act(ctx, l, simQuorumElection, name, accounts[0].withDefaults().StopMargin, owns)
	}, opts...)
	if err != nil {
		f.note("%s: %v", name, err)
		return nil
	}
	return m.RunTaskWhenMutexAcquired
}

// close ends the accounts' transports, once the fleet's lanes have ended.
func (q *simQuorum) close() {
	for _, trs := range q.paths {
		for _, tr := range trs {
			tr.Close()
		}
	}
	for _, tr := range q.accounts {
		tr.Close()
	}
}
