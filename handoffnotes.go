package leaderelection

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// The notes of a handover (see the top of handoff.go): a giver keeps, by
// receiver, the shards it handed on (outbox), and rewrites each receiver's
// note as it hands more on (deliver); the receiver reads them (watchNotes).

// noteKeep is how long a shard handed on stays in its receiver's note: a
// receiver that expects shards reads its notes every handoffPoll; one that
// did not read it by then finds the shard by listing (its record names the
// receiver).
const noteKeep = 10 * time.Second

func (b *outbox) signal() {
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

func (hs *handoffs) post(session string, h handed) {
	b := hs.out
	b.mu.Lock()
	b.recent[session] = append(b.recent[session], posted{handed: h, at: time.Now()})
	b.dirty[session] = true
	b.mu.Unlock()
	b.signal()
}

// deliver writes the notes, until the outbox is closed and its last notes
// written, or ctx ends. A receiver's note is rewritten at most every
// handoffBatch, and with at most one write in flight, so that writes land
// in order; the receivers' notes are written independently (notesParallel
// in flight): a note whose request is slow (a new connection on a busy
// account) holds up only the shards it names.
func (sm *shardManager) deliver(ctx context.Context) {
	defer sm.handoffs.pacing.Done()
	b := sm.handoffs.out
	var writing sync.WaitGroup
	defer writing.Wait()
	slots := make(chan struct{}, notesParallel)
	closed := false
	for {
		if !closed {
			select {
			case <-b.ready:
			case <-b.closed:
				closed = true
			case <-ctx.Done():
				return
			}
		}
		if !closed {
			select {
			case <-time.After(handoffBatch):
			case <-b.closed:
				closed = true
			case <-ctx.Done():
				return
			}
		}
		more := sm.flush(ctx, &writing, slots)
		if closed {
			if !more {
				return
			}
			// A write in flight left its note dirty: write it once
			// that one has ended.
			select {
			case <-b.ready:
			case <-ctx.Done():
				return
			}
		}
	}
}

// flush starts rewriting the dirty notes whose previous write has ended,
// each once one of slots is free. It reports whether any note is left to
// write (dirty, or being written).
func (sm *shardManager) flush(ctx context.Context, writing *sync.WaitGroup, slots chan struct{}) bool {
	b := sm.handoffs.out
	b.mu.Lock()
	now := time.Now()
	batch := map[string][]handed{}
	for session := range b.dirty {
		if b.writing[session] {
			continue
		}
		kept := slices.DeleteFunc(b.recent[session], func(p posted) bool { return now.Sub(p.at) > noteKeep })
		b.recent[session] = kept
		hs := make([]handed, len(kept))
		for i, p := range kept {
			hs[i] = p.handed
		}
		batch[session] = hs
		delete(b.dirty, session)
		b.writing[session] = true
	}
	b.mu.Unlock()
	for session, hs := range batch {
		name := sm.o.noteName(session, sm.s.id)
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		writing.Add(1)
		go func() {
			defer writing.Done()
			defer func() { <-slots }()
			if err := sm.o.writeNotes(ctx, name, hs); err != nil {
				sm.o.logger.Debug("leaderelection: could not tell a session of the shards handed to it; it finds them by listing", "to", session, "count", len(hs), "error", err)
			}
			b.mu.Lock()
			delete(b.writing, session)
			b.mu.Unlock()
			b.signal()
		}()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.dirty) > 0 || len(b.writing) > 0
}

// noteName is the note a giver session writes to a receiver session (its
// first part: see writeNotes).
func (o *ShardOwner) noteName(receiver, giver string) string {
	return wire.NoteName(o.prefix, receiver, giver)
}

// writeNotes writes the note for the shards handed to a receiver: in as few
// parts as their size allows (wire.NoteParts: name, then name.1, name.2...).
// A part left from a longer note before names shards handed earlier: the
// receiver skips a term it has adopted already.
func (o *ShardOwner) writeNotes(ctx context.Context, name string, hs []handed) error {
	var errs []error
	entries := make([]wire.Handed, len(hs))
	for i, h := range hs {
		entries[i] = wire.Handed{Name: h.name, Term: h.term, ETag: string(h.etag)}
	}
	for i, part := range wire.NoteParts(entries) {
		if err := o.writeNote(ctx, wire.NotePart(name, i), part); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (o *ShardOwner) writeNote(ctx context.Context, name, entries string) error {
	_, err := o.storage.client.Blob(name).Put(ctx, blobstore.WriteOptions{Metadata: wire.NoteMetadata(entries)})
	return err
}

// parseNote reads a note's entries (wire.ParseNote): one that does not read
// is skipped.
func parseNote(entries string) []handed {
	var hs []handed
	for _, h := range wire.ParseNote(entries) {
		hs = append(hs, handed{name: h.Name, term: h.Term, etag: azcore.ETag(h.ETag)})
	}
	return hs
}
