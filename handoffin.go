package leaderelection

import (
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// How a session receives the shards handed to it: it reads its notes while
// shards may come (watchNotes, as balance decides), and adopts each shard
// they name, or a listing finds recorded for it (adopt), by the one path of
// shardtake.go (adoptOne). The giver's side is handoff.go's; the rules, at
// the top of shards.go (H1-H5).

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
	defer sm.handoffs.watching.Done()
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
		if len(stale) > 0 && sm.handoffs.expecting.Load() != expectOften && time.Since(lastDelete) >= time.Second {
			// If-Match what was read: a note rewritten since is read
			// first.
			_ = o.storage.client.Blob(stale[0].name).Delete(sm.shardsCtx, blobstore.DeleteOptions{IfMatch: stale[0].etag})
			stale, lastDelete = stale[1:], time.Now()
		}
		switch sm.handoffs.expecting.Load() {
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
		for page, err := range o.storage.client.List(sm.shardsCtx, blobstore.ListOptions{Prefix: prefix, Metadata: true}) {
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

// adopt takes the shards handed to this session, adoptParallel at a time:
// each on condition that its lease holds the ID derived for this session and
// its term (or none) and its ETag is still the one the giver's record left.
// It skips the shards this session runs or claims, and a term it recorded
// itself. One that left its set meanwhile is adopted and released (start).
func (sm *shardManager) adopt(hs []handed) {
	o := sm.o
	sem := sm.handoffs.adoptSlots
	var wg sync.WaitGroup
	for _, h := range hs {
		// Asked as the shard is reserved: an adoption of the same term that
		// failed (adoptOne) records it before it lets the shard go, and may
		// then release its lease.
		by := adoptingSeen
		if h.from != "" {
			by = adoptingNote
		}
		if !o.reserve(h.name, by, func() bool { return sm.ownTerms.recorded(h.name, h.term) }) {
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

// staleNote is a note whose giver is no longer a live session, as listed.
type staleNote struct {
	name string
	etag azcore.ETag
}
