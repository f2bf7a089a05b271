package leaderelection

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/blobelect/leaderelection/internal/wire"
)

// How a shard moves straight to the session that receives it (a join, a
// rebalance), instead of being released for the receiver to find at its
// next listing of the shards.
//
// The giver stops a shard's func only when it can hand it on at once (at
// most handoverAtOnce at a time among all the givers, handoverAtOnce /
// givers each, and never more than handoverPerGiver: each handed shard then
// idles for its own transfer, not for a queue of them, in storage or here;
// storage's throughput, not how many are in flight, sets how long the whole
// move takes, and each transfer in flight holds a connection: more than
// the giver keeps open would open new ones, which a busy account answers
// last. A shard idles about as long as the transfers in flight take to get
// through storage: at 10,000 shards on Azurite, 96 in flight handed a
// joiner its 909 in 4.5 s, each idle 0.56 s p50, 1.09 s p99, in one run;
// 32 did in 6.3 s [5.1-7.0], each idle 0.35 s p50, 0.62 s p99 [0.57-0.69],
// in three; but each giver then had 3 in flight, and the last to see the
// joiner, up to a RetryInterval after the first, finished last; 48 did in
// 4.9 and 5.5 s, each idle 0.63 and 0.64 s p99, in two). Once the func has
// returned, while the shard's lease is still its own, the giver
// (transfer):
//  1. writes the shard's record naming the receiver's session and the next
//     term, under its lease, If-Match the ETag its own record left;
//  2. changes the lease's ID to wire.HandoffLeaseID(receiver, shard, term);
//  3. adds the shard (name, term, ETag) to its note to the receiver,
//     P/handoff/<receiver session>/<giver session>-0, which it rewrites
//     (see outbox).
//
// The receiver lists its notes every handoffPoll while it expects shards
// (below its share while another session of its group is above its own, or
// leaving; every seldomEvery handoffPolls if it is only below: see balance),
// and adopts each shard (adopt): it starts the func under that term, with
// that ID, at once if the note is one the library wrote for a session the
// receiver knows live, else once an acquire with that ID, If-Match the
// ETag, succeeds (see the top of shards.go). A shard that the receiver's
// listing of the shards shows recorded for it, at a term it did not record
// itself, is adopted with that acquire too: its note was lost, or is not
// read yet. If a step fails, the giver releases the shard as before, and
// the receiver, or any session below its share, claims it from a listing.

// pace stops the funcs of the shards queued for a handover, at most
// atOnce at a time: the next once one of those is handed on; none
// once ctx ends (those left are stopped with the others as the session
// ends, and released).
func (sm *shardManager) pace(ctx context.Context, queue []*shardRun, atOnce int) {
	defer sm.handoffs.pacing.Done()
	slots := make(chan struct{}, max(1, atOnce))
	for _, r := range queue {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		sm.o.state.askedToLeave(r)
		r.ts.pleaseStop(ErrShardHandedOver)
		sm.handoffs.pacing.Add(1)
		go func() {
			defer sm.handoffs.pacing.Done()
			<-r.done
			<-slots
		}()
	}
}

// transfer hands a shard whose func has returned to its receiver (see the
// top of this file). It reports false if the shard is to be released as
// usual instead: its record could not be written.
func (sm *shardManager) transfer(ctx context.Context, r *shardRun, to receiver) bool {
	o := sm.o
	lm := r.runner.blob()
	number, ok := wire.NextTerm(r.term.Number, o.state.floorOf(r.name))
	if !ok {
		return false
	}
	id := wire.HandoffLeaseID(to.session, r.name, number)
	t := Term{Number: number, Identity: to.identity, LeaseID: id, Since: time.Now().UTC()}
	o.state.proposeTerm(r.name, number) // the server may store it, answered or not (shardfloors.go)
	etag, err := o.writeShardRecord(ctx, lm, t, to.session, 0, r.etag)
	if err != nil {
		o.logger.Debug("leaderelection: could not hand a shard over; releasing it", "shard", r.name, "to", to.session, "error", err)
		return errors.Is(err, ErrLeaseLost) // not ours: nothing to release
	}
	o.state.seeTerm(r.name, number)
	old := lm.LeaseID()
	if _, err := o.changeLease(ctx, lm, id, ""); err != nil {
		// The record names the receiver, which adopts the shard from its
		// listing if the change went through; if it did not, the release
		// with our ID sets it free.
		o.logger.Debug("leaderelection: could not hand a shard's lease over; releasing it", "shard", r.name, "to", to.session, "error", err)
		o.state.addLeftover(r.name, old)
		return true
	}
	o.logger.Debug("leaderelection: handed a shard on", "shard", r.name, "to", to.session, "term", number)
	sm.shardListing.noteOwner(r.name, shardHolder{session: to.session, etag: etag, term: number})
	sm.handoffs.post(to.session, handed{name: r.name, term: number, etag: etag})
	return true
}

// warm opens warmConns connections to the account at once, as the session
// starts, by as many reads of the session's blob: the claims, the reading
// of its notes and the listings then find their connections open. A new
// connection's first answer from a busy account may wait: on Azurite, while
// other instances claim or hand over thousands of shards, seconds (see
// claimTimeout); an instance that had just joined read the notes of 500
// shards handed to it 3.5 s late, its listing stuck on a new connection
// behind its own deletes, each on a new one too. A failure is no matter:
// the request that needs the connection opens it.
func (sm *shardManager) warm(ctx context.Context) {
	defer sm.handoffs.pacing.Done()
	b := sm.o.storage.client.Blob(sm.o.sessionBlob(sm.s.id))
	atOnce(warmConns, warmConns, func(int) {
		_, _ = b.Properties(ctx, blobstore.Call{Timeout: sm.o.settings.claimTimeout()})
	})
}

// leave hands this session's shards to the other live sessions of its
// group as the caller ends Run, instead of releasing them for the others to
// find at their next listings. The shard funcs keep running meanwhile: the
// session says in its record that it is leaving; once the others have
// read that (within a RetryInterval: they list the sessions that often),
// they read their notes often, and each shard is handed on as its func
// returns (see the top of this file). It returns after handoffGrace at
// most, or at once if the session may not be renewed, or no other session
// is there to take the shards: what is left is stopped and released as the
// session ends.
func (sm *shardManager) leave() {
	o, s := sm.o, sm.o.settings
	others := slices.DeleteFunc(slices.Clone(sm.balancing.group.live), func(id string) bool { return id == sm.s.id })
	if len(others) == 0 || o.state.ownedCount() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(sm.stopNow, s.handoffGrace())
	defer cancel()
	sm.s.leaving.Store(true)
	told := make(chan error, 1)
	select {
	case sm.s.term.hooks.renewSoon <- told:
	case <-ctx.Done():
		return
	}
	select {
	case err := <-told:
		if err != nil {
			return
		}
	case <-ctx.Done():
		return
	}
	if !clock.Sleep(ctx, s.RetryInterval+2*o.handoffPoll()) {
		return
	}
	// Each other session gets as many: the counts in their records may be
	// a RenewInterval old, and the balance evens out what is left.
	queue := o.state.handAllOn(others, sm.balancing.group.ident)
	o.logger.Info("leaderelection: leaving: handing shards on to the other sessions", "container", s.Container, "prefix", o.prefix,
		"count", len(queue), "sessions", len(others))
	// The only giver, but handoverPerGiver at a time all the same: with
	// 48, a SIGTERMed instance at 1,000 shards on Azurite handed them on
	// in 3.7 and 7.4 s (6 to 8 s with 16), but each idled 2.7 and 5.9 s
	// p99 (0.4 to 0.8 s with 16): its notes to nine receivers, one write
	// at a time each, fell behind. With 16, once in three runs, 139 were
	// left when its grace (handoffGrace) ran out, and were taken from its
	// last list.
	sm.handoffs.pacing.Add(1)
	sm.pace(ctx, queue, handoverPerGiver)
	for _, r := range queue {
		select {
		case <-r.done:
		case <-ctx.Done():
			return
		}
	}
}
