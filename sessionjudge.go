package leaderelection

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/google/uuid"
)

// How a session judges the others by its listing of the sessions (see the
// top of session.go): live, silent long enough to be broken, or dead for
// good (marked, or its blob gone); and what it keeps of them from one
// listing to the next (sessionWatch).

// deadFor is how long a dead session is remembered without being seen:
// long after any shard could still name it (the lookup of an unknown
// session finds it again if one does).
const deadFor = time.Hour

// judgeSessions lists the sessions and judges each: live, dead for good,
// or silent long enough to be broken (which it does, on the ETag it timed).
// It collects the blobs of sessions that have stood unleased for a lease
// duration, and shortens wait to the moment the next silent session may be
// broken.
func (o *ShardOwner) judgeSessions(ctx context.Context, own *session, w *sessionWatch, wait *time.Duration) (sessionView, error) {
	seen, err := o.listSessions(ctx, own)
	if err != nil {
		return sessionView{}, err
	}
	j := newJudging(own.id)
	for _, l := range seen {
		if !o.readSessionRecord(w, j, l, own.id) || l.name == own.id {
			continue
		}
		if o.judgeLease(ctx, w, j, l, wait) {
			o.countLive(w, j, l)
		}
	}
	o.learnDeaths(w, j)
	slices.Sort(j.view.live)
	return j.view, nil
}

// judging is what one listing of the sessions is being judged into: the
// view it gives, and what the watch keeps of it for the next (learnDeaths).
type judging struct {
	view       sessionView
	listed     map[string]bool   // the session IDs listed
	pending    map[string]bool   // sessions whose lease ended without the end mark, which this pass could not write
	ignored    map[string]string // see sessionWatch
	badSeen    map[string]string
	badLongest map[string]string
	twinETag   map[string]azcore.ETag
	twins      []string // live sessions under this instance's identity, seen renewed
}

func newJudging(own string) *judging {
	return &judging{
		view: sessionView{live: []string{own}, owned: map[string]int{}, set: map[string]string{}, size: map[string]int{}, ident: map[string]string{},
			leave: map[string]bool{}, handing: map[string]int{}, knows: map[string]time.Duration{}},
		listed: map[string]bool{}, pending: map[string]bool{}, ignored: map[string]string{}, badSeen: map[string]string{},
		badLongest: map[string]string{}, twinETag: map[string]azcore.ETag{},
	}
}

// listSessions lists the sessions, this one's among them (else its blob is
// gone: errSessionGone), and raises the longest lease duration this
// instance knows a live session declared.
func (o *ShardOwner) listSessions(ctx context.Context, own *session) ([]listed, error) {
	var seen []listed
	if err := o.list(ctx, wire.SessionsDir, func(l listed) { seen = append(seen, l) }); err != nil {
		if errors.Is(err, errContainerGone) {
			o.sawDeletion("a listing of the sessions found the container gone")
			return nil, errSessionGone
		}
		return nil, err
	}
	if !slices.ContainsFunc(seen, func(l listed) bool { return l.name == own.id }) {
		// Its blob was written before this session's first pass, and no
		// leased blob of ours is deleted but with its container.
		o.sawDeletion("a listing of the sessions did not show this session's blob")
		return nil, errSessionGone
	}
	longest := o.settings.LeaseDuration
	for _, l := range seen {
		if l.isSession() && l.rec.problem == nil && l.info.State == stateLeased && l.info.DeclaredDuration > longest {
			longest = l.info.DeclaredDuration
		}
	}
	raiseTo(&o.fleetMemory.longestD, int64(longest))
	return seen, nil
}

// readSessionRecord reads what a listed blob's record says beyond the
// lease: whether it is a session at all (false: another owner's blob, or
// a stray one, never counted, broken or collected), and the highest term
// its instance saw, which raises the fleet's; what does not read is
// reported once for each value.
func (o *ShardOwner) readSessionRecord(w *sessionWatch, j *judging, l listed, own string) bool {
	if l.name != own && !l.isSession() {
		if why := w.ignored[l.name]; why == "" {
			o.logger.Warn("leaderelection: ignoring a blob under the sessions prefix that is not a session",
				"container", o.settings.Container, "blob", o.sessionBlob(l.name), "role", BlobRole(l.rec.Role))
		}
		j.ignored[l.name] = "not a session"
		return false
	}
	if p := l.rec.problem; p != nil && l.name != own {
		key := p.Key + "=" + p.Value
		if w.ignored[l.name] != key {
			o.logger.Error("leaderelection: a session's record does not read; it is not trusted",
				"container", p.Container, "blob", p.Blob, "key", p.Key, "value", p.Value, "error", p)
		}
		j.ignored[l.name] = key
	} else if l.seenBad != "" {
		if w.badSeen[l.name] != l.seenBad {
			o.logger.Warn("leaderelection: a session's record says a highest term seen that does not read, or that no claim reaches; that value is ignored",
				"container", o.settings.Container, "blob", o.sessionBlob(l.name), "key", wire.MetaSeen, "value", l.seenBad, "limit", wire.MaxSpreadTerm)
		}
		j.badSeen[l.name] = l.seenBad
	} else {
		raiseTo(&o.fleetMemory.fleetSeen, l.seen)
	}
	j.listed[l.name] = true
	return true
}

// judgeLease judges another session by its lease and record: dead for
// good (marked, or known so), silent long enough to be broken (which it
// does, on the ETag it timed, then marks it), ended without its mark
// (which it writes), being started, or alive: it reports whether it is
// alive, and shortens wait to the moment the next silent one may be broken.
func (o *ShardOwner) judgeLease(ctx context.Context, w *sessionWatch, j *judging, l listed, wait *time.Duration) bool {
	if _, dead := w.dead[l.name]; dead || l.ended {
		// Dead for good, whatever its lease shows now (see the top of
		// session.go): it carries the end mark, or did, or its blob went.
		if dead && !l.ended && l.record && w.revived[l.name] != l.info.ETag {
			o.logger.Error("leaderelection: a session this instance knows dead shows a record without its end mark: another writer rewrote its blob; it stays dead",
				"container", o.settings.Container, "blob", o.sessionBlob(l.name), "identity", l.info.Leader.Identity, "etag", l.info.ETag)
			w.revived[l.name] = l.info.ETag
		}
		delete(w.silence, l.name)
		w.dead[l.name] = time.Now()
		o.collect(ctx, w, l, true)
		return false
	}
	switch {
	case l.info.State == stateLeased && l.info.Kind == ETagLease:
		delete(w.unleased, l.name)
		sw := w.silence[l.name]
		if sw == nil {
			sw = &silenceWatch{}
			w.silence[l.name] = sw
		}
		due := sw.observe(l.info, o.settings.LeaseDuration)
		if left := time.Until(due); left > 0 {
			*wait = min(*wait, left)
		} else if o.breakSilentSession(ctx, l.name, sw) {
			delete(w.silence, l.name)
			if o.markEnded(ctx, l) {
				w.dead[l.name] = time.Now()
			} else {
				j.pending[l.name] = true
			}
			return false
		}
	case l.info.Held():
		// Breaking (an operator's break with a period), or a fixed
		// lease nobody of ours takes: alive until it ends.
	case l.record || l.info.State == stateBroken:
		// Its lease ended after its owner wrote under it (released,
		// broken), and its record carries no end mark: dead once this
		// instance, or another, has written it.
		delete(w.silence, l.name)
		if !o.markEnded(ctx, l) {
			j.pending[l.name] = true
			return false
		}
		w.dead[l.name] = time.Now()
		o.collect(ctx, w, l, true)
		return false
	default:
		// Created and not leased yet: a session being started (or one
		// abandoned before it was: collected once it stands that way).
		o.collect(ctx, w, l, false)
		return false
	}
	return true
}

// countLive counts a live session in the view, once it has written its
// record, and notes a twin: another live session under this instance's
// identity (another instance configured alike, or this instance's own
// session left behind by a restart, which is never renewed again: only one
// seen renewed, its ETag changed, is a twin).
func (o *ShardOwner) countLive(w *sessionWatch, j *judging, l listed) {
	if l.record && l.info.Leader.Identity == o.opts.identity {
		first, ok := w.twinETag[l.name]
		if !ok {
			first = l.info.ETag
		}
		j.twinETag[l.name] = first
		if first != l.info.ETag {
			j.twins = append(j.twins, l.name)
		}
	}
	if !l.record {
		return
	}
	v := &j.view
	v.live = append(v.live, l.name)
	v.owned[l.name] = max(l.owned, 0)
	v.set[l.name], v.size[l.name] = l.set, l.size
	v.ident[l.name] = l.info.Leader.Identity
	if l.leaving {
		v.leave[l.name] = true
	}
	if l.handing > 0 {
		v.handing[l.name] = l.handing
	}
	switch {
	case l.longestBad != "":
		if w.badLongest[l.name] != l.longestBad {
			o.logger.Warn("leaderelection: a session's record says a longest lease duration known that does not read; it is taken to know only its own",
				"container", o.settings.Container, "blob", o.sessionBlob(l.name), "key", wire.MetaLongest, "value", l.longestBad)
		}
		j.badLongest[l.name] = l.longestBad
		v.knows[l.name] = l.info.DeclaredDuration
	case l.longest > 0:
		v.knows[l.name] = max(l.longest, l.info.DeclaredDuration)
	}
}

// learnDeaths keeps what the listing judged for the next: the sessions
// that died since the last (view.died), what was reported, the twins, and
// forgets the sessions no longer listed. A session the last listing showed
// alive and this one does not show at all was deleted, which only a dead
// session's blob is: its owner released it and deleted it in between.
func (o *ShardOwner) learnDeaths(w *sessionWatch, j *judging) {
	now := map[string]bool{}
	for _, id := range j.view.live {
		now[id] = true
	}
	for id := range w.live {
		if now[id] {
			continue
		}
		if !j.listed[id] {
			w.dead[id] = time.Now()
		}
		if _, dead := w.dead[id]; dead {
			j.view.died = append(j.view.died, id)
		}
	}
	for id := range j.pending {
		// Not dead yet: reported as died by the pass that marks it.
		if w.live[id] {
			now[id] = true
		}
	}
	w.live = now
	w.ignored = j.ignored
	w.badSeen = j.badSeen
	w.badLongest = j.badLongest
	w.twinETag = j.twinETag
	if sig := strings.Join(j.twins, ","); sig != w.twins {
		w.twins = sig
		if sig != "" {
			o.logger.Warn("leaderelection: another live session runs under this instance's identity; give each instance an identity of its own (WithIdentity)",
				"container", o.settings.Container, "prefix", o.prefix, "identity", o.opts.identity, "sessions", j.twins)
		}
	}
	forgetUnlisted(w.silence, j.listed)
	forgetUnlisted(w.unleased, j.listed)
	forgetUnlisted(w.revived, j.listed)
	forgetUnlisted(w.leasedDead, j.listed)
	for id, at := range w.dead {
		if time.Since(at) > max(deadFor, 10*o.settings.LeaseDuration) {
			delete(w.dead, id)
		}
	}
}

// breakSilentSession breaks the lease of a session whose ETag stood for the
// duration it declared, on condition that the ETag is still the one timed,
// and reports whether its lease has ended (broken now, or released or gone
// meanwhile): the session is dead once its end mark is written too.
func (o *ShardOwner) breakSilentSession(ctx context.Context, id string, sw *silenceWatch) bool {
	w := *sw
	*sw = silenceWatch{} // whatever happens next, this ETag's clock is spent
	lm := o.managerFor(o.sessionBlob(id), uuid.NewString())
	outcome, err := lm.breakIfUnchanged(ctx, w.etag)
	o.sessionMetrics.silentBreak(outcome)
	switch outcome {
	case breakDone:
		stood := time.Since(w.since)
		o.logger.Warn("leaderelection: broke the lease of a silent session: its ETag stood unchanged for the lease duration it declared; its shards are free",
			"container", o.settings.Container, "blob", lm.blob, "identity", w.leader.Identity,
			"declared", w.declared, "stood", stood.Round(time.Millisecond))
		o.emit(Event{Kind: SilentLeaseBroken, Term: w.leader, Silence: stood, Session: id})
		return true
	case noLease:
		// Released or deleted meanwhile.
		return true
	case etagChanged:
		o.logger.Debug("leaderelection: a session renewed just before it would have been broken", "blob", lm.blob)
	default:
		o.logger.Debug("leaderelection: could not break a silent session; reading it again", "blob", lm.blob, "error", err)
	}
	return false
}

// collect deletes the blob of a session that has stood without a lease, with
// the same ETag, for a lease duration on this instance's clock: dead, or
// abandoned before it was leased (its creator, if alive, finds it gone and
// starts another). Deleting it is safe at any time (see the top of
// shards.go); waiting a lease duration lets the other instances see it dead
// in their listings rather than look it up. One request, best effort. A
// dead session's blob found leased again (an acquire under its ID that
// reached the server late, or one by hand) is broken first, If-Match the
// ETag listed, once it has stood so for a lease duration (its owner marks
// it ended just before it releases it): nothing runs under a dead session,
// and its blob is then collected as any other.
func (o *ShardOwner) collect(ctx context.Context, w *sessionWatch, l listed, dead bool) {
	if l.info.Held() {
		// Not at first sight: its owner marks it ended just before it
		// releases it.
		u, ok := w.leasedDead[l.name]
		if !ok || u.etag != l.info.ETag {
			w.leasedDead[l.name] = unleasedSince{etag: l.info.ETag, since: l.info.Received}
			return
		}
		if dead && l.info.State == stateLeased && time.Since(u.since) >= o.settings.LeaseDuration {
			delete(w.leasedDead, l.name)
			res, err := o.managerFor(o.sessionBlob(l.name), uuid.NewString()).breakIfUnchanged(ctx, l.info.ETag)
			if res == breakDone {
				o.logger.Warn("leaderelection: broke the lease of a dead session's blob, leased again (an acquire under its ID that reached the server late, or one by hand); nothing runs under it",
					"container", o.settings.Container, "blob", o.sessionBlob(l.name))
			} else if err != nil {
				o.logger.Debug("leaderelection: could not break a dead session's lease", "blob", o.sessionBlob(l.name), "error", err)
			}
		}
		return
	}
	u, ok := w.unleased[l.name]
	if !ok || u.etag != l.info.ETag {
		w.unleased[l.name] = unleasedSince{etag: l.info.ETag, since: l.info.Received}
		return
	}
	if time.Since(u.since) < o.settings.LeaseDuration {
		return
	}
	delete(w.unleased, l.name)
	lm := o.managerFor(o.sessionBlob(l.name), uuid.NewString())
	callCtx, cancel := lm.call(ctx)
	defer cancel()
	err := lm.blobClient.Delete(callCtx, blobstore.DeleteOptions{Call: blobstore.Call{Op: "delete session"}, IfMatch: l.info.ETag})
	if err != nil && !blobstore.HasCode(err, blobstore.BlobNotFound, blobstore.ConditionNotMet) {
		o.logger.Debug("leaderelection: could not collect a dead session's blob", "blob", lm.blob, "error", lm.wrap(err))
		return
	}
	o.dropNotes(callCtx, l.name)
	o.dropHeld(callCtx, l.name)
}

// sessionState looks up a session that a shard's record names but the last
// listing of the sessions did not show. A session writes its record before
// it claims any shard, so such a session is either one that started after
// that listing (alive: its shard is owned) or one that ended since (dead
// once its end mark is written: markEnded) or whose blob is gone (dead).
// One request, two to write the mark; dead is remembered for good.
func (o *ShardOwner) sessionState(ctx context.Context, w *sessionWatch, id string) (dead bool, err error) {
	if _, ok := w.dead[id]; ok {
		return true, nil
	}
	lm := o.managerFor(o.sessionBlob(id), uuid.NewString())
	info, md, err := lm.inspect(ctx)
	if err != nil {
		return false, err
	}
	l := listed{name: id, info: info, md: md, record: info.Leader.Identity != "", ended: readRecord(lm.container, lm.blob, md).EndMark}
	switch {
	case !info.Exists, l.ended:
		dead = true
	case info.Held():
		dead = false
	case l.record || info.State == stateBroken:
		dead = o.markEnded(ctx, l)
	}
	if dead {
		w.dead[id] = time.Now()
	}
	return dead, nil
}

// markEnded writes the end mark on the record of session l, whose lease a
// listing (or a read) showed ended, l.md with leaderended added: If-Match
// the ETag seen, and with no lease ID, so that it lands only on a blob
// nobody leases, whose record is still the one seen (see the top of
// session.go). It reports whether the session is dead now: the mark written, by
// this instance or (a read then shows) by another, or its blob gone. A
// refusal because the blob is leased again (an acquire under the session's
// ID that reached the server late, or one by hand) leaves it alive: nobody
// has acted on its death, and it is timed again as any live session.
func (o *ShardOwner) markEnded(ctx context.Context, l listed) bool {
	lm := o.managerFor(o.sessionBlob(l.name), uuid.NewString())
	md := maps.Clone(l.md)
	if md == nil {
		md = map[string]*string{}
	}
	ended := time.Now().UTC().Format(time.RFC3339Nano)
	md[wire.MetaEnded] = &ended
	_, err := lm.writeUnleased(ctx, "mark session ended", l.info.ETag, md)
	switch {
	case err == nil:
		o.logger.Info("leaderelection: a session's lease ended without its end mark; wrote it: the session is dead for good",
			"container", o.settings.Container, "blob", lm.blob, "identity", l.info.Leader.Identity, "state", l.info.State)
		return true
	case gone(err):
		return true
	case errors.Is(err, ErrLeaseHeld):
		// Written meanwhile (another instance's mark?), or leased again.
		info, md, rerr := lm.inspect(ctx)
		if rerr == nil && (!info.Exists || readRecord(lm.container, lm.blob, md).EndMark) {
			return true
		}
	}
	o.logger.Debug("leaderelection: could not mark an ended session; the next listing judges it again", "blob", lm.blob, "error", err)
	return false
}

// forgetUnlisted drops from m the sessions the listing did not show.
func forgetUnlisted[V any](m map[string]V, listed map[string]bool) {
	maps.DeleteFunc(m, func(id string, _ V) bool { return !listed[id] })
}

// sameSetPeers is the live sessions of view, this one aside, that run this
// session's set and are not leaving: a shard one of them released (its
// lease available under its record) is one whose func returned, or whose
// release that session reports itself (a removal, a handover that failed:
// reportStopped), so a take of it is no news of this session's.
func (sm *shardManager) sameSetPeers(view sessionView) map[string]bool {
	digest, _ := sm.o.state.setSummary()
	peers := map[string]bool{}
	for _, id := range view.live {
		if id != sm.s.id && view.set[id] == digest && !view.leave[id] {
			peers[id] = true
		}
	}
	return peers
}
