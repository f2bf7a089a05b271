package leaderelection

import (
	"math"
	"time"
)

// termMemory is what a ShardOwner knows of the shards' terms, and of the
// deletions of the container it may have missed, that its goroutines read
// and change under ownerState.mu: the floors of the terms it saw, the
// terms it proposed, and the quiet after a deletion (shardfloors.go). Its
// methods (why each is kept: the top of shardfloors.go) are called under
// ownerState.mu, by ownerState's (ownerstate.go), which take it.
type termMemory struct {
	floors      map[string]int64       // shard -> the highest term this instance saw on its blob (see termFloor)
	proposed    map[string]int64       // shard -> the highest term this instance sent a record of, answered or not (see proposeTerm)
	deletedFor  time.Duration          // the container was seen deleted under a session, and no session has begun its quiet since: how long it lasts (shardfloors.go)
	quietUntil  time.Time              // until when sessions claim nothing after that (shardfloors.go)
	seedPending bool                   // and the seeding of the terms it saw is not done yet
	gapSeen     bool                   // it saw a deletion, or a session of its ended cut off: see mayHaveMissed
	recreated   map[string]*freshWatch // shard blobs created again, not yet taken: when their ETag was first seen (shardfloors.go)
}

// floorOf is the highest term this instance saw on shard name's blob.
// Called under ownerState.mu.
func (tm *termMemory) floorOf(name string) int64 { return tm.floors[name] }

// see raises the floor of shard name's terms to n (not to the largest
// number: see termFloor.see), and reports whether it did. Called under
// ownerState.mu.
func (tm *termMemory) see(name string, n int64) bool {
	if n > tm.floors[name] && n != math.MaxInt64 {
		tm.floors[name] = n
		return true
	}
	return false
}

// propose notes n as a term this instance is about to send a record of on
// shard name's blob (a claim's, a handover's): the server may store it
// whether or not its answer comes back. It raises the seed of the shard
// (seedOf), not the floor, and reports whether it did. Called under
// ownerState.mu.
func (tm *termMemory) propose(name string, n int64) bool {
	if n > tm.proposed[name] {
		// The largest number too (unlike a floor: see termFloor.see): a
		// blob created again is then seeded with it, and reported as a
		// record no term can follow, not given it again.
		tm.proposed[name] = n
		return true
	}
	return false
}

// seedOf is what shard name's blob, created again, is seeded or raised
// with, and what a claim of it goes above: the highest term this instance
// saw on it, or sent a record of (as termFloor.seed). Called under
// ownerState.mu.
func (tm *termMemory) seedOf(name string) int64 {
	return max(tm.floors[name], tm.proposed[name])
}

// noteGap notes a deletion seen, or a session of this instance ended cut
// off: the next session's first pass starts a quiet of at least quiet (see
// beginQuiet). It reports whether none was pending. Called under
// ownerState.mu.
func (tm *termMemory) noteGap(quiet time.Duration) (first bool) {
	first = tm.deletedFor == 0
	tm.deletedFor = max(tm.deletedFor, quiet)
	tm.gapSeen = true
	return first
}

// mayHaveMissed reports whether this instance saw a deletion, or a session
// of its ended cut off (sawCutOff): a shard blob with no term yet may then
// be one created again after a deletion by an instance that never saw its
// terms, so its first term goes above the fleet's highest (claimOne).
// Called under ownerState.mu.
func (tm *termMemory) mayHaveMissed() bool { return tm.gapSeen }

// beginQuiet starts the quiet a deletion seen asks for, if one is pending,
// with the seeding of the terms it saw; and reports how long the quiet
// still lasts, and whether the seeding is still to be done (see
// shardManager.quiet). Called under ownerState.mu.
func (tm *termMemory) beginQuiet() (left time.Duration, seed bool) {
	if tm.deletedFor > 0 {
		tm.quietUntil = time.Now().Add(tm.deletedFor)
		tm.deletedFor = 0
		tm.seedPending = true
	}
	left = time.Until(tm.quietUntil)
	return left, tm.seedPending && left > 0
}

// seeded notes that the seeding of the terms it saw is done. Called under
// ownerState.mu.
func (tm *termMemory) seeded() { tm.seedPending = false }

// recreatedWatch is the watch on shard name's blob, created again, made
// now if there was none (see stoodRecreated). Called under ownerState.mu.
func (tm *termMemory) recreatedWatch(name string) *freshWatch {
	w := tm.recreated[name]
	if w == nil {
		w = &freshWatch{}
		tm.recreated[name] = w
	}
	return w
}

// forgetRecreated drops the watch on shard name's blob: it stood. Called
// under ownerState.mu.
func (tm *termMemory) forgetRecreated(name string) { delete(tm.recreated, name) }
