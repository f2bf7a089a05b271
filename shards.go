package leaderelection

import (
	"context"
	"errors"
	"fmt"

	"github.com/blobelect/leaderelection/internal/balance"
	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/blobelect/leaderelection/internal/wire"
)

// Why no two funcs of one shard ever act at once, and why a shard's term
// fences: the shard protocol's safety argument, as numbered rules, each
// pinned to the code that keeps it. It builds on the term's, at the top of
// renew.go (the safety deadline and the two-stage stop, the fencing term,
// ETag leases and the followers' rule, the blobs' roles), which points back
// here; each part's rules are told in full at the top of the file that
// holds its code (session.go, shardbalance.go, shardtake.go, heldlist.go,
// handoff.go, sessionfile.go, shardfloors.go).
//
// # Sessions and shards
//
//  S1. A session is an ETag lease on a blob of its own, whatever its
//      duration D, and its shard funcs run under contexts derived from its
//      own: each shard's lease context ends no later than the session's, at
//      S + D - StopMargin for the send time S of the session's last
//      confirmed write, so the rule at the top of renew.go covers every
//      shard with the session's one fuse. (start, shardtake.go)
//  S2. A shard's lease is infinite and never renewed. It passes to another
//      instance only by a release, sent after its func has returned
//      (releaseShard), or by a break (or a change of its ID, C4), which a
//      claimer makes only when the shard's record names a session that is
//      dead (D1). So a shard of a live, unmarked session is never free.
//
// # When a session is dead
//
//  D1. Dead means: its record carries the end mark, whatever its lease
//      shows, or its blob is gone (deleted only once unleased, or with its
//      container: V1); and no instance acts on a session's death before it
//      has seen one of the two. (sessionState, sessionjudge.go)
//  D2. The mark is written as the session ends: by its owner, under its
//      lease, after every shard func returned, just before it releases it
//      (endSession, session.go); or, once the lease has ended without it
//      (broken, or released with the owner's mark lost), by whoever finds it
//      so, with no lease ID and If-Match the ETag it saw, so that it lands
//      only on a blob nobody leases whose record is still that one
//      (markEnded, sessionjudge.go).
//  D3. A live session's lease is broken only by the followers' rule
//      (renew.go): on an ETag first seen at R, after its write was
//      processed, after S; at R + D or later, after the owner stopped every
//      shard func.
//  D4. A dead session stays dead, as its death is written. A lease's end
//      leaves no trace on the server, and an acquire that reaches it late
//      (one by hand; or the session's own first, sent by its starter before
//      it died, but that one is If-Match the new blob's ETag, which the
//      session's first record write changed, so it takes only a blob that
//      carries no record) takes a broken lease again under the session's
//      ID: a lease alone cannot say a session is over. Nobody removes a
//      mark: no session writes its record over one (recordTerm refuses;
//      every renewal is If-Match the ETag its own last write left, which the
//      mark changed, and a renewal that finds the mark takes its lease for
//      lost), and a process restarted with the lease ID file never resumes
//      a session that carries one (R2). A session whose lease was broken (by
//      the followers' rule, or by hand) and leased again under its ID before
//      anyone marked it is not dead, and may be resumed: that is safe, as
//      nobody has acted on its death. A dead session's blob found leased
//      again, for a lease duration, is broken, as nothing runs under it, and
//      collected; one seen rewritten without its mark (only another writer
//      can) stays dead to whoever knew it dead, and is reported. Its owner
//      starts a new session, with a new ID and a new blob; a session's blob
//      is never created twice.
//  D5. A session that a listing did not show is not dead: a session writes
//      its record before it claims any shard, so a shard that names it names
//      a session that existed; missing from the sessions, listed first (the
//      listing of the shards that follows is no snapshot with it), it is a
//      new one, unless a lookup finds its blob gone, or marked (or unleased
//      after its record was written, and marks it). (lookUpUnknown,
//      shardlist.go)
//
// # Claims (shardtake.go)
//
//  C1. The break, the acquire and the shard's record write that make a
//      claim are each conditional (If-Match) on the ETag the listing showed,
//      or a read of the one blob showed (a session a few shards short reads
//      the others' lists, then each shard that none names, and claims only
//      those that read free, as from a listing; the lists decide only which
//      blobs it reads: probeUnlisted, heldlist.go). A claim made meanwhile
//      has written its record, and so changed the ETag, before its func
//      started: then the break fails and that claim stands. A claim that
//      has not written yet has not started its func, and its write fails on
//      the broken lease. (takeLease, writeShardRecord)
//  C2. Every claim proposes a lease ID of its own, derived from its
//      session, the session's term, the shard and the term it records, and
//      a session never proposes a term twice for a shard
//      (wire.ClaimLeaseID, propose): a release whose answer was lost may
//      reach the server later, and must not end a later claim of the same
//      shard by the same session. (claimOne)
//  C3. A shard lease that no live holder's record names (no record, or the
//      record of the very session that looks at it and does not hold it: a
//      claim that failed half-way) may be broken at any time. A claimer
//      waits until its ETag has stood for D, not to fight a claim in flight,
//      and so does the session that record names, which breaks it then even
//      at its share, as nobody else can tell that it holds nothing.
//      (judgeShard, shardlist.go; freeStrays, shardclaim.go)
//  C4. A dead session's shards named in its list of what it held
//      (heldlist.go) are claimed without a listing: by a change of the
//      lease's ID from the one that session derived for it
//      (wire.ClaimLeaseID, HandoffLeaseID) to the claim's own, then the
//      record, each If-Match the ETag the list gives, that of the record the
//      dead session ran the shard under. Nobody but that session uses an ID
//      derived for it (a giver hands it a shard under one only once the
//      giver's func has returned and the record names it), so the change
//      succeeds only on a lease that session still held, whose func is not
//      running now that it is dead; and only if its record is still that
//      one, not a handover's it wrote after (whose term the claim would
//      repeat). (takeFromDead, shardlist.go; takeLease)
//  C5. Nothing is ever broken on a list's word: the list is not read from
//      the shard's blob, so a list that is old, or not ours, takes nothing
//      from anyone. A shard it names whose lease is not that session's may
//      still be free (released by a session that left, whose last list
//      names what it released): an acquire, If-Match the same ETag, takes it
//      as a claim takes any free shard, once a read of the blob has shown
//      that ETag and the list's term (its next term follows the list's: a
//      list that says another term than the blob, at the blob's ETag, was
//      rewritten by another writer, and is reported and not trusted).
//      (listAgrees)
//  C6. The shares, and the groups of sessions that agree on the set of
//      shards (shardbalance.go, internal/shardplan), decide only who tries to
//      claim what: whether a shard is free is judged against every live
//      session, whatever set it runs, and every claim is conditional as
//      above, so nothing here depends on them. Nor on the term a claim
//      records (the listed number + 1, or more: record.go), only on the
//      ETag.
//
// # A container deleted under the fleet (shardfloors.go)
//
//  V1. A container deleted under the fleet takes every blob in it, leased
//      or not: the one way a live session's blob, or a held shard's, goes (a
//      delete needs the lease ID). The sessions that ran then renew no more
//      (a session's blob is never created twice) and stop by their fuses, at
//      S + D - StopMargin for writes sent before the deletion.
//  V2. A shard blob that an instance saw terms on and finds gone, or
//      created again (marked so, and carrying no term's record), it takes
//      only once that blob's ETag has stood unchanged, as it watched it, for
//      longer than the longest D any session it listed declared, timed from
//      the first answer that showed it that ETag, or later (a listing,
//      during its quiet or after, its own create or raise of the seed, or
//      a claim's first try): that blob
//      was created after the deletion, so every session that ran the shard
//      before has stopped by then, noticed or not; a doomed session's own
//      claims wait so too. (stoodRecreated, claimFloor)
//  V3. An instance that sees the deletion also claims nothing with its next
//      session for as long (quiet), and seeds meanwhile each shard of its
//      set it saw terms on, or sent a record of (whose answer may have been
//      lost), with the highest of them, or raises another's seed to it
//      (quietList); and the first claim of a blob created again records a
//      term above the highest that every session's record, listed at each
//      pass, says its instance saw or sent on any shard (claimFloor). So the
//      first term after continues from the highest any of them saw or sent.
//  V4. The limit: a process that never saw the fleet before the deletion,
//      or a shard an instance never saw terms on, knows nothing of it, as
//      for the mutex's blob.
//
// # A shard handed straight on (handoff.go)
//
//  H1. A shard handed straight on (a join, a rebalance, a session leaving
//      as its caller ends Run) is never free on the way. Its giver, once the
//      shard's func has returned and while the lease is still its own,
//      writes the shard's record naming the receiver's session and the next
//      term, under its lease and If-Match the ETag its own record left, then
//      changes the lease's ID to one derived from the receiver's session,
//      the shard and that term. (transfer)
//  H2. From that write on, the record names a live session other than the
//      giver's, so no claimer breaks the lease, and the giver acts on it no
//      more: it sends the change, or, if that fails, a release with its own
//      ID, which frees the shard like any other.
//  H3. Only once the change is confirmed does the giver write the receiver
//      a note, in the receiver's own directory: from then on the lease has
//      an ID only the receiver uses, and nobody else can end it (the record
//      names a live session; an acquire finds it held). So a receiver that
//      reads such a note, written (so its listing says) by the library for a
//      session it knows live, starts the func at once, unless it may have
//      ended that lease itself: the release that follows an adoption whose
//      acquire failed, or a break of a shard recorded for it that it did not
//      hold, marks the term as its own first, and it never adopts such a
//      term (it asks whether a term is its own as it reserves the shard,
//      under one lock: a failed adoption gives up its reservation only once
//      it has marked the term, and releases the lease after that). (adoptOne,
//      reserve and ownerState.reserve, record)
//  H4. Any other way it learns of a shard recorded for it (its listing of
//      the shards; a note it cannot vouch for), it starts the func only once
//      an acquire with the derived ID, If-Match the ETag of that record, has
//      succeeded: the record is then still the one the giver wrote after its
//      func returned, and nobody has claimed the shard since (a claim writes
//      its record, changing the ETag, before its func starts). (adoptOne)
//  H5. A session never adopts a term it recorded, or adopted, itself, so
//      each term runs once, however often it reads a note that names it (a
//      giver keeps one note per receiver, rewritten as it hands more on, each
//      shard in it for a while after). The mark of a session that is leaving
//      only says who looks where and when. A leaving session's shard funcs
//      run until each is handed on, under its session's fuse as ever.
//
// # A session resumed after a restart (sessionfile.go)
//
//  R1. A ShardOwner's session resumed after a restart (WithLeaseIDFile)
//      rests on the same lock (resuming after a restart, at the top of
//      renew.go): the process that holds the file knows that every process
//      that ran the session before it is dead, and so are all the shard
//      funcs they ran. The file names the session before the session's blob
//      is created and is emptied before its release is sent, so a session it
//      names never had a release sent; a stop by the caller sends nothing at
//      all, and leaves the session's lease and its shards' as they are.
//  R2. The new process writes the session's record under its lease ID,
//      If-Match the ETag it read; a follower breaks a silent session only
//      If-Match the ETag it timed, so exactly one of the two succeeds: the
//      session lives on, with the deadline (renew.go) from that write, or it
//      is dead, its shards are free, and the new process starts a new
//      session. A session whose record carries the end mark is dead whatever
//      its lease shows, and is never resumed: the process reads the mark and
//      starts a new session, or, if the mark was written after its read, the
//      term's write over it is refused; and a session whose container is
//      gone was deleted under the fleet, which the process then waits out as
//      any instance that saw it. (resumeSession)
//  R3. A resumed session first takes back, before it claims or adopts
//      anything, the shards its list names (heldlist.go), as a survivor takes
//      a dead session's from its list (C4): a change of the lease's ID from
//      the one the list implies, which only the dead process used, then the
//      next term recorded. (takeBack)
//  R4. It then lists the shards, and takes back each other one whose record
//      names it as a claimer takes a dead session's: break, acquire with an
//      ID of its own, record the next term, each If-Match the ETag listed,
//      so that whatever the dead process left in flight (a release, a
//      transfer, a claim's write) fails on the new ID or on the ETag, and the
//      term still fences. Where the lease still has the ID the record
//      implies (the dead process's claim, or the transfer to it), a change
//      of that ID to one of its own, If-Match the same ETag, does what the
//      break and the acquire do; its new ID derives from the session's new
//      term, which no earlier process of the session used.
//  R5. Each term that listing shows is marked as the session's own, so it
//      is never adopted, and a resumed session adopts a handed shard only by
//      the acquire If-Match (never at once from a note): the dead process may
//      have adopted that term, run it and let it go, and the acquire fails if
//      anyone wrote the record since. A term handed to the session after
//      that listing was handed after the dead process died, so it never ran
//      it. (adoptOne)
//
// # What sessions add to the limits at the top of renew.go
//
//  L1. A shard's lease broken by hand is not noticed by its holder, which
//      has no renewal of it to fail, until it next lists the shards
//      (checkHeld, shardlist.go), which a settled fleet seldom does: never
//      break one by hand (leaderctl refuses to).

// NewShardOwner validates settings, the shard names and the options, and
// returns an owner that runs fn for the shards this instance holds. Every
// invalid setting is reported; a nil fn, an invalid identity or shard name,
// a shard named twice, and WithStallTimeout (which a ShardOwner does not
// support) are errors too. No network call is made. With [WithLeaseIDFile]
// an instance restarted in place keeps its session and its shards.
//
// settings.Blob is the prefix of the owner's blobs. LeaseDuration is the
// sessions' lease, always an [ETagLease] here (3 s to 24 h; default 15 s):
// how long a crashed instance's shards wait, and how long a cut-off
// instance's shard funcs run on. RenewInterval is how often a session
// writes, RetryInterval how often the sessions are listed, StopMargin how
// long before its session could be broken every shard func's context is
// cancelled.
//
// Shard names are letters, digits and - _ . ~ : @ =, with / between
// non-empty segments, at most 256 characters, not ending with a dot.
func NewShardOwner(settings BlobSettings, shards []string, fn func(ctx context.Context, shard string) error, opts ...Option) (*ShardOwner, error) {
	var errs []error
	if fn == nil {
		errs = append(errs, errors.New("leaderelection: the shard func is nil"))
	}
	if err := settings.validate(true); err != nil { // the session's lease is an ETag lease, whatever its duration
		errs = append(errs, err)
	}
	if maxPrefix := 1024 - 1 - len(wire.ShardsDir) - wire.MaxName; len(settings.Blob) > maxPrefix {
		errs = append(errs, &SettingsError{Field: "Blob", Rule: fmt.Sprintf("is the ShardOwner's prefix: at most %d characters long, got %d", maxPrefix, len(settings.Blob))})
	} else if err := checkOwnName(settings.Blob, true); err != nil {
		errs = append(errs, err)
	}
	o := buildOptions(opts)
	if err := checkIdentity(o.identity); err != nil {
		errs = append(errs, err)
	}
	if o.stallTimeout != 0 {
		errs = append(errs, errors.New("leaderelection: WithStallTimeout is not supported by a ShardOwner"))
	}
	if err := checkLeaseIDFile(o.leaseIDFile, o.leaseIDFileSet); err != nil {
		errs = append(errs, err)
	}
	if o.prioritySet {
		// Every instance runs its share of the shards: there is no
		// single leader to prefer.
		errs = append(errs, errors.New("leaderelection: WithPriority is not supported by a ShardOwner: every instance holds its fair share"))
	}
	set, err := checkShardNames(shards)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	settings = settings.withDefaults()
	// Claims, releases, transfers and the listing run at once: on the
	// library's transport, keep their connections rather than open new ones.
	cc, err := settings.storeClient(claimParallel + releaseAtOnce + handoverPerGiver + 4)
	if err != nil {
		return nil, err
	}
	scc, err := settings.storeClient(0)
	if err != nil {
		return nil, err
	}
	own := &ShardOwner{
		settings: settings,
		prefix:   settings.Blob + "/",
		fn:       fn,
		opts:     o,
		logger:   o.logger,
		storage:  storage{client: cc},
		wake:     make(chan struct{}, 1),
		release:  make(chan struct{}, releaseAtOnce),
	}
	own.state = newOwnerState(set, &own.fleetMemory)
	own.storage.sessionClient = scc
	own.sessionMetrics = newMetrics(o.meterProvider, settings.Container, own.prefix+wire.SessionsDir)
	own.shardMetrics = newMetrics(o.meterProvider, settings.Container, own.prefix+wire.ShardsDir)
	own.counts = newShardCounters(own.shardMetrics)
	return own, nil
}

// Identity is this instance's identity (see [WithIdentity]), written in its
// session's and its shards' records.
func (o *ShardOwner) Identity() string { return o.opts.identity }

// Settings returns the settings in force, with defaults applied.
func (o *ShardOwner) Settings() BlobSettings { return o.settings }

// SetShards replaces the set of shards, at any time, on any instance. A
// shard that leaves the set has its func's context cancelled with
// [ErrShardRemoved] and its lease released once the func returns; a new one
// is claimed by whichever instance is below its share. Names are checked as
// by NewShardOwner; on error nothing changes.
//
// Every instance should come to have the same set. While they disagree (a
// rolling update), each counts its fair share among the instances that have
// the same set as its own, and runs only shards of its own set: each shard
// of some live instance's set runs on one of the instances that have it
// (within about LeaseDuration + RetryInterval), a shard in no live
// instance's set stops, and the spread is within one inside each group of
// instances that agree, and across all of them again once they all agree.
func (o *ShardOwner) SetShards(shards []string) error {
	set, err := checkShardNames(shards)
	if err != nil {
		return err
	}
	o.state.setShards(set, balance.SetDigest(set))
	o.poke()
	return nil
}

// Shards returns the set of shards, sorted.
func (o *ShardOwner) Shards() []string { return o.state.shards() }

// Owned returns the shards whose func runs on this instance now, sorted,
// including those asked to stop and not yet returned.
func (o *ShardOwner) Owned() []string { return o.state.owned() }

// Session returns the ID of this instance's current session, "" between
// sessions.
func (o *ShardOwner) Session() string { return o.state.sessionID() }

// Run runs sessions until ctx is done, and the funcs of the shards each
// session holds. It returns ctx.Err() when ctx is done, after every shard
// func has returned, every shard's lease and then the session's have been
// released (so other instances take the shards within a RetryInterval), or
// their time ran out (below); or
// an error matching [ErrPermanent] when storage refuses us for good (bad
// credentials, missing permissions). Transient storage failures are retried
// forever with capped, jittered backoff.
//
// Each shard func runs under a context derived from ctx that carries the
// shard's term (see [TermFromContext]: its number is the shard's fencing
// token, one more than the last on the shard's blob). It is cancelled when
// ctx is, when the shard is handed over ([ErrShardHandedOver]) or removed
// ([ErrShardRemoved]): those ask the func to stop while the shard is still
// ours, and its lease is released once it returns. What means stop now, the
// shard may pass to another instance, cancels [LeaseContext] too: the
// session's safety deadline ([ErrRenewDeadline]: send time of its last
// confirmed write + LeaseDuration - StopMargin), or the session's or the
// shard's lease found lost ([ErrLeaseLost]). A shard func must stop acting
// within StopMargin of its LeaseContext ending. A func that returns by
// itself (nil or an error, which is logged) releases the shard, which this
// instance does not claim again for 1 to 1.25 RetryIntervals. A panic in a
// shard func releases that shard, then every other shard func is asked to
// stop; once all have returned and the leases are released the panic
// propagates from Run.
//
// With [WithLeaseIDFile], when ctx is done nothing is handed on or
// released: every shard func is asked to stop, and once all have returned
// Run returns, leaving the session and its shards to the next process
// started with the file, which resumes them: it takes back the shards whose
// record names the session before it claims any other. A second
// Run on the file while one holds it, here or in another process, returns
// an error matching [ErrLeaseIDFileLocked] at once. Without the file:
//
// When ctx is done and other sessions run the same set, the shards are
// first handed straight on to them ([ErrShardHandedOver]): the session's
// record says it is leaving, the others read that within a RetryInterval,
// and each shard func is then asked to stop in turn, and its shard handed
// to another session as it returns; for RetryInterval + 2 × RequestTimeout
// at most, after which the funcs left are asked to stop as below.
//
// Once every shard func has returned after ctx is done (or once ctx is
// done, if none runs), Run returns within 2 × RequestTimeout, storage
// reachable or not, whatever the number of shards: the shards' releases,
// sent releaseAtOnce (16) at a time, share one RequestTimeout, and the
// session's end mark, release and blob deletion another (see
// [BlobSettings.RequestTimeout]). A shard whose release was not sent in
// time is freed by the end of the session.
//
// A session that ends (its deadline passed, it was broken as silent) ends
// every shard func; once all have returned the instance starts a new
// session, with a new ID, and claims its share again. A shard func is never
// started while an earlier run of it on this instance is still running.
// No goroutine started by Run outlives it. Calling Run again while it runs
// returns an error that matches [ErrAlreadyRunning] and reads
// "leaderelection: ShardOwner.Run is already running on this ShardOwner".
func (o *ShardOwner) Run(ctx context.Context) error {
	if !o.running.CompareAndSwap(false, true) {
		return errShardOwnerRunning
	}
	defer func() {
		o.running.Store(false)
		// Only then: an Inspect that returned while Run ran left its
		// connection to be closed here.
		o.storage.closeIdle()
	}()
	unlock, err := o.lockSessionFile()
	if err != nil {
		return err
	}
	defer unlock()
	defer o.counts.observe(o)()
	s := o.settings
	backoff := s.RetryInterval
	maxBackoff := max(s.RetryInterval, min(s.LeaseDuration, maxLeaseDuration))
	var failing failureLog
	for ctx.Err() == nil {
		sess, g, err := o.startSession(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrPermanent):
			o.logger.Error("leaderelection: giving up: storage refused the session", "container", s.Container, "prefix", o.prefix, "error", err)
			return err
		case err != nil:
			failing.failed(o.logger, "leaderelection: cannot start a session; retrying with backoff", "container", s.Container, "prefix", o.prefix, "error", err)
			clock.Sleep(ctx, clock.Jitter(backoff))
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		failing.recovered(o.logger, "leaderelection: storage reachable again", "container", s.Container, "prefix", o.prefix)
		backoff = s.RetryInterval
		reason, err := sess.run(ctx, o, g) // and endSession, in the same window as its release
		if mgrErr := o.state.takeMgrErr(); mgrErr != nil {
			return mgrErr
		}
		if err != nil {
			return err
		}
		if ctx.Err() == nil {
			o.logger.Warn("leaderelection: session ended; every shard func has returned; starting a new session",
				"container", s.Container, "session", sess.id, "reason", reason)
		}
	}
	return ctx.Err()
}
