package leaderelection

import (
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/blobelect/leaderelection/internal/sim"
	"github.com/blobelect/leaderelection/internal/wire"
)

// The simulator's fault model (see sim_test.go): what the driver holds
// back around deletions, the kills and starts it allows, and the bounds
// within which every election must run again after a storm.

// The fault model around deletions. A blob or the container deleted under
// a running fleet is within the library's promise but for what its
// argument names as not covered (renew.go: "What cannot be kept: a blob
// deleted while no instance that saw its terms runs, or created again
// first by one that never saw them; and, as the wait for a blob created
// again is a time, a deletion whose only witnesses of the last term get no
// raise onto the blob created again ... before its creator's wait is
// over"; shardfloors.go's "What is not covered": an instance that never saw
// the fleet before the deletion, a process started after it or whose first
// session had not yet written its record then, which may claim a blob
// created again at once, continuing from what is seeded; recreated.go, the
// same for a mutex's blob), which docs/limits.md states as "The count of
// terms restarts if no instance saw it". The driver holds back exactly
// those (each hold-back names that section: sim_limits_test.go), and
// nothing more:
//
//   - a deletion happens only while every live process of the elections
//     it hits has seen the fleet (a mutex contender has read a term on its
//     blob, not only a malformed record; a ShardOwner's session has stored
//     its record and listed the sessions), and each election it hits that ever ran, or carried a
//     term's record, has a live witness of its last term that reaches
//     storage (see witness and reaches), and, for a mutex, a live contender other than
//     its holder that read its record (see reader: whoever takes the blob
//     created again waits out the lease that record declares only if one
//     raises the seed).
//     A deletion may hit an election deleted before that has not run since
//     (its witnesses are then those of the deletion before that still
//     live), and a blob whose record, made malformed, awaits its repair;
//   - from a deletion until each election it hit runs again (pending), no
//     new process of that election's kind starts before its blob is
//     created again (for a ShardOwner, before it carries a seed at or
//     above its last term: a process started after the deletion claims a
//     blob created again at once, continuing from its seed; but one
//     restarted with its lease ID file while the container is still gone
//     sees the deletion as it reads its session, and starts: see
//     resumesAcross), and the last
//     live witness of a pending election that reaches storage is not
//     crashed, stopped or cut off, nor put under a fault that fails its
//     requests (see reaches), before a seed at or above its last term
//     is on the blob (limits.md: "if the instances that saw the last term
//     cannot reach storage for all of it"); for a ShardOwner,
//     only the shards of a set count (a shard out of every set is claimed
//     by nobody), and a shard still pending comes back into a set only
//     while every live ShardOwner saw the fleet before its deletion (else
//     it is left out);
//   - a shard's blob is deleted alone only while every live ShardOwner saw
//     its terms (ran it, read it, or listed the shards while it carried
//     one): nobody sees such a deletion, and one that never saw its terms
//     creates it again unmarked and records 1 (renew.go: "created again
//     first by one that never saw them").
//
// A deletion's storm may crash, stop and cut off processes like any other.

// witness reports whether l's current process is a witness of election
// e's last term: the process that ran it, or the process that wrote that
// term's record, whether or not a func ran under it (its answer lost, or
// a shard's handover, whose record its giver writes and its receiver
// runs): limits.md, "an instance that sent a term's record counts as one
// that saw it" (it seeds and raises a blob created again with the term it
// proposed: termFloor.seed for a mutex, seedOf for a shard, as it notes
// each term it sends, proposeTerm); or, for a mutex, a contender that
// read the blob after that term began (every contender reads it each R);
// for a shard, a process whose session's record published a highest term
// seen at least as high as any run or recorded there (its instance's
// seenMax, which a claimer of a blob created again goes above). Under
// f.mu.
func (f *simFleet) witness(l *simLane, e string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.alive || l.kind != f.kindOf(e) {
		return false
	}
	if _, pending := f.pending[e]; pending {
		// Deleted before, and not run since: a read of the blob created
		// again shows a seed, which may be below the last term until a
		// witness raised it.
		return f.witnesses[e][[2]int{l.idx, l.inc}]
	}
	run, ran := f.lastRun[e]
	rec, recorded := f.lastRecord[e]
	if recorded && (!ran || rec.term > run.term) {
		run, ran = rec, true // a term recorded since, that never ran
	}
	if ran && run.lane == l.idx && run.inc == l.inc || recorded && rec.term == run.term && rec.lane == l.idx && rec.inc == l.inc {
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

// ran is every election a func ran on, or a term was recorded on (whose
// func may not have started yet: a point may strike between a term's
// record and its func), as "container/blob".
func (f *simFleet) ran() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	all := maps.Clone(f.lastRun)
	maps.Copy(all, f.lastRecord)
	// Not a quorum's (sim_quorum_test.go): its accounts are not the fleet's service.
	return slices.DeleteFunc(slices.Sorted(maps.Keys(all)), func(e string) bool { return !strings.HasPrefix(e, simContainer+"/") })
}

// deletable reports whether a deletion of the elections targets (each ran
// before) stays within the promise now (see above), and if so marks them
// pending: the caller deletes them at once, or, if that fails, undoes the
// marks (undelete).
func (f *simFleet) deletable(targets []string) bool { return f.deletableCounting(targets, true) }

// deletableCounting is deletable, its hold-backs counted if count (a retry
// of one already counted counts none).
func (f *simFleet) deletableCounting(targets []string, count bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	kinds := map[laneKind]bool{}
	for _, e := range targets {
		kinds[f.kindOf(e)] = true
	}
	for _, l := range f.lanes {
		l.mu.Lock()
		unseen := l.alive && kinds[l.kind] && (l.seenAt.IsZero() || l.starting || l.booting > 0)
		for _, e := range targets {
			// A mutex contender that never read a term of its blob (it
			// read only a malformed record) takes it at once if it
			// creates it again.
			unseen = unseen || l.alive && l.kind != laneShard && l.kind == f.kindOf(e) && f.termedOnce(e) && !l.sawShard[e]
		}
		l.mu.Unlock()
		if unseen {
			if count {
				f.hold(holdUnseen)
			}
			return false
		}
	}
	for _, e := range targets {
		if f.termedOnce(e) && !slices.ContainsFunc(f.lanes, func(l *simLane) bool { return f.witness(l, e) && f.reaches(l) }) {
			if count {
				f.hold(holdNoWitness)
			}
			return false
		}
		if f.kindOf(e) != laneShard && f.termedOnce(e) && !slices.ContainsFunc(f.lanes, func(l *simLane) bool { return f.reader(l, e) }) {
			if count {
				f.hold(holdNoReader)
			}
			return false
		}
	}
	if len(targets) == 1 && f.kindOf(targets[0]) == laneShard {
		// A shard's blob deleted alone: no session sees that (no quiet,
		// no seeds from those that did not see it gone), and one that
		// never saw its terms would create it again unmarked, from 1.
		for _, l := range f.lanes {
			l.mu.Lock()
			unseen := l.alive && l.kind == laneShard && !l.sawShard[targets[0]]
			l.mu.Unlock()
			if unseen {
				if count {
					f.hold(holdShardSeen)
				}
				return false
			}
		}
	}
	f.madeDeletion(targets)
	now := time.Now()
	for _, e := range targets {
		f.repaired[simDeleted(e)] = now // see expectRecovery
		if f.termedOnce(e) {
			at, was := f.pending[e]
			f.before[e] = simBefore{pending: was, at: at, witnesses: f.witnesses[e], info: f.pendings[e]}
			ws := map[[2]int]bool{}
			for _, l := range f.lanes {
				if f.witness(l, e) {
					l.mu.Lock()
					ws[[2]int{l.idx, l.inc}] = true
					l.mu.Unlock()
				}
			}
			f.pending[e], f.witnesses[e] = now, ws
			f.pendings[e] = simPending{at: now, term: f.chk.MaxTerm(e)}
		}
	}
	return true
}

// simBefore is what the fault model knew of an election before a
// deletion it marked (deletable), for undelete.
type simBefore struct {
	pending   bool
	at        time.Time
	witnesses map[[2]int]bool
	info      simPending
}

// undelete undoes deletable's marks of targets, whose deletion failed.
func (f *simFleet) undelete(targets []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range targets {
		b, ok := f.before[e]
		if !ok {
			continue
		}
		delete(f.before, e)
		if !b.pending {
			delete(f.pending, e)
			delete(f.witnesses, e)
			continue
		}
		f.pending[e], f.witnesses[e], f.pendings[e] = b.at, b.witnesses, b.info
	}
}

// termedOnce reports whether a func ran on election e, or a term was
// recorded there. Under f.mu.
func (f *simFleet) termedOnce(e string) bool {
	_, ran := f.lastRun[e]
	_, recorded := f.lastRecord[e]
	return ran || recorded
}

// mayStart reports whether a new process of l's kind may start now: no
// election of that kind, in a set, is pending with its blob not created
// again (a shard's: not seeded at or above its last term). Under f.mu.
func (f *simFleet) mayStart(l *simLane) bool {
	across := false
	for e := range f.pending {
		if f.kindOf(e) != l.kind || !f.inSets(e) {
			continue
		}
		if p := f.pendings[e]; !p.created || l.kind == laneShard && !p.seeded {
			if across = f.resumesAcross(l); across {
				continue
			}
			return false
		}
	}
	if across {
		f.made["a restart with its lease ID file while the container is deleted, not created again"]++
	}
	return true
}

// resumesAcross reports whether l's next process, a ShardOwner's with its
// lease ID file, may start while the container is deleted and not created
// again: its resume reads its session's blob first, finds the container
// gone, and so has seen the deletion (sessionfile.go: sawDeletion; a
// process started after a deletion that finds the container there again
// is the limit, "A deletion no running instance saw", which holdStart
// keeps). Only while no fault of the lane's delays or drops that read, so
// that it is made before another instance creates the container again, in
// the same instant of the bubble's clock; and only once its last process
// has returned (a crashed process's funcs may run on, and its successor
// starts only then: seed 632938940044 at f62ac99 started 19 s after the
// container was created again, and never saw the deletion). Under f.mu.
func (f *simFleet) resumesAcross(l *simLane) bool {
	if l.kind != laneShard || l.file == "" || !f.actors.noContainer.Load() || f.actors.procs[l.idx].Load() {
		return false
	}
	if b, err := os.ReadFile(l.file); err != nil || strings.TrimSpace(string(b)) == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut > 0 || len(l.slow) > 0 || len(l.rates) > 0 || l.replaced {
		// (Replaced: its pod was, and its next process starts without
		// the file: replacePod.)
		return false
	}
	return true
}

// mayKill reports whether l's process may be crashed or stopped now: it is
// not the last live witness of a pending election whose blob carries no
// seed at or above its last term yet. Under f.mu.
func (f *simFleet) mayKill(l *simLane) bool {
	unseeded, seeded := f.lastWitness(l)
	if !unseeded && seeded {
		f.made["a crash or stop of the last live witness of a deleted election, let through after a seed above its last term"]++
	}
	return !unseeded
}

// lastWitness reports whether l's process is the last live witness that
// reaches storage (see reaches) of a pending election whose blob carries
// no seed at or above its last term (unseeded), or of one whose blob does
// (seeded). Under f.mu.
func (f *simFleet) lastWitness(l *simLane) (unseeded, seeded bool) {
	alive := func(o *simLane, ws map[[2]int]bool) bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.alive && o.reachesLocked() && ws[[2]int{o.idx, o.inc}]
	}
	for e := range f.pending {
		ws := f.witnesses[e]
		if !alive(l, ws) || slices.ContainsFunc(f.lanes, func(o *simLane) bool { return o != l && alive(o, ws) }) {
			continue
		}
		if f.pendings[e].seeded {
			seeded = true
		} else {
			unseeded = true
		}
	}
	return unseeded, seeded
}

// mayCut reports whether l may be cut off from storage now: it is not the
// last live witness that reaches storage of a pending election whose blob
// carries no seed at or above its last term (limits.md: "if the instances
// that saw the last term cannot reach storage for all of it [the wait]").
func (f *simFleet) mayCut(l *simLane) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if unseeded, _ := f.lastWitness(l); unseeded {
		f.hold(holdCut)
		return false
	}
	return true
}

// mayFail reports whether a fault of kind k, one that fails a share of
// l's requests (failsRequests), may be put on l now: as mayCut, for the
// same limit. A witness whose requests fail cannot reach storage while
// they do: its seed, or the session record that publishes the highest
// term it saw, waits for a chain of requests (a new session's blob, its
// lease and record, a listing, the seeds) that each fault may break, and
// each break costs it a backoff; the wait of whoever takes a blob created
// again is a time all the same (seed 955950980412 at 8498ea7: the last
// witness of five shards' terms, its requests failing at a rate of 0.76,
// seeded none of them within the 28 s quiet of a ShardOwner restarted
// across the deletion, which then recorded terms 1 to 5 on them, below
// terms 3 to 6).
func (f *simFleet) mayFail(l *simLane, k sim.Kind) bool {
	if !failsRequests(k) {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if unseeded, _ := f.lastWitness(l); unseeded {
		f.hold(holdFail)
		return false
	}
	return true
}

// failsRequests reports whether a fault of kind k fails a share of a
// lane's requests as its process sees them: refused (failing, throttled),
// or unanswered (answers lost, requests applied late, past their
// timeout). A slow lane's requests are answered; a crash in a step is a
// crash (mayKill).
func failsRequests(k sim.Kind) bool {
	switch k {
	case sim.Failing, sim.Throttle, sim.LoseAnswers, sim.Late:
		return true
	}
	return false
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
				f.hold(holdKeepOut)
				return true
			}
		}
		return false
	})
}

// kill crashes or stops l's process (cmd), unless the fault model holds
// it back; it reports whether it did.
func (f *simFleet) kill(l *simLane, cmd laneCmd, kind sim.Kind) bool {
	return f.killIf(l, cmd, kind, nil)
}

// killIf is kill, if also cond (unless nil), asked under l.mu in the same
// step as the fault model's leave and the process's end, says yes.
func (f *simFleet) killIf(l *simLane, cmd laneCmd, kind sim.Kind, cond func() bool) bool {
	f.mu.Lock()
	if !f.mayKill(l) {
		f.hold(holdWitness)
		f.mu.Unlock()
		return false
	}
	l.mu.Lock()
	if cond != nil && !cond() {
		l.mu.Unlock()
		f.mu.Unlock()
		return false
	}
	l.down++
	wasAlive := l.alive
	l.alive = false
	l.mu.Unlock()
	f.mu.Unlock()
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
			l.alive, l.born = true, time.Now()
			l.booting++
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
	f.hold(holdStart)
	f.mu.Unlock()
	f.wg.Go(func() {
		for {
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if try() {
				// A fault the model held on: the recovery of the
				// elections of its kind is timed from here if later than
				// the calm (expectRecovery).
				f.mu.Lock()
				f.repaired[simStartedLate(l.kind)] = time.Now()
				f.mu.Unlock()
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
			f.undelete([]string{election}) // not deleted after all
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

// simStartedLate is the key of f.repaired under which startLane notes when
// a process of kind k held back (holdStart) started at last.
func simStartedLate(k laneKind) string { return fmt.Sprintf("started late: %d", k) }

// simDeleted is the key of f.repaired under which deletable notes when
// election e was last deleted.
func simDeleted(e string) string { return "deleted: " + e }

// bound is how long after a calm began election must run again (see
// sim_test.go's doc of the bounds), with D, R, T, SM and RI the longest
// among the election's instances (their LeaseDuration, RetryInterval,
// RequestTimeout, StopMargin, RenewInterval: shape.longest) and B =
// max(R, min(D, 1 min)), the most a follower backs off (mutex.go's and
// shards.go's maxBackoff).
func (f *simFleet) bound(election string) (time.Duration, string) {
	if election == simQuorumElection {
		return f.quorum.bound()
	}
	sh := f.shape
	f.mu.Lock()
	_, pending := f.pending[election]
	f.mu.Unlock()
	kind := f.kindOf(election)
	s := sh.longest(kind)
	d, r, t, ri := s.LeaseDuration, s.RetryInterval, s.RequestTimeout, s.RenewInterval
	backoff := max(r, min(d, maxLeaseDuration))
	if kind != laneShard {
		name := map[laneKind]string{laneNative: "native", laneETag: "ETag"}[kind]
		b, why := 2*d+backoff*5/4+2*t+r, name+" mutex: 2 D + 1.25 B + 2 T + R"
		if pending {
			// Deleted, and not run since: the blob created again stands
			// its settle time (recreated.go) as a contender watched it,
			// from the calm at the latest.
			b, why = b+ri+t+s.StopMargin+2*r, why+" + RI + T + SM + 2 R (created again)"
		}
		return b, why
	}
	stray := 2*sh.strayAfter + d + r
	if sh.strayAfter == 0 {
		stray = 2*2*strayAfter + d + r
	}
	return 4*d + backoff*5/4 + 3*t + 3*r + 4*(ri+2*r) + stray, "shard: 4 D + 1.25 B + 3 T + 3 R + 4 (RI + 2 R) + 2 S + D + R"
}
