package leaderelection

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/google/uuid"
)

// A session is one run of a ShardOwner on one instance: a blob of its own,
// P/sessions/<ID> under the owner's prefix P (BlobSettings.Blob), holding an
// infinite lease with the session's ID, renewed by rewriting the blob's
// metadata under that lease every RenewInterval: an ETag lease (see
// etaglease.go), whatever the LeaseDuration. The record it rewrites says who
// runs it, since when, the lease duration it declares, how many shards it
// holds, and which set of shards it runs (a digest, and the set's size).
// Every shard func runs under a context derived from the session's, so the
// session's safety deadline is every shard's.
//
// Other instances time a session's ETag from the listing of P/sessions/
// they make every poll, and break its lease once that ETag has stood for the
// duration the session declared, with If-Match on it: the followers' rule
// of silence.go.
//
// A session's end is written in its blob, and final. A session is dead once
// its record carries the end mark (leaderended), whatever its lease shows,
// or once its blob is gone; nothing else makes it dead, and no instance acts
// on a session's death (takes its shards) before it has seen one of the two.
// Its owner writes the mark under its lease as it ends (endTerm), before it
// releases it; an instance that finds a session's lease ended without the
// mark (broken by a follower, released by an owner whose mark failed)
// writes it, If-Match the ETag it saw and with no lease ID (markEnded): the
// write lands only on a blob nobody leases, whose record is still the one
// seen. The mark is needed because a lease's end is not: the server keeps
// no trace of a break, and an acquire that reaches it late (sent by the
// session's starter before it died, or by hand) takes the broken lease again
// under the session's ID, which would let a process restarted with the lease
// ID file resume a session the others had judged dead. Nobody removes a
// mark: a record carrying it is never written over by a session (recordTerm
// refuses, and every renewal is If-Match the ETag its own last write left,
// which the mark changed), and a process restarted with the file never
// resumes a marked session (resumeSession). See the top of shards.go.

// session is this instance's current session.
type session struct {
	id      string
	term    *termRunner // the session's lease, on its own blob, and its one term (run)
	leaving atomic.Bool // its record says it is leaving: it hands its shards on (see leave)

	// With a lease ID file (sessionfile.go): resumed says the session was
	// started by an earlier process, which held shards this one takes back
	// (takeBack); inherited is how many its record said, which this one's
	// record says too until they are taken back; keep says the session
	// ends by the caller's cancel, leaving its leases for the next process.
	resumed   bool
	inherited atomic.Int64
	keep      atomic.Bool

	// endList is, once its shards have stopped, the list (heldlist.go) of those
	// it released as it left instead of handing them on, if any: written
	// as it ends, for the others to take them from it (see endSession).
	endList atomic.Pointer[string]
}

// storage is how a ShardOwner reaches the account: its clients, and whether
// the account has answered. The clients are set as it is built; reached is
// atomic.
type storage struct {
	client  *blobstore.Client // the storage package's client: claims, releases, handovers, listings, other sessions
	reached atomic.Bool       // the account has answered

	// The session's lease is kept on connections of its own when the
	// library builds the transport: a renewal never waits behind claims,
	// releases and listings for a connection, nor for a new one to be
	// opened on a busy account (on Azurite, a new connection's first
	// answer waited up to 4 s while ten instances claimed 10,000 shards,
	// and every session's first renewal failed). On the caller's
	// transport or Client, sessionClient is a client on that.
	sessionClient *blobstore.Client
}

// closeIdle closes the idle pooled connections of the transports the
// library built (none for the caller's), and so their goroutines: Run does
// when it returns, and Inspect when Run is not running.
func (st *storage) closeIdle() {
	st.client.CloseIdleConnections()
	st.sessionClient.CloseIdleConnections()
}

// wrapListing is err, a failed listing or read of the storage package, as
// the owner returns it: a *StorageError that names the container and the
// owner's prefix (its settings' Blob).
func (o *ShardOwner) wrapListing(err error) error {
	return storageError(err, o.settings.Container, o.settings.Blob)
}

// managerFor returns a lease manager for one blob under the owner's prefix,
// proposing leaseID, on the owner's client: the shards' leases, and other
// sessions' (to break them), share one connection pool; this instance's
// own session's lease has one of its own (managerOn sessionClient).
func (o *ShardOwner) managerFor(name, leaseID string) *BlobLeaseManager {
	return o.managerOn(o.client, name, leaseID)
}

func (o *ShardOwner) managerOn(cc *blobstore.Client, name, leaseID string) *BlobLeaseManager {
	s := o.settings
	s.Blob = name
	var role BlobRole
	switch {
	case strings.HasPrefix(name, o.prefix+wire.SessionsDir):
		role = RoleSession
	case strings.HasPrefix(name, o.prefix+wire.ShardsDir):
		role = RoleShard
	}
	m := newManagerOn(s, cc, role, leaseID, o.logger, o.opts.seams.boot)
	if o.reached.Load() {
		// A DNS or TLS failure is an outage now, not a misspelt account:
		// the session's client too, which may not have been answered yet.
		cc.MarkReached()
	}
	return m
}

func (o *ShardOwner) sessionBlob(id string) string { return wire.SessionBlob(o.prefix, id) }
func (o *ShardOwner) shardBlob(name string) string { return wire.ShardBlob(o.prefix, name) }

// startSession starts a session: the one named in the lease ID file, if it
// is still alive (resumeSession, sessionfile.go); otherwise a fresh ID, its
// blob (created, never re-created: a session whose blob is gone is dead),
// and the infinite lease on it. The session counts only once its term (run) has
// written its record.
func (o *ShardOwner) startSession(ctx context.Context) (*session, Grant, error) {
	if o.idFile != nil {
		s, g, ok, err := o.resumeSession(ctx)
		if ok || err != nil {
			return s, g, err
		}
	}
	id := uuid.NewString()
	if err := o.recordSessionID(id); err != nil {
		return nil, Grant{}, err
	}
	s := o.newSession(id)
	lm := s.term.blob()
	etag, err := lm.createBlob(ctx)
	if err != nil {
		if o.hadRecord.Load() && gone(err) {
			o.sawDeletion("a new session found the container gone")
		}
		if err := lm.ensureBlob(ctx); err != nil {
			return nil, Grant{}, err
		}
	}
	if etag == "" {
		// Created by an attempt whose answer was lost, or just now with
		// its container: read its ETag. One that carries a record is no
		// new session's: this ID is spent.
		info, err := lm.Inspect(ctx)
		switch {
		case err != nil:
			return nil, Grant{}, err
		case !info.Exists || info.Leader.Identity != "":
			return nil, Grant{}, &StorageError{Op: "acquire session lease", Container: lm.container, Blob: lm.blob,
				detail: "the new session's blob is gone, or carries a record", kind: ErrTransient}
		}
		etag = info.ETag
	}
	var g Grant
	for attempt := 0; ; attempt++ {
		// On condition of the new blob's ETag, which its first record
		// write changes: an acquire that reaches the server late (this
		// one, sent again below if its answer is lost) takes the session's
		// lease again only while it carries no record, and a session with
		// no record is never resumed (see the top of this file).
		g, err = lm.acquire(ctx, etag, blobstore.Call{Op: "acquire session lease", Held: append([]string{blobstore.ConditionNotMet}, heldCodes...)})
		if err == nil {
			break
		}
		if blobstore.HasCode(err, blobstore.BlobNotFound, blobstore.ContainerNotFound) {
			// Collected as abandoned between its creation and now: this
			// ID is spent (a session blob is never created twice).
			return nil, Grant{}, &StorageError{Op: "acquire session lease", Container: lm.container, Blob: lm.blob,
				StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: sdkError(err)}
		}
		err = lm.wrap(err)
		// The same ID's acquire is granted again: one whose answer was
		// lost may be retried. After that the ID is given up; a lease it
		// may hold carries no record and is broken as silent.
		if !errors.Is(err, ErrTransient) || attempt > 0 || !clock.Sleep(ctx, max(o.settings.RetryInterval/4, 100*time.Millisecond)) {
			return nil, Grant{}, err
		}
	}
	o.reached.Store(true)
	return s, g, nil
}

// newSession builds session id's lease manager and the term runner that runs it.
func (o *ShardOwner) newSession(id string) *session {
	lm := o.managerOn(o.sessionClient, o.sessionBlob(id), id)
	lm.alwaysETag = true
	s := &session{id: id}
	lm.extraMetadata = func(md map[string]*string) {
		n := max(o.ownedCount(), int(s.inherited.Load()))
		digest, size := o.setSummary()
		wire.SessionFields{Owned: n, Set: digest, Size: size, Handing: o.handingCount(), Seen: o.seenMax.Load(),
			Longest: max(o.settings.LeaseDuration, time.Duration(o.longestD.Load())), Leaving: s.leaving.Load()}.Put(md)
	}
	emit := func(e Event) {
		switch e.Kind {
		case StartedLeading:
			e.Kind = SessionStarted
		case StoppedLeading:
			e.Kind = SessionEnded
		default:
			return
		}
		e.Session = id
		o.emit(e)
	}
	s.term = &termRunner{lease: lm, logger: o.logger.With("session", id), metrics: o.sessionMetrics, identity: o.opts.identity,
		emit: emit, kind: runsSession, prefix: o.prefix,
		hooks: termHooks{
			renewSoon:    make(chan chan<- error),
			windDown:     o.settings.handoffGrace(),
			afterRelease: func(ctx context.Context) { o.endSession(ctx, s) },
		}}
	if o.idFile != nil {
		s.term.hooks.ending = o.sessionEnding(s)
	}
	return s
}

// run runs the session's one term: its func is the shard loop (manage).
func (s *session) run(ctx context.Context, o *ShardOwner, g Grant) (StopReason, error) {
	return s.term.run(ctx, g, func(ctx context.Context) error { return o.manage(ctx, s) })
}

// endSession cleans up after a session's term, its lease released (unless
// it was lost): it deletes the blob so that the listing does not grow with
// every restart, within what is left of the release's window (ctx: see
// endWindow). Best effort: a blob still leased (its release failed), or not
// reached in time, is collected later by another instance.
func (o *ShardOwner) endSession(ctx context.Context, s *session) {
	lm := s.term.blob()
	ctx, cancel := lm.call(ctx)
	defer cancel()
	if text := s.endList.Load(); text != nil {
		// It left, and released shards it could not hand on in time: its
		// list names them, and its blob stays, released, so that the
		// others see it dead and take them from the list (takeFromDead)
		// rather than find them at their next listings, which at 10,000
		// shards came a minute later. They collect both.
		if err := o.putHeld(ctx, s.id, *text); err == nil {
			o.dropNotes(ctx, s.id)
			return
		}
	}
	if err := lm.blobClient.Delete(ctx, blobstore.DeleteOptions{Call: blobstore.Call{Op: "delete session"}}); err != nil && !blobstore.HasCode(err, blobstore.BlobNotFound) {
		o.logger.Debug("leaderelection: could not delete the ended session's blob; another instance collects it",
			"container", lm.container, "blob", lm.blob, "error", lm.wrap(err))
		return
	}
	o.dropNotes(ctx, s.id)
	o.dropHeld(ctx, s.id)
}

// listed is one blob of a listing under the prefix, as far as leases go.
type listed struct {
	name    string    // the session ID or the shard name: the blob's name after its directory
	info    LeaseInfo // lease state and kind, ETag, the record, when the page arrived
	session string    // a shard's record: the session that wrote it ("" if none)
	owned   int       // a session's record: how many shards it held (-1 if none)
	set     string    // a session's record: its set's digest ("" if none: an older version)
	size    int       // a session's record: how many shards its set has (-1 if none)
	leaving bool      // a session's record: it hands its shards on, to end
	handing int       // a session's record: how many shards it is handing over (0 if it does not say)
	seen    int64     // a session's record: the highest term its instance saw on any shard (0 if it does not say)
	seenBad string    // a session's record: that highest term, if it does not read or no claim reaches it (not trusted)
	// longest is, in a session's record, the longest lease duration its
	// instance knows a session declared (0 if it does not say, or it does
	// not read: then longestBad, not trusted). See mayRun.
	longest     time.Duration
	longestBad  string
	ended       bool               // a session's record carries the end mark: the session is dead, whatever its lease
	md          map[string]*string // the metadata as listed: a session's end mark writes it back
	sessionTerm int64              // a shard's record: its claiming session's term (0 if none: handed to it)
	record      bool               // the blob carries a record: its holder wrote it under its lease
	rec         record             // the record as read (record.go): its role, and what does not read
}

// list reads every blob under dir (wire.SessionsDir or ShardsDir) with its
// metadata, listPage a page, and calls fn for each in name order. Each page is
// one request, bounded by RequestTimeout; Received is when its page arrived.
// It returns errContainerGone if the container is gone.
func (o *ShardOwner) list(ctx context.Context, dir string, fn func(listed)) error {
	full := o.prefix + dir
	timeout := o.settings.RequestTimeout
	if dir == wire.ShardsDir {
		timeout = max(timeout, listPageTimeout)
	}
	for page, err := range o.client.List(ctx, blobstore.ListOptions{
		Call:     blobstore.Call{Op: "list " + strings.TrimSuffix(dir, "/"), Timeout: timeout},
		Prefix:   full,
		Metadata: true,
		PageSize: listPage,
	}) {
		if blobstore.HasCode(err, blobstore.ContainerNotFound, blobstore.ContainerBeingDeleted) {
			return errContainerGone // nothing there: not yet, or no more (shardfloors.go)
		}
		if err != nil {
			return o.wrapListing(err)
		}
		o.reached.Store(true)
		for _, item := range page.Items {
			if !strings.HasPrefix(item.Name, full) {
				continue
			}
			l := listedItem(strings.TrimPrefix(item.Name, full), item.Props)
			l.rec = readRecord(o.settings.Container, item.Name, item.Metadata)
			l.rec.fill(&l.info)
			l.record = l.info.Leader.Identity != ""
			l.ended = l.rec.EndMark
			l.md = item.Metadata
			fn(l)
		}
	}
	return nil
}

// listPage is how many blobs a List Blobs page asks for: a fifth of Azure's
// maximum. A page is one piece of work for the server, which other requests
// may wait behind (on Azurite, three instances listing 10,000 shards in
// pages of 5,000 held a session's write up to 2.2 s; in pages of 1,000, at
// most 0.46 s, for the same total), and sessions must get their writes
// through while ownership moves.
var listPage int32 = 1000

// listPageTimeout bounds a page of the shards' listing: a page may take a
// busy account seconds, and nothing waits on it that a deadline protects.
const listPageTimeout = 30 * time.Second

// listedItem is what a listing says of a blob: its properties as listed,
// ETag quoted as a header gives it (blobstore.QuotedETag), and when its page
// arrived.
func listedItem(name string, p blobstore.Props) listed {
	l := listed{name: name}
	l.info = LeaseInfo{Exists: true, Received: p.Received}
	l.info.State, l.info.Status, l.info.Duration = leaseOf(p)
	switch l.info.Duration {
	case durationFixed:
		l.info.Kind = NativeLease
	case durationInfinite:
		l.info.Kind = ETagLease
	}
	l.info.ETag = p.ETag
	l.info.LastModified = p.LastModified
	f := wire.ParseListed(p.Metadata)
	l.session, l.owned, l.set, l.sessionTerm, l.leaving, l.handing, l.size = f.Session, f.Owned, f.Set, f.Gen, f.Leaving, f.Handing, f.Size
	l.seen, l.seenBad = f.Seen, unlessSecret(f.SeenBad)
	l.longest, l.longestBad = f.Longest, unlessSecret(f.LongestBad)
	return l
}

// isSession reports whether a blob under the sessions prefix says it is a
// session: its role, or (written by a version before roles) its record's
// count of shards held.
func (l listed) isSession() bool {
	return l.rec.Role == wire.RoleSession || l.rec.Role == "" && l.owned >= 0
}
