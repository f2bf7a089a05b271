package leaderelection

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// How the survivors of a session learn which shards it held without a
// listing of every shard. Each session keeps a list of the shards it runs,
// P/held/<session>: for each, the shard term and the session term its lease
// ID derives from (wire.ClaimLeaseID, or HandoffLeaseID for a shard handed
// to it), and the ETag of the record it runs the shard under (the format:
// internal/wire's heldlist.go). It rewrites the
// list once its runs have changed, at most every RetryInterval, one write at
// a time, and deletes it as it ends (but see endSession).
//
// When a session dies, each survivor reads its list (one request) and takes
// its part of those shards as a resumed session takes its own back: by a
// change of the lease's ID, from the one the dead session's claim derived to
// one of its own claim's, then its record, each If-Match the ETag the list
// gives (that of the record the dead session ran the shard under). The list
// is only a hint: the change fails unless the lease still has that ID,
// which nobody but the dead session uses (see the top of shards.go), and the
// record is still that one; nothing is broken on its word. So a list that is
// old, or written by anyone else, takes nothing from anyone; an acquire,
// If-Match the same ETag, takes one that is free, as any claim may. A session
// that leaves, and releases shards it could not hand on within its grace,
// writes its list of those as it ends, and leaves its blob released for the
// others to see it dead (endSession): they take them from that list. A shard
// the list does not name (claimed after the last write), or that is neither
// the session's nor free, is found by a listing, as before.
//
// It replaced a listing of every shard by every instance, each in its turn,
// once ownership had settled after each change: at 10,000 shards ten
// listings of 2 to 5 s of Azurite's one thread, during which every other
// request waited, and the shards handed to a joiner idled seconds.

// heldText is this session's list, as it stands: one line per shard it
// runs, "name term gen ETag", sorted.
func (sm *shardManager) heldText() string {
	lines := sm.o.state.heldLines()
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// writeHeld rewrites this session's list if its runs changed since it was
// last written, at most every RetryInterval, one write at a time, off the
// session's loop.
func (sm *shardManager) writeHeld() {
	if sm.heldList.heldBusy.Load() || time.Since(sm.heldList.heldAt) < sm.o.settings.RetryInterval {
		return
	}
	if sm.heldList.heldFailed.Swap(false) {
		sm.heldList.heldLast = "\x00"
	}
	text := sm.heldText()
	if text == sm.heldList.heldLast {
		return
	}
	sm.heldList.heldBusy.Store(true)
	sm.heldList.heldAt, sm.heldList.heldLast = time.Now(), text
	sm.handoffs.pacing.Add(1)
	go func() {
		defer sm.handoffs.pacing.Done()
		defer sm.heldList.heldBusy.Store(false)
		if err := sm.o.putHeld(sm.shardsCtx, sm.s.id, text); err != nil {
			sm.heldList.heldFailed.Store(true)
			sm.o.logger.Debug("leaderelection: could not write the list of the shards this session holds; retrying", "error", err)
		}
	}()
}

// endHeld hands the session, once its shards have stopped, the list of
// those it left behind, if any.
func (sm *shardManager) endHeld() {
	sm.heldList.endMu.Lock()
	defer sm.heldList.endMu.Unlock()
	if len(sm.heldList.endLines) > 0 {
		slices.Sort(sm.heldList.endLines)
		text := strings.Join(sm.heldList.endLines, "\n")
		sm.s.endList.Store(&text)
	}
}

// probeUnlisted finds, without a listing of every shard, the few shards of
// the set that are free when the records count nearly every shard: it reads
// the list of each other live session that holds shards, then the
// properties of each shard of the set that no list names and this session
// does not run, and keeps as candidates those with no blob or no lease, at
// the ETag it read (a claim is conditional on it, as on a listing's). A
// list a RetryInterval behind names fewer shards than its session holds:
// those are read for nothing, and found leased. It reports false if it
// could not tell (a list unread, or more than probeMax shards unnamed): a
// listing is then needed. A shard found with no blob is kept only if this
// session's blob is still there, leased, after the reads (sessionBlobGone):
// a probe, as a listing, may read a container created again.
//
// At the end of a cold start of 10,000 shards, a few sessions came up a
// few shards short (their parts, computed from listings and records read
// at different moments, overlapped), and each listed every shard at once:
// 10 s, on a busy account, for a dozen shards.
func (sm *shardManager) probeUnlisted(view sessionView) (int, bool) {
	o := sm.o
	var ids []string
	for _, id := range view.live {
		if id != sm.s.id && view.owned[id] > 0 {
			ids = append(ids, id)
		}
	}
	lists := make([][]heldEntry, len(ids))
	errs := make([]error, len(ids))
	atOnce(len(ids), claimParallel, func(i int) { lists[i], errs[i] = o.readHeld(sm.ctx, ids[i]) })
	if err := errors.Join(errs...); err != nil {
		o.logger.Debug("leaderelection: could not read the sessions' lists of their shards; listing the shards", "error", err)
		return 0, false
	}
	named := map[string]bool{}
	for _, l := range lists {
		for _, e := range l {
			named[e.name] = true
		}
	}
	unnamed := o.state.unnamed(named)
	if len(unnamed) > probeMax {
		return 0, false
	}
	found := make([]*candidate, len(unnamed))
	peers := sm.sameSetPeers(view)
	atOnce(len(unnamed), claimParallel, func(i int) { found[i] = o.freeShard(sm.ctx, unnamed[i], peers) })
	if slices.ContainsFunc(found, func(c *candidate) bool { return c != nil && !c.exists }) && sm.sessionBlobGone() {
		// A shard with no blob, read on a container created again under
		// this session, which has not noticed it yet: claim nothing on
		// it, as after a listing (listShards; shardfloors.go). The
		// session's renewal, or its next listing, ends it.
		o.sawDeletion("a read of the shards no list names found this session's blob gone")
		return 0, false
	}
	now := time.Now()
	var freed []string
	for _, c := range found {
		if c != nil {
			sm.candidates.cands[c.name] = *c
			sm.candidates.freeSince[c.name] = now
			freed = append(freed, c.name)
		}
	}
	o.counts.sawFree(freed)
	o.logger.Debug("leaderelection: read the shards no session's list names", "prefix", o.prefix, "lists", len(ids), "unnamed", len(unnamed), "free", len(freed))
	if len(freed) > 0 {
		// Assign them afresh, by the records as they are now. (Found
		// nothing, it leaves the candidates as they were, stale if they
		// were: the listing comes next.)
		sm.candidates.part, sm.candidates.deathRoom, sm.candidates.stale, sm.candidates.fromListing = nil, nil, false, false
	}
	return len(freed), true
}

// freeShard reads one shard's blob and returns it as a candidate to claim if
// it is free: no blob, or no lease, and a record a term can follow. It
// returns nil otherwise, and if the read fails (a listing finds it later).
// A lease released by one of peers (see sameSetPeers) marks it released.
func (o *ShardOwner) freeShard(ctx context.Context, name string, peers map[string]bool) *candidate {
	blob := o.shardBlob(name)
	props, err := o.storage.client.Blob(blob).Properties(ctx, blobstore.Call{})
	if blobstore.HasCode(err, blobstore.BlobNotFound) {
		o.sawShard(name, nil)
		return &candidate{name: name}
	}
	if err != nil {
		return nil
	}
	l := listed{name: name, owned: -1, size: -1, session: wire.Value(props.Metadata, wire.MetaSession)}
	l.info = LeaseInfo{Exists: true}
	l.info.State, _, l.info.Duration = leaseOf(props)
	observed(&l.info, props, time.Now())
	l.rec = readRecord(o.settings.Container, blob, props.Metadata)
	l.rec.fill(&l.info)
	// What a listing tells of a shard, this read tells of this one: a
	// record no term can follow is reported (once for each value), and
	// one repaired since is no longer (see noteBadShards).
	p := o.shardProblem(l)
	o.sawShard(name, p)
	if p != nil {
		return nil
	}
	if !l.rec.TermBad {
		o.state.seeTerm(name, l.info.Leader.Number)
	}
	if l.info.Held() {
		return nil
	}
	c := listedCandidate(name, l.info)
	c.released = l.releasedBy(peers)
	return &c
}
