package leaderelection

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/sim"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/stretchr/testify/assert"
)

// Faults at protocol points (issue 38), as FoundationDB's BUGGIFY: rare
// compound events made common on purpose. Each fleet enables, from its
// seed, a subset of the points below, each with odds of its own (5 to
// 50%; a tenth of that for a renewal and a session's record, which come
// every few seconds), and a subset of the actions; when an instance's
// request that marks a point is answered (a transport of the simulator's
// in front of its faults.Transport, which tells the point from the
// request: its lease action, a term record or a renewal, a session's
// record, a note, a held list, a listing of the sessions), the point fires with its odds during a
// storm, and strikes with one of the enabled actions, drawn: the process
// crashes there (between that step and its next: between an acquire and
// its record, a record and its lease change, a note and its adoption...),
// its path to storage is cut, the answer is lost, the answer comes late,
// the other writer (see sim_writers_test.go) acts on that very blob at
// that moment, a process that a point crashed starts again now rather
// than later, or the process is cut off, or crashed, as the container is
// deleted (as the fault model lets it: a leader cut off as its container
// goes; a process that dies as it goes, restarted, with its lease ID file,
// while it may still be gone). And a process that starts again with its
// lease ID file may find the other writer has just made a lease action
// under the file's ID on the blob it names (between a session's death and
// its restart with its file). A point may also stop the process gracefully
// (actStop). After a strike every point fires at higher odds for a while
// (an aftershock: simShockOdds). Every effect ends before the calm. No code
// of the library's is changed: the points are read from its requests, and
// one (ptFirstRun) from the start of the simulator's own shard func.
// A session's last list (the shards it released as it left, which its
// survivors take on its word) is a point of its own, at full odds: the
// session's held lists are written every RetryInterval, its last one once
// in its life, and only with shards it could not hand on: mostly as a
// fleet fault (sim.Redeploy: a whole kind stopped at once) leaves it no
// peer to hand them to. So is the moment a session begins to run shards
// (its first shard func starts), which what its peers know of it (the
// lease it declared, the terms it saw) must already cover: struck on that
// session's own process, whether it claimed the shard, took it back, or
// adopted it from a handover, whose record the giver wrote (until 2026-11-29
// the point was that first record's answer, which for a handover struck
// the giver, never the session beginning to run). A session
// started into a steady fleet gets shards only by handover, once its peers
// listed it; sessions started together (a fleet fault) find shards free,
// and may run them before their peers list them.

// The points, as the report names them.
const (
	ptAcquire       = "after an acquire"
	ptRecreated     = "at a settle wait's end (an acquire of a blob created again)"
	ptRecord        = "after a term's record"
	ptRenewal       = "after a renewal"
	ptChange        = "after a lease change"
	ptRelease       = "after a release"
	ptBreak         = "after a break"
	ptSessionRecord = "after a session's record"
	ptEndMark       = "after a session's end mark"
	ptNote          = "after a note"
	ptHeld          = "after a held list's write"
	ptEndList       = "after a session's last list (as it ends, its blob released)"
	ptFirstRun      = "as a session begins to run shards (its first shard func starts)"
	ptRestart       = "at a restart with its lease ID file"
	// A ShardOwner's listing of the sessions: the view of who lives, and
	// which leases they declared, that its pass acts on. Drawn apart (its
	// own stream, so that no other point's draw changes), at a tenth of
	// the odds, as it comes every RetryInterval on every instance: an
	// answer late here makes the pass act, seconds later, on a view of
	// the sessions older than what it then reads of the shards.
	ptListSessions = "after a listing of the sessions"
	// A quorum's own point (sim_quorum_test.go), drawn apart: a term's
	// record sent to one account, which goes down as it is sent, so that
	// the term is stored on the others only.
	ptAccountDown = "at a term's record on a quorum's account: the account down as it is sent"
)

var simPointNames = []string{ptAcquire, ptRecreated, ptRecord, ptRenewal, ptChange, ptRelease, ptBreak, ptSessionRecord, ptEndMark, ptNote, ptHeld, ptEndList, ptFirstRun, ptRestart}

// The actions a point may strike with.
var simPointActs = []string{"crash", "cut", "lose the answer", "answer late", "other writer", "restart now", actCutDelete, actCrashDelete, actStop}

// actStop stops the process gracefully there (its Run's context ends, as
// a rollout's SIGTERM does), starting it again as a crash at a point does:
// a stop in the middle of a step (a handover half made, a claim just
// recorded) leaves what it could not hand on released and listed.
const actStop = "stop"

// actCutDelete cuts the process off and deletes the container, as the
// fault model lets it (deletable): limits.md's "a leader cut off from
// storage as its blob or container is deleted", at any point of any
// election, the cut lasting up to twice the fleet's longest lease (within
// the storm), so that a holder may act on to its deadline. At once, or, if
// the model holds it back then (mostly for want of another live witness of
// a last term: the cut process no longer counts as one), as soon as it
// lets it while the cut lasts: the deletion may come at any moment of the
// cut, after its peers' next passes have read what the cut process last
// did.
const actCutDelete = "cut, as the container is deleted"

// actCrashDelete crashes the process and deletes the container at once (as
// the fault model lets it), the process starting again as a crash at a
// point does: a process that dies as its container is deleted, restarted
// (with its lease ID file, if it has one) while it may still be gone.
const actCrashDelete = "crash, as the container is deleted"

// simActors are the fleet's actors besides its instances and its plan:
// the other writer, the points and the container's blob trigger.
type simActors struct {
	writer  *simWriter
	points  *simPoints
	trigger *simTrigger // a blob-triggered function (sim_writers_trigger_test.go)
	// noContainer: the container is deleted, not created again yet; and
	// procs, by lane, whether a process of the lane runs (from its start
	// until its Run has returned): see resumesAcross.
	noContainer *atomic.Bool
	procs       []atomic.Bool
}

// observe is the actors' part of the fleet's observer, under the fake's
// lock.
func (a simActors) observe(e memblob.Event) {
	a.writer.observe(e)
	a.trigger.observe(e)
	switch {
	case e.Container != simContainer:
		// A quorum's account (sim_quorum_test.go), which shares the
		// fleet's observer: not the container a ShardOwner's restart
		// reads (seed 171500678580 at 6ae46d4: an account's container
		// deleted let a restart start as if the fleet's were gone).
	case e.Op == memblob.OpCreateContainer && e.OK():
		a.noContainer.Store(false)
	case e.Op == memblob.OpDeleteContainer && e.OK():
		a.noContainer.Store(true)
	}
}

func newSimActors(f *simFleet) simActors {
	return simActors{writer: newSimWriter(f), points: newSimPoints(f), trigger: newSimTrigger(f), noContainer: &atomic.Bool{}, procs: make([]atomic.Bool, len(f.lanes))}
}

type simPoints struct {
	f          *simFleet
	odds       map[string]float64 // the enabled points and their odds
	acts       []string           // the enabled actions
	quorumOdds float64            // a quorum fleet's ptAccountDown's odds (0: not enabled)

	mu     sync.Mutex
	down   map[*simLane]chan struct{} // processes a point crashed, until they start again: closed to start one at once
	ranOne map[string]bool            // the sessions that began to run shards (firstRun)
	// shock is when the aftershock of the last strike made outside one
	// ends (see simShockOdds).
	shock time.Time
}

// After a strike, every point of the fleet strikes at simShockOdds times
// its odds (at most always) for two of the fleet's longest RetryIntervals
// (simPoints.aftershock): faults come in clusters, as a storage incident's
// do, and the sequences that need two strikes within a pass or two of each
// other (an answer late on one instance, then a cut with a deletion on
// another, before the first lists again) come many times more often. A
// strike within an aftershock does not start another, so that one strike
// does not keep the odds raised to the end of the storm.
const simShockOdds = 8

// aftershock starts an aftershock now, unless one is on; shaken reports
// whether one is.
func (p *simPoints) aftershock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); !now.Before(p.shock) {
		p.shock = now.Add(2 * max(p.f.shape.retry, p.f.shape.shardRetry))
	}
}

func (p *simPoints) shaken() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Before(p.shock)
}

// firstRun reports whether session begins to run shards now: its first
// shard func starts (and notes that it has).
func (p *simPoints) firstRun(session string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ranOne[session] {
		return false
	}
	p.ranOne[session] = true
	return true
}

func newSimPoints(f *simFleet) *simPoints {
	rng := f.rngFor("points")
	p := &simPoints{f: f, odds: map[string]float64{}, down: map[*simLane]chan struct{}{}, ranOne: map[string]bool{}}
	for _, pt := range simPointNames {
		if rng.IntN(2) == 0 {
			p.odds[pt] = 0.05 + 0.45*rng.Float64()
			if pt == ptRenewal || pt == ptSessionRecord {
				// Every few seconds, on every instance: a tenth of the odds.
				p.odds[pt] /= 10
			}
		}
	}
	for _, a := range simPointActs {
		if rng.IntN(5) < 3 {
			p.acts = append(p.acts, a)
		}
	}
	if len(p.acts) == 0 {
		p.acts = []string{simPointActs[rng.IntN(len(simPointActs))]}
	}
	if lr := f.rngFor("points", ptListSessions); lr.IntN(2) == 0 {
		p.odds[ptListSessions] = (0.05 + 0.45*lr.Float64()) / 10
	}
	if qr := f.rngFor("points", "quorum"); f.shape.quorum > 0 && qr.IntN(2) == 0 {
		p.quorumOdds = 0.05 + 0.45*qr.Float64()
	}
	return p
}

// left is how long the storm now in force has before its calm, less a
// margin for the effects to end (0: not in a storm); and the calm's time
// from the fleet's start. The first storm begins as the fleet starts
// (sim.NewPlan).
func (p *simPoints) left() (time.Duration, time.Duration) {
	now := time.Since(p.f.begin)
	for _, st := range p.f.plan {
		if now >= st.Start && now < st.Calm {
			return max(0, st.Calm-10*time.Second-now), st.Calm
		}
	}
	return 0, 0
}

// transport is incarnation inc of lane l's transport to storage, next,
// with the points in front.
func (p *simPoints) transport(l *simLane, inc int, next policy.Transporter) policy.Transporter {
	if len(p.odds) == 0 && p.quorumOdds == 0 {
		return next
	}
	return &simPointTransport{p: p, l: l, inc: inc, next: next, rng: p.f.rngFor("points", l.name)}
}

type simPointTransport struct {
	p    *simPoints
	l    *simLane
	inc  int
	next policy.Transporter

	mu  sync.Mutex
	rng *rand.Rand
}

// draw decides whether point fires now, and with what.
func (t *simPointTransport) draw(point string) (string, time.Duration, time.Duration) {
	odds, ok := t.p.odds[point]
	left, calm := t.p.left()
	if !ok || left < time.Second {
		return "", 0, 0
	}
	if t.p.shaken() {
		odds = min(1, odds*simShockOdds)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rng.Float64() >= odds {
		return "", 0, 0
	}
	act := t.p.acts[t.rng.IntN(len(t.p.acts))]
	d := time.Second + time.Duration(t.rng.Int64N(int64(min(left, 2*t.p.f.shape.native)-time.Second)+1))
	return act, d, calm
}

// target is the service, container and blob req names: the fleet's, or,
// for a quorum's contender (sim_quorum_test.go), an account's, whose index
// is account (else -1); svc is nil for a request of a container.
func (t *simPointTransport) target(req *http.Request) (svc *memblob.Service, container, name string, account int) {
	p, _ := url.PathUnescape(req.URL.Path)
	rest, _ := strings.CutPrefix(p, "/"+memblob.AccountName+"/")
	c, name, ok := strings.Cut(rest, "/")
	switch q := t.p.f.quorum; {
	case !ok || name == "":
	case c == simContainer:
		return t.p.f.svc, c, name, -1
	case q != nil && t.l.kind == laneNative:
		for i := range q.k {
			if c == q.container(i) {
				return q.svcs[i], c, name, i
			}
		}
	}
	return nil, "", "", -1
}

// simRequestBlob is the blob a request names, "" for a container's.
func simRequestBlob(req *http.Request) string {
	p, _ := url.PathUnescape(req.URL.Path)
	name, ok := strings.CutPrefix(p, "/"+memblob.AccountName+"/"+simContainer+"/")
	if !ok {
		return ""
	}
	return name
}

// simHeader is h's value for key, whatever case it was set under (the
// SDK sets its x-ms- headers in lower case, outside Header.Set).
func simHeader(h http.Header, key string) string {
	for k, v := range h {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// point is the protocol point req marks, or "", and the quorum's account
// it is sent to (-1: the fleet's service).
func (t *simPointTransport) point(req *http.Request) (string, int) {
	if q := req.URL.Query(); req.Method == http.MethodGet && q.Get("comp") == "list" &&
		strings.HasPrefix(q.Get("prefix"), simPrefix+"/"+wire.SessionsDir) {
		return ptListSessions, -1
	}
	svc, container, name, account := t.target(req)
	if svc == nil {
		return "", -1
	}
	return t.pointOn(req, svc, container, name), account
}

// pointOn is point, of a request to blob name in container on svc.
func (t *simPointTransport) pointOn(req *http.Request, svc *memblob.Service, container, name string) string {
	switch simHeader(req.Header, "x-ms-lease-action") {
	case "acquire":
		if st, ok := svc.Blob(container, name); ok && storedValue(st.Metadata, wire.MetaRecreated) != "" {
			return ptRecreated
		}
		return ptAcquire
	case "renew":
		return ptRenewal
	case "change":
		return ptChange
	case "release":
		return ptRelease
	case "break":
		return ptBreak
	}
	if req.Method != http.MethodPut {
		return ""
	}
	switch {
	case req.URL.Query().Get("comp") == "metadata" && strings.HasPrefix(name, simPrefix+"/"+wire.SessionsDir):
		if simHeader(req.Header, "x-ms-meta-"+wire.MetaEnded) != "" {
			return ptEndMark
		}
		return ptSessionRecord
	case req.URL.Query().Get("comp") == "metadata":
		term := simHeader(req.Header, "x-ms-meta-"+wire.MetaTerm)
		if st, ok := svc.Blob(container, name); ok && term != "" && term == storedValue(st.Metadata, wire.MetaTerm) &&
			storedValue(st.Metadata, wire.MetaEnded) == "" {
			return ptRenewal
		}
		if term != "" {
			return ptRecord
		}
	case req.URL.Query().Get("comp") == "" && strings.HasPrefix(name, simPrefix+"/"+wire.HandoffDir):
		return ptNote
	case req.URL.Query().Get("comp") == "" && strings.HasPrefix(name, simPrefix+"/"+wire.HeldDir):
		if simLastList(svc, container, name) {
			return ptEndList
		}
		return ptHeld
	}
	return ""
}

// simLastList reports whether name is a session's last list: its held
// list, whose session's blob is not leased. A session's last list, written
// once it ended and released its lease (endSession), names the shards it
// released: between its death and its survivors' reading of it. The
// session's record is gone if its blob was collected, or the container
// deleted.
func simLastList(svc *memblob.Service, container, name string) bool {
	held, ok := strings.CutPrefix(name, simPrefix+"/"+wire.HeldDir)
	if !ok {
		return false
	}
	st, ok := svc.Blob(container, wire.SessionBlob(simPrefix+"/", held))
	return ok && st.LeaseState != "leased"
}

// Do sends req on, and, if it marks a point that fires, strikes.
func (t *simPointTransport) Do(req *http.Request) (*http.Response, error) {
	point, account := t.point(req)
	if point == ptRecord && account >= 0 {
		t.accountDown(account)
	}
	resp, err := t.next.Do(req)
	if point == "" || err != nil || resp.StatusCode/100 != 2 {
		return resp, err
	}
	if point == ptEndList {
		t.p.f.met("a session's last list written", 1)
	}
	act, d, calm := t.draw(point)
	if act == "" || act == "other writer" && account >= 0 {
		// The other writer writes the fleet's container, not a quorum's
		// accounts.
		return resp, err
	}
	switch act {
	case "lose the answer":
		if t.mayStrike(point, act, d) {
			return t.lose(req, resp, syscall.ECONNRESET)
		}
	case "answer late":
		if t.mayStrike(point, act, d) {
			select {
			case <-time.After(d):
			case <-req.Context().Done():
				return t.lose(req, resp, req.Context().Err())
			}
		}
	default:
		t.strike(point, act, d, calm, simRequestBlob(req))
	}
	return resp, err
}

// mayStrike reports whether point strikes lane t.l with act now, and if
// so counts and traces it: a cut is held back as a planned partition
// is (mayCut).
func (t *simPointTransport) mayStrike(point, act string, d time.Duration) bool {
	f, l := t.p.f, t.l
	if (act == "cut" || act == actCutDelete) && !f.mayCut(l) {
		// The fault model's rule for a planned partition holds here too:
		// the last live witness of a deleted election that reaches
		// storage is not cut off before a seed at or above its last term
		// (once cut, it no longer counts as one, so nothing else would
		// keep it from being stopped, leaving nobody to seed the blob).
		return false
	}
	f.count("point "+point+": "+act, 1)
	f.trace.printf(time.Now(), "lane%d: point %q: %s (%v)", l.idx, point, act, d)
	t.p.aftershock()
	return true
}

// strike acts on the process (or, for the other writer, on blob) at
// point, with act (not one of a request's own: its answer lost or late),
// if mayStrike lets it.
func (t *simPointTransport) strike(point, act string, d, calm time.Duration, blob string) {
	if !t.mayStrike(point, act, d) {
		return
	}
	f := t.p.f
	switch act {
	case "crash":
		t.crash(d)
	case actStop:
		t.kill(cmdStop, sim.Kind("stop at a point"), d)
	case actCrashDelete:
		if t.crash(d) {
			t.deleteContainer()
		}
	case "restart now":
		// A process a point crashed starts again now (drawn among them),
		// not when its crash was to end.
		t.p.mu.Lock()
		var down []*simLane
		for o := range t.p.down {
			down = append(down, o)
		}
		slices.SortFunc(down, func(a, b *simLane) int { return a.idx - b.idx })
		if len(down) > 0 {
			t.mu.Lock()
			o := down[t.rng.IntN(len(down))]
			t.mu.Unlock()
			close(t.p.down[o])
			delete(t.p.down, o)
		}
		t.p.mu.Unlock()
	case actCutDelete:
		t.mu.Lock()
		longest := max(f.shape.native, f.shape.etag, f.shape.session)
		d = time.Second + time.Duration(t.rng.Int64N(int64(max(time.Second, min(calm-10*time.Second-time.Since(f.begin), 2*longest)-time.Second))))
		t.mu.Unlock()
		t.cut(d)
		if !t.deleteContainer() {
			t.deleteWhileCut(d)
		}
	case "cut":
		t.cut(d)
	case "other writer":
		t.mu.Lock()
		r := rand.New(rand.NewPCG(t.rng.Uint64(), t.rng.Uint64()))
		t.mu.Unlock()
		f.actors.writer.act(r, blob, calm)
	}
}

// beginsToRun is the point at which a session of this process begins to
// run shards (ptFirstRun): its first shard func, about to start on blob
// (a claim's, a take-back's, or an adoption of a shard another session
// handed it), drawn with the point's odds; the process is struck there
// as at a request's point, but for the actions on a request's answer,
// which strike nothing here.
func (t *simPointTransport) beginsToRun(session, blob string) {
	if !t.p.firstRun(session) {
		return
	}
	act, d, calm := t.draw(ptFirstRun)
	if act == "" || act == "lose the answer" || act == "answer late" {
		return
	}
	t.strike(ptFirstRun, act, d, calm, blob)
}

// accountDown is a quorum's point (ptAccountDown) at a term's record sent
// to account i: as it fires, with its odds, the account goes down before
// the record reaches it, for a time drawn as a point's effect (within the
// storm), as a planned "account down" does.
func (t *simPointTransport) accountDown(i int) {
	left, _ := t.p.left()
	if t.p.quorumOdds == 0 || left < time.Second {
		return
	}
	t.mu.Lock()
	fire := t.rng.Float64() < t.p.quorumOdds
	d := time.Second + time.Duration(t.rng.Int64N(int64(min(left, 2*t.p.f.shape.native)-time.Second)+1))
	t.mu.Unlock()
	if !fire {
		return
	}
	f := t.p.f
	f.count("point "+ptAccountDown, 1)
	f.trace.printf(time.Now(), "lane%d: point %q: account %d down (%v)", t.l.idx, ptAccountDown, i, d)
	f.quorum.downFor(i, d)
}

// crash crashes the process, unless the fault model holds it back (or
// it has ended), and starts it again d later, or at a "restart now"; it
// reports whether it crashed it.
func (t *simPointTransport) crash(d time.Duration) bool {
	return t.kill(cmdCrash, sim.Kind("crash at a point"), d)
}

// kill is crash, by cmd (a crash or a stop), counted as kind.
func (t *simPointTransport) kill(cmd laneCmd, kind sim.Kind, d time.Duration) bool {
	f, l := t.p.f, t.l
	if !f.killIf(l, cmd, kind, func() bool { return l.runs(t.inc) }) {
		return false
	}
	now := make(chan struct{})
	t.p.mu.Lock()
	t.p.down[l] = now
	t.p.mu.Unlock()
	f.wg.Go(func() {
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(d):
		case <-now:
		}
		t.p.mu.Lock()
		delete(t.p.down, l)
		t.p.mu.Unlock()
		f.revive(l)
	})
	return true
}

// deleteContainer deletes the container now, if the fault model lets it
// (deletable), and reports whether it did.
func (t *simPointTransport) deleteContainer() bool {
	deleted, _ := t.tryDelete(true, "delete-container at a point", "deleted the container")
	return deleted
}

// tryDelete deletes the container if the fault model lets it now
// (deletableCounting, its hold-backs counted if count), and counts and
// traces it so; allowed says whether the model let it (a deletion that
// then failed is not tried again).
func (t *simPointTransport) tryDelete(count bool, counted, traced string) (deleted, allowed bool) {
	f := t.p.f
	targets := f.ran()
	if !f.deletableCounting(targets, count) {
		return false, false
	}
	if f.svc.DeleteContainer(simContainer) != nil {
		f.undelete(targets)
		return false, true
	}
	f.count(counted, 1)
	f.trace.printf(time.Now(), "%s", traced)
	return true, true
}

// deleteWhileCut tries again, every 250 ms while the cut of d lasts, a
// deletion of the container that the fault model held back at the point
// (actCutDelete); the hold-back was counted once, at the point.
func (t *simPointTransport) deleteWhileCut(d time.Duration) {
	f := t.p.f
	end := time.Now().Add(d)
	f.wg.Go(func() {
		for time.Now().Before(end) {
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			traced := fmt.Sprintf("lane%d: deleted the container, later in its cut", t.l.idx)
			if _, allowed := t.tryDelete(false, "delete-container later in a cut at a point", traced); allowed {
				return
			}
		}
	})
}

// cut cuts the process's path to storage for d.
func (t *simPointTransport) cut(d time.Duration) {
	f, l := t.p.f, t.l
	l.mu.Lock()
	l.cut++
	l.applyLocked()
	l.mu.Unlock()
	f.wg.Go(func() {
		select {
		case <-f.ctx.Done():
		case <-time.After(d):
		}
		l.mu.Lock()
		l.cut--
		l.applyLocked()
		l.mu.Unlock()
	})
}

// lose drops resp, and answers req with err instead.
func (t *simPointTransport) lose(req *http.Request, resp *http.Response, err error) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, &url.Error{Op: req.Method, URL: req.URL.String(), Err: err}
}

// restart is the point at the start of lane l's process with its lease
// ID file (not its first): the other writer acts on the blob the file
// names (a ShardOwner's session, or the mutex's blob), just before, with a
// lease action under the file's ID, as a stale twin of the process (or a
// script given the file) would.
func (p *simPoints) restart(l *simLane) {
	odds, ok := p.odds[ptRestart]
	left, calm := p.left()
	if !ok || l.file == "" || l.inc <= 1 || left < time.Second {
		return
	}
	rng := p.f.rngFor("restart", l.name)
	if rng.Float64() >= odds {
		return
	}
	b, err := os.ReadFile(l.file)
	id := strings.TrimSpace(string(b))
	if err != nil || id == "" {
		return
	}
	blob := simNativeBlob
	switch l.kind {
	case laneETag:
		blob = simETagBlob
	case laneShard:
		blob = wire.SessionBlob(simPrefix+"/", id)
	}
	if l.kind != laneShard {
		// As the process before it proposed it, or a script would.
		ids := p.f.fileIDs(l, id)
		id = ids[rng.IntN(len(ids))]
	}
	p.f.count("point "+ptRestart+": other writer", 1)
	simWriterCall{simWriter: p.f.actors.writer, r: rng}.actAs(blob, calm, id)
}

// ranAgain reports whether a func of term starting now on election runs
// it again since its deletion (if it is pending): not if its term was
// recorded before the deletion, or at the same instant (a point may strike
// between a term's record and its func's start). Under f.mu.
func (f *simFleet) ranAgain(election string, term int64) bool {
	at, pending := f.pending[election]
	rec := f.lastRecord[election]
	return !pending || rec.term != term || rec.at.After(at)
}

// The point at which a session begins to run shards strikes that
// session's own process, as its first shard func starts, also when the
// shard came by a handover, whose record the giver wrote: a fleet with
// only that point, at full odds, and only a cut (which the trace names)
// strikes, each time, the lane whose func starts at that instant, among
// them sessions that adopted their first shard from a note.
func TestSimFirstRunStrikesTheSessionBeginningToRun(t *testing.T) {
	struck, adopted := 0, 0
	for _, seed := range []uint64{6, 8, 14} { // rolling, tuned, tuned (storms usual): sessions adopt their first shard in their storms
		synctest.Test(t, func(t *testing.T) {
			dir, err := leaseIDDir()
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			f := newSimFleet(seed, simShapeFor(seed, 30*time.Minute), dir, false, t)
			f.actors.points.odds = map[string]float64{ptFirstRun: 1}
			f.actors.points.acts = []string{"cut"}
			f.run()
			es := f.trace.entries
			for i, en := range es {
				lane, rest, _ := strings.Cut(en.text, ": ")
				if !strings.HasPrefix(rest, fmt.Sprintf("point %q: cut", ptFirstRun)) {
					continue
				}
				struck++
				j := slices.IndexFunc(es[i+1:], func(e simEntry) bool { return strings.Contains(e.text, " func starts on ") })
				if j < 0 {
					t.Fatalf("seed %d, %s: %s, and no func started after it", seed, en.at.Format("15:04:05.000"), en.text)
				}
				start := es[i+1+j]
				if name, _, _ := strings.Cut(start.text, " "); !strings.HasPrefix(name, lane+".") || !start.at.Equal(en.at) {
					t.Fatalf("seed %d, %s: %s, but the func that started next was %s's, at %s", seed, en.at.Format("15:04:05.000"), en.text, name, start.at.Format("15:04:05.000"))
				}
				for k := i - 1; k >= 0 && es[k].at.Equal(en.at); k-- {
					if es[k].log != nil && strings.HasPrefix(es[k].text, lane+".") && strings.Contains(es[k].log.Message, "read notes of shards handed to this session") {
						adopted++
						break
					}
				}
			}
		})
	}
	t.Logf("%d sessions struck as they began to run shards, %d of them adopting a shard handed to them", struck, adopted)
	if adopted == 0 {
		t.Fatal("no session struck as it adopted its first shard: the test shows nothing")
	}
}

// An aftershock lasts two of the fleet's longest RetryIntervals from the
// strike that started it, and a strike within it does not make it last
// longer.
func TestSimAftershockLastsTwoRetryIntervals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &simPoints{f: &simFleet{shape: simShape{retry: 2 * time.Second, shardRetry: 3 * time.Second}}}
		assert.False(t, p.shaken(), "before any strike")
		p.aftershock()
		time.Sleep(5 * time.Second)
		assert.True(t, p.shaken(), "within 6 s of the strike")
		p.aftershock() // a strike within it
		time.Sleep(time.Second)
		assert.False(t, p.shaken(), "6 s after the first strike, whatever struck within it")
		p.aftershock()
		assert.True(t, p.shaken(), "a strike after it starts another")
	})
}
