package leaderelection

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/stretchr/testify/assert"
)

// Only the stated limits held back (issue 38). The simulator's driver holds
// a fault back only where a section of the docs states that the library's
// promise does not cover the case; each hold-back names that section (by
// its heading), and the report counts them by it. simLimits says, for
// every section of docs/limits.md and docs/other-writers.md, how the
// simulator keeps it: by holding back (held: each such section has at
// least one hold-back), or because the simulator never makes the case, and
// why. TestSimHoldsNameTheStatedLimits fails when a hold-back names no
// section, when a section that limits the driver has none, and when a
// section is added to the docs without a line here.

// simHold is one case the driver holds back: the heading of the section
// that states the limit, and what is held back.
type simHold struct{ heading, what string }

func (h simHold) String() string { return h.heading + ": " + h.what }

const (
	headTerms      = "A deletion no running instance saw"
	headQuorumLoss = "A quorum's accounts that lose their data"
)

// The hold-backs (see sim_faultmodel_test.go for each rule).
var (
	holdNoWitness = simHold{headTerms, "a deletion while no live process that reaches storage is a witness of the last term of an election it hits"}
	holdNoReader  = simHold{headTerms, "a deletion of a mutex's blob whose last term's record no live contender but its holder read"}
	holdCut       = simHold{headTerms, "a partition of the last live witness of a deleted election before a seed above its last term"}
	holdFail      = simHold{headTerms, "a fault that fails the requests (failing, throttled, answers lost or late) of the last live witness of a deleted election that reaches storage, before a seed above its last term"}
	holdUnseen    = simHold{headTerms, "a deletion while a live process of a kind it hits has not seen the fleet"}
	holdShardSeen = simHold{headTerms, "a shard's blob deleted alone while a live ShardOwner never saw its terms"}
	holdStart     = simHold{headTerms, "a start while a deleted election of its kind is not created again (a shard's: not seeded above its last term), but a ShardOwner's with its lease ID file while the container is gone, which it sees"}
	holdWitness   = simHold{headTerms, "the crash or stop of the last live witness of a deleted election before a seed above its last term"}
	holdKeepOut   = simHold{headTerms, "a deleted shard back into a set while a live ShardOwner never saw the fleet before its deletion"}

	holdQuorumLoss = simHold{headQuorumLoss, "a container deleted or a record rolled back on an account, that would leave the highest term on fewer than K - Q + 1 accounts (those that meet every majority)"}
)

// simHolds are the hold-backs by name, as the driver's calls of hold name
// them.
var simHolds = map[string]simHold{
	"holdNoWitness": holdNoWitness, "holdUnseen": holdUnseen, "holdShardSeen": holdShardSeen,
	"holdStart": holdStart, "holdWitness": holdWitness, "holdKeepOut": holdKeepOut,
	"holdNoReader": holdNoReader, "holdCut": holdCut, "holdFail": holdFail, "holdQuorumLoss": holdQuorumLoss,
}

// simLimits says how the simulator keeps each section of the docs that
// states a limit: held (the driver holds back the cases it names), or how
// it never makes them.
var simLimits = []struct {
	doc, heading string
	held         bool
	how          string
}{
	{"limits.md", "Your func must honour its context", false, "every func (act) stops within 9/10 of StopMargin once its lease context ends"},
	{"limits.md", "A frozen process acts late", false, "no fault freezes a process: a crashed one's funcs see their context end at once"},
	{"limits.md", "Storage must keep what it acknowledged", false, "the in-memory service never forgets what it answered"},
	{"limits.md", "An ETag lease trusts the followers' clocks", true, "a fleet's processes share the bubble's clock; the other writer's break of a live ETag lease is held back (simWriterLimits)"},
	{"limits.md", "A break shortens the lease", true, "the driver's operator breaks only as BreakWhenSilent does, and never a shard's lease; the other writer's shortening breaks are held back (simWriterLimits)"},
	{"limits.md", "Storage is a single point of failure", false, "recovery is judged from a calm, when storage answers again"},
	{"limits.md", headQuorumLoss, true, ""},
	{"limits.md", headTerms, true, ""},
	{"limits.md", "A term written lower by hand is trusted", true, "the other writer's record below a term the fleet saw is held back (simWriterLimits; -sim.stale lets it happen)"},
	{"limits.md", "A lease ID file is sound on one host only", true, "a lane's processes use its file one after another (supervise); the other writer's acquire of a native lease under its holder's ID, infinite or shorter, is held back (simWriterLimits)"},
	{"limits.md", "The blob is reserved for the lease", false, "the driver writes the blobs only as the other writers of other-writers.md do"},
	{"limits.md", "Leadership is not fair", false, "no rule of the checker asks who leads"},
	{"limits.md", "Measured on Azurite, not Azure", false, "the in-memory service answers as Azurite does (its contract tests)"},
	{"other-writers.md", "Shared containers and other writers", false, "malformed records, repaired by an operator once the lease is free (leaderctl's rule), deletions under the limit above"},
}

// simWriterHeadings are the headings of docs/limits.md whose cases the
// other writer holds back (simWriterLimits: each cites its heading first,
// quoted).
func simWriterHeadings() []string {
	var out []string
	v := reflect.ValueOf(simWriterLimits)
	for i := range v.NumField() {
		if m := regexp.MustCompile(`^limits\.md "([^"]+)"`).FindStringSubmatch(v.Field(i).String()); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// hold counts a case held back. Under f.mu.
func (f *simFleet) hold(h simHold) { f.held[h.String()]++ }

func TestSimHoldsNameTheStatedLimits(t *testing.T) {
	headings := map[string][]string{}
	for _, doc := range []string{"limits.md", "other-writers.md"} {
		text, err := os.ReadFile(filepath.Join("docs", doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^#{1,2} (.+)$`).FindAllStringSubmatch(string(text), -1) {
			headings[doc] = append(headings[doc], m[1])
		}
	}
	listed := map[string]bool{}
	for _, l := range simLimits {
		listed[l.doc+"#"+l.heading] = true
		if !slices.Contains(headings[l.doc], l.heading) {
			t.Errorf("simLimits names %q, which is no heading of docs/%s", l.heading, l.doc)
		}
		named := slices.Contains(simWriterHeadings(), l.heading)
		for _, h := range simHolds {
			named = named || h.heading == l.heading
		}
		if l.held != named {
			t.Errorf("docs/%s %q: held %v, but the driver has hold-backs naming it: %v", l.doc, l.heading, l.held, named)
		}
	}
	for doc, hs := range headings {
		for i, h := range hs {
			if (doc == "limits.md" && i == 0) || listed[doc+"#"+h] {
				continue // limits.md's title
			}
			t.Errorf("docs/%s has the section %q, which simLimits does not say how the simulator keeps", doc, h)
		}
	}
	for name, h := range simHolds {
		ok := false
		for _, l := range simLimits {
			ok = ok || l.held && l.heading == h.heading
		}
		if !ok {
			t.Errorf("hold-back %s names %q, no held section of simLimits", name, h.heading)
		}
	}
	// Every call of hold names a hold-back of simHolds, and each is used.
	fset := token.NewFileSet()
	files, err := filepath.Glob("sim*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, name := range files {
		file, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "hold" || len(call.Args) != 1 {
				return true
			}
			id, ok := call.Args[0].(*ast.Ident)
			if _, known := simHolds[identName(id)]; !ok || !known {
				t.Errorf("%s: a hold-back that simHolds does not name", fset.Position(call.Pos()))
				return true
			}
			used[id.Name] = true
			return true
		})
	}
	for name := range simHolds {
		if !used[name] {
			t.Errorf("hold-back %s is never held back", name)
		}
	}
}

func identName(id *ast.Ident) string {
	if id == nil {
		return ""
	}
	return id.Name
}

// noteStored is the fault model's part of what the fake stored (stored):
// a pending election's blob created again, and a seed (or a record) on it
// at or above its last term, under the fake's lock. A term's record above
// its last term (the library's, naming its holder) ends its pending state,
// as a func's start does (act): its last term is that one now, whose
// witnesses are its recorder's and its readers' (witness), whether or not
// its func runs before another deletion (a point may cut its recorder off
// and delete the container between its record and its func).
func (f *simFleet) noteStored(e memblob.Event) {
	election := e.Container + "/" + e.Blob
	term, holder, ended := simRecord(e.Metadata)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.pending[election]; !ok {
		return
	}
	p := f.pendings[election]
	if e.Op == memblob.OpUpload {
		p.created = true
	}
	n, err := strconv.ParseInt(term, 10, 64)
	if err == nil && n >= p.term {
		p.seeded = true
	}
	f.pendings[election] = p
	if err == nil && n > p.term && holder != "" && !ended && !byWriter(e.Metadata) {
		delete(f.pending, election)
		delete(f.witnesses, election)
	}
}

// simPending is what the fault model knows of a deleted election until it
// runs again: when, its last term then, and whether its blob was created
// again, and seeded at or above that term.
type simPending struct {
	at              time.Time
	term            int64
	created, seeded bool
}

// readTerms is the mutex election a read of its blob by lane l (a mutex
// contender's) saw the terms of: its own, if its record carries a term that
// reads, none if it is malformed (a contender that read only that never saw
// its terms: renew.go's "created again first by one that never saw them").
func (f *simFleet) readTerms(l *simLane) []string {
	blob := simNativeBlob
	if l.kind == laneETag {
		blob = simETagBlob
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, bad := f.malformed[blob]; bad || !f.termed[simContainer+"/"+blob] {
		return nil
	}
	return []string{simContainer + "/" + blob}
}

// madeDeletion counts, as a deletion of targets is made, the cases in it
// that an older fault model held back, though no stated limit excludes
// them. Under f.mu.
func (f *simFleet) madeDeletion(targets []string) {
	again, malformed := false, len(f.malformed) > 0
	for _, e := range targets {
		_, p := f.pending[e]
		again = again || p && f.termedOnce(e)
	}
	if again {
		f.made["a deletion of an election deleted before and not run since"]++
	}
	if malformed {
		f.made["a deletion while a malformed record awaits its repair"]++
	}
}

// reaches reports whether l reaches storage now: it is not cut off (a
// partition), and no fault that fails its requests is in force
// (failsRequests). Under f.mu.
func (f *simFleet) reaches(l *simLane) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reachesLocked()
}

// reachesLocked is reaches, under l.mu.
func (l *simLane) reachesLocked() bool {
	if l.cut > 0 {
		return false
	}
	for _, ft := range l.rates {
		if failsRequests(ft.Kind) {
			return false
		}
	}
	return true
}

// reader reports whether l's process, a mutex contender, read the record
// of mutex election e's last term (a read of a term that reads, after that
// term began), and is not its holder: whoever takes the blob created again
// waits out the lease that record declares only if such a contender raises
// the seed (docs/limits.md: "a last term that no running instance read is
// waited out only as long as the leases they did read"). Under f.mu.
func (f *simFleet) reader(l *simLane, e string) bool {
	run, ran := f.lastRun[e]
	if rec, ok := f.lastRecord[e]; ok && (!ran || rec.term > run.term) {
		run, ran = rec, true
	}
	_, pending := f.pending[e]
	ws := f.witnesses[e]
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.alive || l.kind != f.kindOf(e) || ran && run.lane == l.idx && run.inc == l.inc {
		return false
	}
	if pending {
		// Deleted before, and not run since: the witnesses of that
		// deletion (see witness).
		return ws[[2]int{l.idx, l.inc}]
	}
	return l.sawShard[e] && !l.readAt.IsZero() && (!ran || l.readAt.After(run.at))
}

// A handover's record is written by its giver and run by its receiver:
// the giver sent the term's record, so it saw the term (limits.md, "A
// deletion no running instance saw": "an instance that sent a term's
// record counts as one that saw it"), and it seeds a blob created again
// with it (handoff.go's proposeTerm). So the fault model counts it as a
// witness of that term, as the receiver is, and not of a later one.
func TestSimTheSenderOfATermsRecordIsItsWitness(t *testing.T) {
	f := newSimFleet(1, defaultShape, t.TempDir(), false, t)
	e := simContainer + "/" + wire.ShardBlob(simPrefix+"/", f.set[0])
	var giver, receiver, other *simLane
	for _, l := range f.lanes {
		if l.kind != laneShard {
			continue
		}
		l.alive, l.inc = true, 1
		switch {
		case giver == nil:
			giver = l
		case receiver == nil:
			receiver = l
		default:
			other = l
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastRecord[e] = simRun{lane: giver.idx, inc: 1, term: 7}
	f.lastRun[e] = simRun{lane: receiver.idx, inc: 1, term: 7}
	assert.True(t, f.witness(receiver, e), "the receiver ran term 7")
	assert.True(t, f.witness(giver, e), "the giver sent term 7's record")
	assert.False(t, f.witness(other, e), "a third saw nothing")

	f.lastRun[e] = simRun{lane: other.idx, inc: 1, term: 8} // a claim of term 8, recorded by its own runner
	f.lastRecord[e] = simRun{lane: other.idx, inc: 1, term: 8}
	assert.False(t, f.witness(giver, e), "the giver of term 7 saw no term 8")
	giver.inc = 2
	f.lastRecord[e], f.lastRun[e] = simRun{lane: giver.idx, inc: 1, term: 9}, simRun{lane: receiver.idx, inc: 1, term: 9}
	assert.False(t, f.witness(giver, e), "a process started again did not send it")
}
