package leaderelection

import (
	"context"
	"errors"
	"time"

	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/clock"
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

// closeIdle closes the idle pooled connections of the transports the
// library built (none for the caller's), and so their goroutines: Run does
// when it returns, and Inspect when Run is not running.
func (st *storage) closeIdle() {
	st.client.CloseIdleConnections()
	st.sessionClient.CloseIdleConnections()
}

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
		if o.fleetMemory.hadRecord.Load() && gone(err) {
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
	o.storage.reached.Store(true)
	return s, g, nil
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
