package childproc

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"time"
)

// Log is a run's records, the children's and the harness's own, in the
// order they were added: kept in memory and, between Create and Close,
// written to a file as JSON lines. It is safe for concurrent use.
type Log[R any] struct {
	track func(R)

	mu      sync.Mutex
	out     *os.File
	records []R
	changed chan struct{} // closed and replaced on every record
}

// NewLog returns an empty Log that calls track, if not nil, with each
// record as it is added: one at a time, in the log's order, so that the
// harness can follow who does what.
func NewLog[R any](track func(R)) *Log[R] {
	return &Log[R]{track: track, changed: make(chan struct{})}
}

// Create creates the file at path and writes every record added from now
// on to it, until Close.
func (l *Log[R]) Create(path string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = out
	return nil
}

// Add adds r, and wakes every Wait.
func (l *Log[R]) Add(r R) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
	if b, err := json.Marshal(r); err == nil && l.out != nil {
		_, _ = l.out.Write(append(b, '\n'))
	}
	if l.track != nil {
		l.track(r)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// Records returns a copy of every record so far.
func (l *Log[R]) Records() []R {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]R(nil), l.records...)
}

// Wait waits until cond holds, checking it at once and after every record,
// for up to d or until ctx is done. It returns how long it waited and
// whether cond held.
func (l *Log[R]) Wait(ctx context.Context, d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		l.mu.Lock()
		ch := l.changed
		l.mu.Unlock()
		if cond() {
			return time.Since(start), true
		}
		select {
		case <-ctx.Done():
			return time.Since(start), false
		case <-t.C:
			return time.Since(start), false
		case <-ch:
		}
	}
}

// Close closes the file; records added later are kept in memory only.
func (l *Log[R]) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.out == nil {
		return nil
	}
	err := l.out.Close()
	l.out = nil
	return err
}
