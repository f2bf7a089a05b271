package leaderelection

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/blobelect/leaderelection/internal/shardplan"
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

const (
	handoverAtOnce   = 48                     // shard funcs stopped for a handover and not yet handed on, among all givers
	handoverPerGiver = 16                     // and by one giver
	handoffPoll      = 100 * time.Millisecond // how often a receiver that expects shards lists its notes
	seldomEvery      = 10                     // every how many handoffPolls it lists them if it only may get some
	handoffBatch     = 50 * time.Millisecond  // how long a giver gathers transfers into one note
	adoptParallel    = 32                     // adoptions in flight at once
	notesParallel    = 8                      // notes written at once
)

// How often a session reads its notes (see balance).
const (
	expectNothing = int32(shardplan.NotesNever)  // at its share: never
	expectSeldom  = int32(shardplan.NotesSeldom) // below its share, the records changing: every seldomEvery handoffPolls
	expectOften   = int32(shardplan.NotesOften)  // another session of its group above its share, or leaving: every handoffPoll
)

// receiver is the session a shard is handed to.
type receiver struct {
	session  string
	identity string
}

// handed is one shard handed to a receiver: what its note says.
type handed struct {
	name string
	term int64
	etag azcore.ETag
	from string // the giver's session, if a note of its says so and the receiver knows it live
}

// ownTerm is a shard's term, as this session recorded it for itself.
type ownTerm struct {
	name string
	term int64
}

// handoffs are a session's handovers (see the top of this file): the
// shards handed straight to a receiver, and those handed to this session.
// Touched only by the session's goroutine but its atomics, the channels
// and the wait groups.
type handoffs struct {
	expecting   atomic.Int32                    // how often to read its notes: expectNothing, expectSeldom or expectOften (see balance)
	adoptSlots  chan struct{}                   // adoptions in flight
	peers       atomic.Pointer[map[string]bool] // the live sessions, by the last listing (see setPeers)
	out         *outbox                         // notes to write
	pacing      sync.WaitGroup                  // pace, deliver, and what they start
	watching    sync.WaitGroup                  // watchNotes
	sessionTerm int64                           // the session's term: wire.ClaimLeaseID derives from it
	changedBack atomic.Int64                    // shards taken back by a change of their lease's ID (see takeBack)
}

// ownTerms are the terms a session recorded, or adopted, for itself (it
// never adopts one twice), and the highest it proposed for each shard
// (its next claim proposes more). Its claims and adoptions run in
// parallel: termsMu guards it.
type ownTerms struct {
	termsMu sync.Mutex       // guards terms
	terms   map[ownTerm]bool // the terms this session recorded, or adopted, for itself
	highest map[string]int64 // by shard, the highest of them, and of the terms its claims proposed
}

// handoffPoll is how often a session that expects shards reads its notes
// (a test may make it longer: see seams).
func (o *ShardOwner) handoffPoll() time.Duration {
	if p := o.opts.seams.handoffPoll; p > 0 {
		return p
	}
	return handoffPoll
}

func (o *ShardOwner) handoffPrefix(session string) string {
	return wire.NotePrefix(o.prefix, session)
}

// pace stops the funcs of the shards queued for a handover, at most
// atOnce at a time: the next once one of those is handed on; none
// once ctx ends (those left are stopped with the others as the session
// ends, and released).
func (sm *shardManager) pace(ctx context.Context, queue []*shardRun, atOnce int) {
	defer sm.pacing.Done()
	slots := make(chan struct{}, max(1, atOnce))
	for _, r := range queue {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		sm.o.mu.Lock()
		r.leftAt = time.Now()
		sm.o.mu.Unlock()
		r.ts.pleaseStop(ErrShardHandedOver)
		sm.pacing.Add(1)
		go func() {
			defer sm.pacing.Done()
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
	number, ok := wire.NextTerm(r.term.Number, o.floorOf(r.name))
	if !ok {
		return false
	}
	id := wire.HandoffLeaseID(to.session, r.name, number)
	t := Term{Number: number, Identity: to.identity, LeaseID: id, Since: time.Now().UTC()}
	o.proposeTerm(r.name, number) // the server may store it, answered or not (shardfloors.go)
	etag, err := o.writeShardRecord(ctx, lm, t, to.session, 0, r.etag)
	if err != nil {
		o.logger.Debug("leaderelection: could not hand a shard over; releasing it", "shard", r.name, "to", to.session, "error", err)
		return errors.Is(err, ErrLeaseLost) // not ours: nothing to release
	}
	o.seeTerm(r.name, number)
	old := lm.LeaseID()
	if _, err := o.changeLease(ctx, lm, id, ""); err != nil {
		// The record names the receiver, which adopts the shard from its
		// listing if the change went through; if it did not, the release
		// with our ID sets it free.
		o.logger.Debug("leaderelection: could not hand a shard's lease over; releasing it", "shard", r.name, "to", to.session, "error", err)
		o.addLeftover(r.name, old)
		return true
	}
	o.logger.Debug("leaderelection: handed a shard on", "shard", r.name, "to", to.session, "term", number)
	sm.noteOwner(r.name, shardHolder{session: to.session, etag: etag, term: number})
	sm.post(to.session, handed{name: r.name, term: number, etag: etag})
	return true
}

// warmConns is how many connections a session opens as it starts (warm).
const warmConns = claimParallel + 4

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
	defer sm.pacing.Done()
	b := sm.o.client.Blob(sm.o.sessionBlob(sm.s.id))
	atOnce(warmConns, warmConns, func(int) {
		_, _ = b.Properties(ctx, blobstore.Call{Timeout: sm.o.settings.claimTimeout()})
	})
}

// watchNotes lists this session's notes every handoffPoll while it expects
// shards, and adopts what they hand it; it returns when the session's shards
// stop. The listing carries the notes' content: one note per giver, which
// the giver rewrites as it hands more on (see outbox), so a note is read
// again when its ETag changes. Notes are not deleted as they are read: on
// Azurite a deletion costs the account in proportion to the container (62
// ms of its one thread at 10,000 shards, against 1.4 ms for a note's write),
// and the receivers of a leaving instance, deleting a note per batch as they
// read it, held up its transfers to a handful a second. A note whose giver
// is no longer a live session is deleted, one a second at most, while no
// handover to this session is under way; those left when this session ends
// are deleted with it (endSession).
func (sm *shardManager) watchNotes() {
	defer sm.watching.Done()
	o := sm.o
	prefix := o.handoffPrefix(sm.s.id)
	seen := map[string]azcore.ETag{}
	var stale []staleNote // notes of givers no longer live, to delete
	var lastDelete time.Time
	t := time.NewTicker(o.handoffPoll())
	defer t.Stop()
	ticks := 0
	for {
		select {
		case <-sm.shardsCtx.Done():
			return
		case <-t.C:
		}
		if len(stale) > 0 && sm.expecting.Load() != expectOften && time.Since(lastDelete) >= time.Second {
			// If-Match what was read: a note rewritten since is read
			// first.
			_ = o.client.Blob(stale[0].name).Delete(sm.shardsCtx, blobstore.DeleteOptions{IfMatch: stale[0].etag})
			stale, lastDelete = stale[1:], time.Now()
		}
		switch sm.expecting.Load() {
		case expectNothing:
			continue
		case expectSeldom:
			if ticks++; ticks%seldomEvery != 0 {
				continue
			}
		}
		var hs, skipped []handed
		changed := 0
		listed := map[string]bool{}
		stale = stale[:0]
		for page, err := range o.client.List(sm.shardsCtx, blobstore.ListOptions{Prefix: prefix, Metadata: true}) {
			if err != nil {
				break
			}
			for _, b := range page.Items {
				if b.ETag == "" {
					continue
				}
				name := b.Name
				listed[name] = true
				from := wire.NoteSender(prefix, name)
				peer := wire.Value(b.Metadata, wire.MetaRole) == wire.RoleHandoff && sm.isPeer(from)
				if !peer {
					stale = append(stale, staleNote{name, b.ETag})
				}
				if seen[name] == b.ETag {
					continue
				}
				seen[name] = b.ETag
				changed++
				entries := parseNote(wire.Value(b.Metadata, wire.MetaNote))
				if peer {
					for i := range entries {
						entries[i].from = from
					}
					hs = append(hs, entries...)
				} else {
					skipped = append(skipped, entries...)
				}
			}
		}
		for name := range seen {
			if !listed[name] {
				delete(seen, name)
			}
		}
		if changed == 0 {
			continue
		}
		// A note it cannot vouch for only says where to look: adopted on
		// the condition of an acquire (see adoptOne).
		sm.adopt(append(hs, skipped...))
		o.logger.Debug("leaderelection: read notes of shards handed to this session", "notes", changed, "shards", len(hs)+len(skipped))
	}
}

// staleNote is a note whose giver is no longer a live session, as listed.
type staleNote struct {
	name string
	etag azcore.ETag
}

// adopt takes the shards handed to this session, adoptParallel at a time:
// each on condition that its lease holds the ID derived for this session and
// its term (or none) and its ETag is still the one the giver's record left.
// It skips the shards this session runs or claims, and a term it recorded
// itself. One that left its set meanwhile is adopted and released (start).
func (sm *shardManager) adopt(hs []handed) {
	o := sm.o
	sem := sm.adoptSlots
	var wg sync.WaitGroup
	for _, h := range hs {
		// Asked as the shard is reserved: an adoption of the same term that
		// failed (adoptOne) records it before it lets the shard go, and may
		// then release its lease.
		by := adoptingSeen
		if h.from != "" {
			by = adoptingNote
		}
		if !o.reserve(h.name, by, func() bool { return sm.recorded(h.name, h.term) }) {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sm.adoptOne(h)
		}()
	}
	wg.Wait()
}

// record notes a term this session records, or adopts, for itself: it never
// adopts a term twice.
func (t *ownTerms) record(name string, term int64) {
	t.termsMu.Lock()
	defer t.termsMu.Unlock()
	t.terms[ownTerm{name, term}] = true
	t.highest[name] = max(t.highest[name], term)
}

// propose notes a term a claim of this session proposes for shard name
// (see claimOne): its next claim proposes more.
func (t *ownTerms) propose(name string, term int64) {
	t.termsMu.Lock()
	defer t.termsMu.Unlock()
	t.highest[name] = max(t.highest[name], term)
}

// proposed is the highest term this session proposed, recorded or adopted
// for shard name.
func (t *ownTerms) proposed(name string) int64 {
	t.termsMu.Lock()
	defer t.termsMu.Unlock()
	return t.highest[name]
}

func (t *ownTerms) recorded(name string, term int64) bool {
	t.termsMu.Lock()
	defer t.termsMu.Unlock()
	return t.terms[ownTerm{name, term}]
}

// handOverTo marks the runs picked for a handover, and gives each a
// receiver among live: the one the shard prefers if quota leaves it room,
// else the first with room. It returns those with a receiver, in order, for
// pace; the others are asked to stop at once, and released. Under o.mu.
func (sm *shardManager) handOverTo(picks []*shardRun, live []string, quota map[string]int, idents map[string]string) []*shardRun {
	takers := make([]string, 0, len(quota))
	for id := range quota {
		takers = append(takers, id)
	}
	slices.Sort(takers)
	var queue []*shardRun
	for _, r := range picks {
		r.leaving = true
		to := balance.Preferred(live, r.name)
		if quota[to] == 0 {
			to = ""
			for _, id := range takers {
				if quota[id] > 0 {
					to = id
					break
				}
			}
		}
		if to == "" || idents[to] == "" {
			r.leftAt = time.Now()
			r.ts.pleaseStop(ErrShardHandedOver)
			continue
		}
		quota[to]--
		r.to = &receiver{session: to, identity: idents[to]}
		queue = append(queue, r)
	}
	return queue
}

// handoffGrace bounds leave: from the caller's cancel to the moment the
// shard funcs not yet handed on are stopped (and released). The session's
// record must say it is leaving (one write, confirmed), the others must
// read it (one RetryInterval), and the shards be handed on.
func (s BlobSettings) handoffGrace() time.Duration {
	return s.RetryInterval + 2*s.RequestTimeout
}

// claimTimeout bounds each request of a claim (create, break, acquire,
// record): three RequestTimeouts. A claim waits for nobody's safety (the
// shard's lease never expires, every step is conditional, and its func
// starts only once the record is written, under a session that is
// renewed apart), and a request cut short costs more than one that waits:
// over HTTP/1.1 its connection is closed, and the next request opens a new
// one. On a busy account a new connection waits for its first answer:
// seconds on Azurite, while ten instances open theirs at once (40 opened
// together while 80 requests were in flight: 4.0 s p50, 6.6 s at most).
// Cut at RequestTimeout, the claims of a cold start closed connections
// faster than Azurite answered new ones. A claim in flight when the
// session ends is cancelled at once: this bounds no shutdown. A transfer's
// record write (writeShardRecord) has the same bound, within the
// handover's own (handoffGrace, and the releases' window as the session
// ends).
func (s BlobSettings) claimTimeout() time.Duration {
	return 3 * s.RequestTimeout
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
	others := slices.DeleteFunc(slices.Clone(sm.group.live), func(id string) bool { return id == sm.s.id })
	if len(others) == 0 || o.ownedCount() == 0 {
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
	quota := make(map[string]int, len(others))
	o.mu.Lock()
	var picks []*shardRun
	for _, r := range o.runs {
		if !r.leaving && !r.returned.Load() {
			picks = append(picks, r)
		}
	}
	for i := range picks {
		quota[others[i%len(others)]]++
	}
	queue := sm.handOverTo(picks, others, quota, sm.group.ident)
	o.mu.Unlock()
	o.logger.Info("leaderelection: leaving: handing shards on to the other sessions", "container", s.Container, "prefix", o.prefix,
		"count", len(queue), "sessions", len(others))
	// The only giver, but handoverPerGiver at a time all the same: with
	// 48, a SIGTERMed instance at 1,000 shards on Azurite handed them on
	// in 3.7 and 7.4 s (6 to 8 s with 16), but each idled 2.7 and 5.9 s
	// p99 (0.4 to 0.8 s with 16): its notes to nine receivers, one write
	// at a time each, fell behind. With 16, once in three runs, 139 were
	// left when its grace (handoffGrace) ran out, and were taken from its
	// last list.
	sm.pacing.Add(1)
	sm.pace(ctx, queue, handoverPerGiver)
	for _, r := range queue {
		select {
		case <-r.done:
		case <-ctx.Done():
			return
		}
	}
}

// dropNotes deletes the notes left for a session that has ended, as far as
// ctx allows: best effort (a note is only a hint; one left over names shards
// whose conditions fail). Nothing is sent once ctx is done.
func (o *ShardOwner) dropNotes(ctx context.Context, session string) {
	if ctx.Err() != nil {
		return
	}
	for page, err := range o.client.List(ctx, blobstore.ListOptions{Prefix: o.handoffPrefix(session)}) {
		if err != nil {
			return
		}
		for _, b := range page.Items {
			_ = o.client.Blob(b.Name).Delete(ctx, blobstore.DeleteOptions{})
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// setPeers keeps the live sessions of the last listing, for watchNotes.
func (h *handoffs) setPeers(live []string) {
	peers := make(map[string]bool, len(live))
	for _, id := range live {
		peers[id] = true
	}
	h.peers.Store(&peers)
}

func (sm *shardManager) isPeer(id string) bool {
	p := sm.peers.Load()
	return p != nil && (*p)[id] && id != sm.s.id
}
