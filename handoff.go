package leaderelection

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/google/uuid"
)

// How a shard moves straight to the session that receives it (a join, a
// rebalance), instead of being released for the receiver to find at its
// next listing of the shards.
//
// The giver stops a shard's func only when it can hand it on at once (at
// most handoverAtOnce at a time among all the givers, handoverAtOnce /
// givers each: each handed shard then idles for its own transfer, not for a
// queue of them, in storage or here; storage's throughput, not how many are
// in flight, sets how long the whole move takes). Once the func has returned, while the
// shard's lease is still its own, the giver (transfer):
//  1. writes the shard's record naming the receiver's session and the next
//     term, under its lease, If-Match the ETag its own record left;
//  2. changes the lease's ID to handoffLeaseID(receiver, shard, term);
//  3. posts a note listing such shards (name, term, ETag) to
//     P/handoff/<receiver session>/.
//
// The receiver lists its notes every handoffPoll while it expects shards
// (below its share, or another session of its group leaving: see balance),
// and adopts each shard (adopt): it starts the func under that term, with
// that ID, at once if the note is one the library wrote for a session the
// receiver knows live, else once an acquire with that ID, If-Match the
// ETag, succeeds (see the top of renew.go). A shard that the receiver's
// listing of the shards shows recorded for it, at a term it did not record
// itself, is adopted with that acquire too: its note was lost, or is not
// read yet. If a step fails, the giver releases the shard as before, and
// the receiver, or any session below its share, claims it from a listing.

const (
	handoffDir     = "handoff/"
	handoverAtOnce = 96                     // shard funcs stopped for a handover and not yet handed on, among all givers
	handoffPoll    = 100 * time.Millisecond // how often a receiver that expects shards lists its notes
	handoffBatch   = 50 * time.Millisecond  // how long a giver gathers transfers into one note
	adoptParallel  = 32                     // adoptions in flight at once
	notesParallel  = 8                      // notes deleted at once
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

// handoffLeaseID is the lease ID a giver hands the shard's lease over with:
// the receiver derives the same from its session, the shard and the term the
// giver recorded for it. Each term of a shard gets its own, so a release of
// the receiver's sent for an earlier term ends nothing later.
func handoffLeaseID(session, shard string, term int64) string {
	sum := sha256.Sum256([]byte("leaderelection handoff\x00" + session + "\x00" + shard + "\x00" + strconv.FormatInt(term, 10)))
	id, _ := uuid.FromBytes(sum[:16])
	return id.String()
}

func (o *ShardOwner) handoffPrefix(session string) string {
	return o.prefix + handoffDir + session + "/"
}

// plan says, from one view of the group's sessions, how many of the k
// shards this session (self) gives go to each session below its share: the
// excesses of the sessions above their share, in ID order, are matched to
// the lacks of those below, in ID order, so that every giver that sees the
// same view sends each receiver its part and no more.
func plan(view sessionView, n int, self string, k int) map[string]int {
	type span struct {
		id   string
		size int
	}
	var givers, takers []span
	for _, id := range view.live {
		share := fairShare(n, view.live, id)
		owned := view.owned[id]
		if id == self {
			givers = append(givers, span{id, k})
			continue
		}
		switch {
		case owned > share:
			givers = append(givers, span{id, owned - share})
		case owned < share:
			takers = append(takers, span{id, share - owned})
		}
	}
	from := 0
	for _, g := range givers {
		if g.id == self {
			break
		}
		from += g.size
	}
	to := from + k
	out := map[string]int{}
	at := 0
	for _, t := range takers {
		lo, hi := max(at, from), min(at+t.size, to)
		if hi > lo {
			out[t.id] = hi - lo
		}
		at += t.size
	}
	return out
}

// pace stops the funcs of the shards queued for a handover, at most
// handoverAtOnce at a time: the next once one of those is handed on; none
// once ctx ends (those left are stopped with the others as the session
// ends, and released).
func (g *manager) pace(ctx context.Context, queue []*shardRun, atOnce int) {
	defer g.pacing.Done()
	slots := make(chan struct{}, max(1, atOnce))
	for _, r := range queue {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		g.o.mu.Lock()
		r.leftAt = time.Now()
		g.o.mu.Unlock()
		r.ts.pleaseStop(ErrShardHandedOver)
		g.pacing.Add(1)
		go func() {
			defer g.pacing.Done()
			<-r.done
			<-slots
		}()
	}
}

// transfer hands a shard whose func has returned to its receiver (see the
// top of this file). It reports false if the shard is to be released as
// usual instead: its record could not be written.
func (g *manager) transfer(ctx context.Context, r *shardRun, to receiver) bool {
	o := g.o
	lm := r.m.lease
	number, ok := nextTerm(r.term.Number, o.floorOf(r.name))
	if !ok {
		return false
	}
	id := handoffLeaseID(to.session, r.name, number)
	t := Term{Number: number, Identity: to.identity, LeaseID: id, Since: time.Now().UTC()}
	etag, err := o.writeShardRecord(ctx, lm, t, to.session, r.etag)
	if err != nil {
		o.logger.Debug("leaderelection: could not hand a shard over; releasing it", "shard", r.name, "to", to.session, "error", err)
		return errors.Is(err, ErrLeaseLost) // not ours: nothing to release
	}
	o.seeTerm(r.name, number)
	old := lm.LeaseID()
	if err := o.changeLease(ctx, lm, id); err != nil {
		// The record names the receiver, which adopts the shard from its
		// listing if the change went through; if it did not, the release
		// with our ID sets it free.
		o.logger.Debug("leaderelection: could not hand a shard's lease over; releasing it", "shard", r.name, "to", to.session, "error", err)
		o.addLeftover(r.name, old)
		return true
	}
	o.logger.Debug("leaderelection: handed a shard on", "shard", r.name, "to", to.session, "term", number)
	g.noteOwner(r.name, holder{session: to.session, etag: etag, term: number})
	g.post(to.session, handed{name: r.name, term: number, etag: etag})
	return true
}

// changeLease changes the shard's lease ID to id.
func (o *ShardOwner) changeLease(ctx context.Context, lm *BlobLeaseManager, id string) error {
	ctx, cancel := lm.call(ctx)
	defer cancel()
	h := lm.id.Load()
	if _, err := h.client.ChangeLease(ctx, id, nil); err != nil {
		return lm.classify("hand over shard lease", err, nil, lostCodes)
	}
	return nil
}

// outbox gathers the shards handed on, by receiver, until the next note.
type outbox struct {
	mu      sync.Mutex
	pending map[string][]handed
	seq     int
	ready   chan struct{} // signalled when pending gains an entry
	closed  chan struct{} // closed once no more are posted
}

func newOutbox() *outbox {
	return &outbox{pending: map[string][]handed{}, ready: make(chan struct{}, 1), closed: make(chan struct{})}
}

func (g *manager) post(session string, h handed) {
	b := g.out
	b.mu.Lock()
	b.pending[session] = append(b.pending[session], h)
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// deliver writes the notes, one per receiver for what was handed to it in a
// batch, until the outbox is closed and emptied, or ctx ends.
func (g *manager) deliver(ctx context.Context) {
	defer g.pacing.Done()
	b := g.out
	for {
		select {
		case <-b.ready:
		case <-b.closed:
			g.flush(ctx)
			return
		case <-ctx.Done():
			return
		}
		select {
		case <-time.After(handoffBatch):
		case <-b.closed:
		case <-ctx.Done():
			return
		}
		g.flush(ctx)
	}
}

func (g *manager) flush(ctx context.Context) {
	b := g.out
	b.mu.Lock()
	batch := b.pending
	b.pending = map[string][]handed{}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for session, hs := range batch {
		b.seq++
		name := fmt.Sprintf("%s%s-%06d", g.o.handoffPrefix(session), g.s.id, b.seq)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.o.writeNotes(ctx, name, hs); err != nil {
				g.o.logger.Debug("leaderelection: could not tell a session of the shards handed to it; it finds them by listing", "to", session, "count", len(hs), "error", err)
			}
		}()
	}
	wg.Wait()
}

// A note's content is in its metadata (metaNote), so that the receiver's
// listing of its notes reads them all at once: entries "name term ETag",
// separated by ";", at most noteBytes in a note.
const (
	metaNote  = "leaderhandoff"
	noteBytes = 6 << 10 // of the 8 KiB of metadata a blob may carry
)

// writeNotes writes the notes for one batch of shards handed to a receiver:
// as few as their size allows. Names are new each time (name, then -1, -2).
func (o *ShardOwner) writeNotes(ctx context.Context, name string, hs []handed) error {
	var errs []error
	var b strings.Builder
	part := 0
	flush := func() {
		if b.Len() == 0 {
			return
		}
		n := name
		if part > 0 {
			n = fmt.Sprintf("%s.%d", name, part)
		}
		part++
		if err := o.writeNote(ctx, n, b.String()); err != nil {
			errs = append(errs, err)
		}
		b.Reset()
	}
	for _, h := range hs {
		entry := fmt.Sprintf("%s %d %s", h.name, h.term, h.etag)
		if b.Len()+len(entry)+1 > noteBytes {
			flush()
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(entry)
	}
	flush()
	return errors.Join(errs...)
}

func (o *ShardOwner) writeNote(ctx context.Context, name, entries string) error {
	ctx, cancel := o.ops.call(ctx)
	defer cancel()
	role := string(RoleHandoff)
	_, err := o.cc.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
		Metadata: map[string]*string{metaRole: &role, metaNote: &entries},
	})
	return err
}

// parseNote reads a note's entries. One that does not read is skipped: the
// note was not written by this library, or not whole.
func parseNote(entries string) []handed {
	var hs []handed
	for _, e := range strings.Split(entries, ";") {
		f := strings.Fields(e)
		if len(f) != 3 {
			continue
		}
		term, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || term < 1 || checkShardName(f[0]) != nil {
			continue
		}
		hs = append(hs, handed{name: f[0], term: term, etag: azcore.ETag(f[2])})
	}
	return hs
}

// watchNotes lists this session's notes every handoffPoll while it expects
// shards, and adopts what they hand it; it returns when the session's shards
// stop. The listing carries the notes' content; they are deleted in the
// background.
func (g *manager) watchNotes() {
	defer g.watching.Done()
	o := g.o
	prefix := o.handoffPrefix(g.s.id)
	done := map[string]bool{}
	var deleting sync.WaitGroup
	defer deleting.Wait()
	deletes := make(chan struct{}, notesParallel)
	t := time.NewTicker(handoffPoll)
	defer t.Stop()
	for {
		select {
		case <-g.shardsCtx.Done():
			return
		case <-t.C:
		}
		if !g.expecting.Load() {
			continue
		}
		var hs, skipped []handed
		var fresh []string
		listed := map[string]bool{}
		pager := o.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}})
		for pager.More() {
			ctx, cancel := o.ops.call(g.shardsCtx)
			page, err := pager.NextPage(ctx)
			cancel()
			if err != nil {
				break
			}
			for _, b := range page.Segment.BlobItems {
				if b.Name == nil {
					continue
				}
				name := *b.Name
				listed[name] = true
				if done[name] {
					continue
				}
				done[name] = true
				fresh = append(fresh, name)
				entries := parseNote(metaValue(b.Metadata, metaNote))
				from := noteSender(prefix, name)
				if metaValue(b.Metadata, metaRole) == string(RoleHandoff) && g.isPeer(from) {
					for i := range entries {
						entries[i].from = from
					}
					hs = append(hs, entries...)
				} else {
					skipped = append(skipped, entries...)
				}
			}
		}
		for name := range done {
			if !listed[name] {
				delete(done, name) // deleted: it cannot come back (each note's name is new)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		// A note it cannot vouch for only says where to look: adopted on
		// the condition of an acquire (see adoptOne).
		g.adopt(append(hs, skipped...))
		o.logger.Debug("leaderelection: read notes of shards handed to this session", "notes", len(fresh), "shards", len(hs)+len(skipped))
		for _, name := range fresh {
			deleting.Add(1)
			go func() {
				defer deleting.Done()
				select {
				case deletes <- struct{}{}:
				case <-g.shardsCtx.Done():
					return
				}
				defer func() { <-deletes }()
				ctx, cancel := o.ops.call(g.shardsCtx)
				defer cancel()
				_, _ = o.cc.NewBlobClient(name).Delete(ctx, nil)
			}()
		}
	}
}

// adopt takes the shards handed to this session, adoptParallel at a time:
// each on condition that its lease holds the ID derived for this session and
// its term (or none) and its ETag is still the one the giver's record left.
// It skips the shards this session runs or claims, and a term it recorded
// itself. One that left its set meanwhile is adopted and released (start).
func (g *manager) adopt(hs []handed) {
	o := g.o
	sem := g.adoptSlots
	var wg sync.WaitGroup
	for _, h := range hs {
		o.mu.Lock()
		skip := o.runs[h.name] != nil || o.claiming[h.name] || g.recorded(h.name, h.term)
		if !skip {
			o.claiming[h.name] = true
		}
		o.mu.Unlock()
		if skip {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			g.adoptOne(h)
		}()
	}
	wg.Wait()
}

func (g *manager) adoptOne(h handed) {
	o := g.o
	id := handoffLeaseID(g.s.id, h.name, h.term)
	lm := o.managerFor(o.shardBlob(h.name), id)
	if h.from != "" {
		// A note of a live session's, in this session's own directory,
		// written once the lease was handed over: the lease is this
		// session's, and nobody else can end it (see the top of renew.go).
	} else if err := o.acquireIfMatch(g.shardsCtx, lm, h.etag); err != nil {
		o.mu.Lock()
		delete(o.claiming, h.name)
		o.mu.Unlock()
		if errors.Is(err, ErrTransient) {
			g.releaseClaim(h.name, lm)
		}
		o.logger.Debug("leaderelection: could not adopt a shard handed to this session", "shard", h.name, "term", h.term, "error", err)
		o.counts.claim(h.name, outcome(err, "handed"))
		return
	}
	g.record(h.name, h.term)
	g.took.Add(1)
	o.seeTerm(h.name, h.term)
	o.counts.claim(h.name, "handed")
	g.noteOwner(h.name, holder{session: g.s.id, etag: h.etag, term: h.term})
	t := Term{Number: h.term, Identity: o.opts.identity, LeaseID: id, Since: time.Now().UTC()}
	g.start(h.name, lm, t, h.etag)
}

// record notes a term this session records, or adopts, for itself: it never
// adopts a term twice.
func (g *manager) record(name string, term int64) {
	g.termsMu.Lock()
	defer g.termsMu.Unlock()
	g.terms[ownTerm{name, term}] = true
}

func (g *manager) recorded(name string, term int64) bool {
	g.termsMu.Lock()
	defer g.termsMu.Unlock()
	return g.terms[ownTerm{name, term}]
}

// handOverTo marks the runs picked for a handover, and gives each a
// receiver among live: the one the shard prefers if quota leaves it room,
// else the first with room. It returns those with a receiver, in order, for
// pace; the others are asked to stop at once, and released. Under o.mu.
func (g *manager) handOverTo(picks []*shardRun, live []string, quota map[string]int, idents map[string]string) []*shardRun {
	takers := make([]string, 0, len(quota))
	for id := range quota {
		takers = append(takers, id)
	}
	slices.Sort(takers)
	var queue []*shardRun
	for _, r := range picks {
		r.leaving = true
		to := preferred(live, r.name)
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
func (g *manager) leave() {
	o, s := g.o, g.o.settings
	others := slices.DeleteFunc(slices.Clone(g.group.live), func(id string) bool { return id == g.s.id })
	if len(others) == 0 || o.ownedCount() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(g.stopNow, s.handoffGrace())
	defer cancel()
	g.s.leaving.Store(true)
	told := make(chan error, 1)
	select {
	case g.s.m.renewSoon <- told:
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
	if !sleep(ctx, s.RetryInterval+2*handoffPoll) {
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
	queue := g.handOverTo(picks, others, quota, g.group.ident)
	o.mu.Unlock()
	o.logger.Info("leaderelection: leaving: handing shards on to the other sessions", "container", s.Container, "prefix", o.prefix,
		"count", len(queue), "sessions", len(others))
	g.pacing.Add(1)
	g.pace(ctx, queue, handoverAtOnce)
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
// whose conditions fail).
func (o *ShardOwner) dropNotes(ctx context.Context, session string) {
	prefix := o.handoffPrefix(session)
	pager := o.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	for pager.More() && ctx.Err() == nil {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return
		}
		for _, b := range page.Segment.BlobItems {
			if b.Name != nil {
				_, _ = o.cc.NewBlobClient(*b.Name).Delete(ctx, nil)
			}
		}
	}
}

// noteSender is the session that wrote the note name, under prefix.
func noteSender(prefix, name string) string {
	rest := strings.TrimPrefix(name, prefix)
	if i := strings.LastIndexByte(rest, '-'); i > 0 {
		return rest[:i]
	}
	return ""
}

// setPeers keeps the live sessions of the last listing, for watchNotes.
func (g *manager) setPeers(live []string) {
	peers := make(map[string]bool, len(live))
	for _, id := range live {
		peers[id] = true
	}
	g.peers.Store(&peers)
}

func (g *manager) isPeer(id string) bool {
	p := g.peers.Load()
	return p != nil && (*p)[id] && id != g.s.id
}

// givers counts the sessions of view above their share of n (this one
// included): they hand shards on at once.
func givers(view sessionView, n int, self string) int {
	k := 1
	for _, id := range view.live {
		if id != self && view.owned[id] > fairShare(n, view.live, id) {
			k++
		}
	}
	return k
}
