package leaderelection

import (
	"context"
	"sync"
	"time"
)

// A claim on a container created again. A session's blob is never created
// again (session.go), so while it is there the container is the one the
// session began on; once the container is deleted and created again, a
// session that has not noticed yet (its renewal not yet due, or failing on
// a cut) may still read the new container, find a shard's blob missing or
// fresh, and create or take it: it would record the first term there, from
// its own floor, beside a doomed session's func and perhaps below its
// term, where shardfloors.go's seeds and quiet are what must decide. So a
// claim of a shard whose blob carries no term (created by the claim, or
// found with none and unmarked) records its term only once a read of the
// session's blob, sent after the claim's lease was granted, found it
// there: the lease it holds is then on the container the session began
// on, which no deletion has replaced since (a later deletion takes the
// shard's blob, and the record write fails). One read serves every claim
// whose lease was granted before it was sent (sessionProof). A read that
// fails proves nothing: the claim gives its lease back. (The simulator's
// seed 971092012212: a session's probe of the shards no list names found a
// shard's blob missing on a container another instance had just created
// again, and recorded term 1 where the last term was 24.)

// sessionProof keeps the reads that prove a session's blob was there:
// at most one in flight, which every claim waiting then shares.
type sessionProof struct {
	mu   sync.Mutex
	last time.Time     // the send time of the latest read that found the blob
	gone bool          // a read found it gone: it never comes back
	busy chan struct{} // closed when the read in flight has answered; nil: none
}

// after reports whether a read of the session's blob sent at or after t
// found it there, sending one (read) if none did and none in flight will
// tell; an error if the read failed.
func (p *sessionProof) after(ctx context.Context, t time.Time, read func(context.Context) (bool, error)) (bool, error) {
	for {
		p.mu.Lock()
		switch {
		case !p.last.Before(t):
			p.mu.Unlock()
			return true, nil
		case p.gone:
			p.mu.Unlock()
			return false, nil
		case p.busy != nil:
			busy := p.busy
			p.mu.Unlock()
			select {
			case <-busy: // sent before t, perhaps: look again
			case <-ctx.Done():
				return false, ctx.Err()
			}
			continue
		}
		busy := make(chan struct{})
		p.busy = busy
		p.mu.Unlock()
		sent := time.Now()
		there, err := read(ctx)
		p.mu.Lock()
		p.busy = nil
		switch {
		case err != nil:
		case there && sent.After(p.last):
			p.last = sent
		case there:
		default:
			p.gone = true
		}
		p.mu.Unlock()
		close(busy)
		if err != nil {
			return false, err
		}
	}
}

// sessionThere is the proof claimOne asks for (see above), from the
// moment its lease was granted: "" if the session's blob was there after
// it, else the claim's outcome. A blob found gone is a deletion seen.
func (sm *shardManager) sessionThere(granted time.Time) string {
	there, err := sm.proof.after(sm.ctx, granted, func(ctx context.Context) (bool, error) {
		info, err := sm.s.term.blob().Inspect(ctx)
		return info.Exists, err
	})
	switch {
	case err != nil:
		return outcome(err, "claimed")
	case !there:
		sm.o.sawDeletion("a claim found this session's blob gone")
		return "transient"
	}
	return ""
}
