package leaderelection

import (
	"context"
	"sync"
)

// sessionProof keeps the reads that prove a session's blob was there
// (shardfloors.go's sessionThere): one at a time, numbered, each shared by
// every claim that was waiting when it was started. No clock: a read counts
// for a claim only if it was started after the claim asked (after), so
// after the claim's lease was granted.
type sessionProof struct {
	mu      sync.Mutex
	started int64         // reads started
	proved  int64         // the number of the latest read that found the blob
	gone    bool          // a read found it gone: it never comes back
	failed  int64         // the number of the latest read that failed
	err     error         // its error
	busy    chan struct{} // closed when the read in flight has answered; nil: none
}

// after reports whether a read of the session's blob started after this
// call began found it there, starting one (read) if none did and none in
// flight will tell; the error of such a read that failed.
func (p *sessionProof) after(ctx context.Context, read func(context.Context) (bool, error)) (bool, error) {
	p.mu.Lock()
	need := p.started + 1 // a read in flight now may have been sent before
	for {
		switch {
		case p.proved >= need:
			p.mu.Unlock()
			return true, nil
		case p.gone:
			p.mu.Unlock()
			return false, nil
		case p.failed >= need:
			err := p.err
			p.mu.Unlock()
			return false, err
		case p.busy != nil:
			busy := p.busy
			p.mu.Unlock()
			select {
			case <-busy:
			case <-ctx.Done():
				return false, ctx.Err()
			}
			p.mu.Lock()
			continue
		}
		p.started++
		n, busy := p.started, make(chan struct{})
		p.busy = busy
		p.mu.Unlock()
		there, err := read(ctx)
		p.mu.Lock()
		p.busy = nil
		switch {
		case err != nil:
			p.failed, p.err = n, err
		case there:
			p.proved = n
		default:
			p.gone = true
		}
		close(busy)
	}
}
