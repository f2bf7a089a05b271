package leaderelection

import (
	"context"
	"sync"
	"time"
)

// sessionProof keeps the reads that prove a session's blob was there
// (shardfloors.go's sessionThere): at most one in flight, which every
// claim waiting then shares.
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
