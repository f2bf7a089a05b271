package leaderelection

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/google/uuid"
)

// Static membership: a ShardOwner restarted in place keeps its session and
// its shards (WithLeaseIDFile).
//
// The file holds the ID of the instance's session, which is also the
// session's lease ID, under the flock a mutex's file uses (resume.go),
// held for the whole of Run: a process that gets the lock knows that every
// earlier holder has exited. The ID is stored, durably, before the
// session's blob is created, and the file moves on (is emptied, durably)
// before the session's lease is released, so it never names a session
// whose release may be in flight. When Run ends by the caller's cancel, the
// session hands nothing on and releases nothing: every shard func is asked
// to stop, and once all have returned Run returns, leaving the session's
// lease, its record and its shards' leases as they are, for the next
// process. If none comes within LeaseDuration, the other instances break
// the silent session and take its shards, as after a crash.
//
// The next process (resumeSession) reads the session's blob: if it is still
// leased, and its record carries no end mark (a session so marked is dead
// for good, whatever its lease shows: session.go), it writes the session's
// record under its lease ID, If-Match the ETag it read, as a renewal does.
// Followers break a silent session only If-Match the ETag they timed, and
// mark it ended only If-Match the ETag they saw, so exactly one of the two
// succeeds: the session is resumed, or it is not and a new one starts. A resumed session
// then takes back every shard whose record names it (takeBack), before it
// claims or adopts anything.

// lockSessionFile takes the lease ID file for one Run and reads the session
// ID it holds ("" if none). unlock closes it, which drops the lock.
func (o *ShardOwner) lockSessionFile() (unlock func(), err error) {
	path := o.opts.leaseIDFile
	if path == "" {
		return func() {}, nil
	}
	f, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	id, err := readLeaseID(f, path)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	o.idFile, o.fileID = f, id
	return sync.OnceFunc(func() {
		_ = f.Close()
		o.idFile, o.fileID = nil, ""
	}), nil
}

// recordSessionID stores id (a new session's, or "" as a session ends) in
// the lease ID file, durably: a new session's before its blob is created,
// so that a process dying after finds it; "" before a session's release is
// sent, so that no process resumes a session whose release may reach the
// server after it resumed.
func (o *ShardOwner) recordSessionID(id string) error {
	if o.idFile == nil {
		return nil
	}
	path := o.opts.leaseIDFile
	if err := writeLeaseID(o.idFile, path, id); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return err
	}
	o.fileID = id
	return nil
}

// resumeSession resumes the session the lease ID file names if its blob is
// still leased and says it is a session with a record: ok reports whether
// it did. The resumed session is secured by its term's first write (its record
// under its lease ID, If-Match the ETag then read); until that succeeds
// nothing runs, and if it fails the session ends and a new one starts.
func (o *ShardOwner) resumeSession(ctx context.Context) (s *session, g Grant, ok bool, err error) {
	id := o.fileID
	if id == "" {
		return nil, Grant{}, false, nil
	}
	s = o.newSession(id)
	lm := s.term.blob()
	props, err := lm.blobClient.Properties(ctx, blobstore.Call{Op: "read session"})
	switch {
	case blobstore.HasCode(err, blobstore.ContainerNotFound, blobstore.ContainerBeingDeleted):
		// The container this instance's session ran in was deleted: the
		// sessions that ran then may still run their shards (shardfloors.go).
		o.sawDeletion("the session in the lease ID file found the container gone")
	case blobstore.HasCode(err, blobstore.BlobNotFound):
	case err != nil:
		return nil, Grant{}, false, lm.wrap(err)
	default:
		rec := readRecord(lm.container, lm.blob, props.Metadata)
		leased := props.LeaseState == blobstore.StateLeased && props.LeaseDuration == blobstore.DurationInfinite
		// A session whose record carries the end mark is dead for good,
		// even leased again under its ID (session.go): never resumed.
		if leased && rec.Role == wire.RoleSession && rec.Term.Identity != "" && !rec.EndMark {
			if n, err := strconv.Atoi(wire.Value(props.Metadata, wire.MetaOwned)); err == nil && n > 0 {
				s.inherited.Store(int64(n))
			}
			s.resumed = true
			o.logger.Info("leaderelection: resuming the session in the lease ID file", "container", o.settings.Container,
				"prefix", o.prefix, "session", id, "shards", s.inherited.Load())
			return s, lm.grant(id, time.Now(), lm.boot()), true, nil
		}
	}
	o.logger.Info("leaderelection: the session in the lease ID file has ended; starting a new one", "container", o.settings.Container,
		"prefix", o.prefix, "session", id)
	return nil, Grant{}, false, nil
}

// sessionEnding decides how session s ends (see termHooks.ending):
// kept for the next process if the caller ended Run with its lease still
// held; otherwise released, once the file has moved on.
func (o *ShardOwner) sessionEnding(s *session) func(lost bool) endHow {
	return func(lost bool) endHow {
		if s.keep.Load() && !lost {
			o.logger.Info("leaderelection: session kept for the next process with the lease ID file; its shards stay held",
				"container", o.settings.Container, "prefix", o.prefix, "session", s.id, "file", o.opts.leaseIDFile)
			return endKeep
		}
		if err := o.recordSessionID(""); err != nil {
			o.logger.Error("leaderelection: could not empty the lease ID file, so the session's lease is not released; other instances break it once it has stood silent for its lease duration",
				"container", o.settings.Container, "prefix", o.prefix, "session", s.id, "error", err)
			return endAbandon
		}
		return endRelease
	}
}

// takeBack is a resumed session's first act, before it claims or adopts
// anything: it takes back each shard the previous process held (or was
// claiming, or had handed to it), which is dead: the file's lock says so.
// First those the session's list names (heldlist.go), at once, with no
// listing: each by a change of its lease's ID from the one the list
// implies (wire.ClaimLeaseID, or HandoffLeaseID for a shard handed to the
// session) to one of this claim's own, then the next term recorded, each
// If-Match the ETag the list gives; the change fails unless the lease still
// has that ID, which only the previous process used, and the record is
// still the one it ran the shard under. Then it
// lists the shards, and takes back each other one whose record names this
// session as a dead session's shard is claimed (claimOne), each step
// If-Match the ETag listed: its lease's ID changed likewise, or, if the
// lease has another, broken and acquired. So nothing the previous process
// left in flight (a release, a transfer) can end or change the lease once
// the func starts. A shard that left the set is only broken, which frees
// it. Every term the listing shows under this session's record (one a
// term can follow) is marked as this session's own (record), so none is
// ever adopted from a note or a listing: the previous process may have run
// it; and every term it shows on a shard of the set raises that shard's
// floor, as a listing of the shards does (shardfloors.go), even from an
// attempt that fails midway: what it read was stored. The listing is tried
// until it succeeds, or the session ends.
func (sm *shardManager) takeBack() {
	o := sm.o
	start := time.Now()
	fromList := 0
	if entries, err := o.readHeld(sm.ctx, sm.s.id); err == nil {
		var cands []candidate
		names := make([]string, len(entries))
		for i, e := range entries {
			names[i] = e.name
		}
		inSet := o.state.whichInSet(names)
		for _, e := range entries {
			if inSet[e.name] {
				cands = append(cands, candidate{name: e.name, exists: true, etag: e.etag, leased: true, prev: e.term, oldID: e.derivedID(sm.s.id), fromList: true})
			}
		}
		fromList = sm.takeEach(cands, nil)
	}
	byList := time.Since(start)
	var cands []candidate
	var free []listed
	var listTook time.Duration
	backoff := o.settings.retryDelay()
	for {
		cands, free = cands[:0], free[:0]
		terms := map[string]int64{}
		err := o.list(sm.ctx, wire.ShardsDir, func(l listed) {
			inSet := o.state.inSet(l.name)
			if inSet && !l.rec.TermBad {
				// Every shard's term it shows, as any listing of the
				// shards keeps them (judgeShard): this process is then
				// a witness of them, and a blob deleted and created
				// again continues above them (shardfloors.go).
				terms[l.name] = l.info.Leader.Number
			}
			if l.session != sm.s.id || o.shardProblem(l) != nil {
				return
			}
			sm.ownTerms.record(l.name, l.info.Leader.Number)
			switch {
			case o.state.holds(l.name):
				// Taken back already, from the list.
			case inSet:
				old := wire.HandoffLeaseID(l.session, l.name, l.info.Leader.Number)
				if l.sessionTerm > 0 {
					old = wire.ClaimLeaseID(l.session, l.sessionTerm, l.name, l.info.Leader.Number)
				}
				cands = append(cands, candidate{name: l.name, exists: true, etag: l.info.ETag, prev: l.info.Leader.Number,
					leased: l.info.Held(), oldID: old})
			case l.info.Held():
				free = append(free, l)
			}
		})
		o.state.seeTerms(terms)
		if err == nil {
			listTook = time.Since(start) - byList
			break
		}
		if errors.Is(err, errContainerGone) {
			// And this session's blob with it: its first pass ends it.
			o.sawDeletion("a resumed session found the container gone")
			return
		}
		o.logger.Warn("leaderelection: a resumed session cannot list the shards to take back its own; retrying", "container", o.settings.Container,
			"prefix", o.prefix, "error", err)
		if !clock.Sleep(sm.ctx, clock.Jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, o.settings.RetryInterval)
	}
	won := fromList + sm.takeEach(cands, free)
	sm.s.inherited.Store(0)
	level := slog.LevelInfo
	if won < fromList+len(cands) {
		level = slog.LevelWarn
	}
	o.logger.Log(sm.ctx, level, "leaderelection: a resumed session took back its shards", "container", o.settings.Container, "prefix", o.prefix,
		"session", sm.s.id, "shards", fromList+len(cands), "taken", won, "byChange", sm.handoffs.changedBack.Load(), "byList", fromList, "freed", len(free),
		"listing", listTook.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond))
}

// takeEach takes back cands and breaks the leases of free (see takeBack),
// takeBackParallel at a time, and says how many it took.
func (sm *shardManager) takeEach(cands []candidate, free []listed) int {
	o := sm.o
	var won atomic.Int64
	var mine []candidate
	for _, c := range cands {
		if o.reserve(c.name, takingBack, nil) {
			mine = append(mine, c)
		}
	}
	atOnce(len(mine)+len(free), takeBackParallel, func(i int) {
		if i < len(mine) {
			if ok, _ := sm.claimOne(mine[i]); ok {
				won.Add(1)
			}
			return
		}
		l := free[i-len(mine)]
		_, _ = o.managerFor(o.shardBlob(l.name), uuid.NewString()).breakIfUnchangedWithin(sm.ctx, l.info.ETag, o.settings.claimTimeout())
	})
	return int(won.Load())
}

// newSession builds session id's lease manager and the term runner that runs it.
func (o *ShardOwner) newSession(id string) *session {
	lm := o.managerOn(o.storage.sessionClient, o.sessionBlob(id), id)
	lm.alwaysETag = true
	s := &session{id: id}
	lm.extraMetadata = func(md map[string]*string) {
		n := max(o.state.ownedCount(), int(s.inherited.Load()))
		digest, size := o.state.setSummary()
		wire.SessionFields{Owned: n, Set: digest, Size: size, Handing: o.state.handingCount(), Seen: o.fleetMemory.seenMax.Load(),
			Longest: max(o.settings.LeaseDuration, time.Duration(o.fleetMemory.longestD.Load())), Leaving: s.leaving.Load()}.Put(md)
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
