package leaderelection

import (
	"context"
	"errors"
	"sync"
	"time"
)

// How a shard's func runs on the instance that claimed it, and how it
// stops and releases the shard.

// run runs a shard's func, then releases the shard, however the func ends:
// normally, or by a panic, which is handed to Run once the lease is
// released.
func (sm *shardManager) run(r *shardRun, leaderCtx, leaseCtx context.Context) {
	o, s := sm.o, sm.o.settings
	m := r.runner
	defer func() {
		if p := recover(); p != nil {
			o.state.notePanic(p)
			o.poke()
		}
	}()
	funcDone := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Add(1)
	go func() {
		defer watcher.Done()
		m.watchFunc(leaderCtx, leaseCtx, funcDone)
	}()
	var (
		returned bool
		funcErr  error
	)
	defer func() {
		funcEnd := time.Now()
		r.returned.Store(true)
		m.leading.Store(false)
		expires := sm.deadline().Add(s.StopMargin)
		cause := context.Cause(leaseCtx)
		ours := cause == nil // the shard's lease is still ours to give back
		if cause == nil {
			cause = context.Cause(leaderCtx)
		}
		close(funcDone)
		r.ts.stopNow(errTermEnded)
		watcher.Wait()
		sm.funcs.Done()
		if ours && sm.s.keep.Load() {
			// Kept, with the session, for the next process (sessionfile.go).
			ours = false
		}
		if ours {
			// Once the session must stop now, its shards are not released
			// one by one: the session's lease is (its term's end does it, if it is
			// still ours), which sets them all free at once, and spares
			// storage a request per shard when it may be what failed. So
			// releases still waiting then are dropped.
			to := o.state.receiverOf(r)
			if to == nil || !errors.Is(cause, ErrShardHandedOver) || !sm.transfer(sm.releases, r, *to) {
				o.releaseShard(sm.releases, r)
				if sm.s.leaving.Load() {
					sm.heldList.leftBehind(r)
				}
			}
		}
		m.health.endTerm()
		reason, why := shardStopReason(returned, cause, funcErr)
		var cooldown time.Duration
		if cause == nil {
			// It returned by itself: let another instance take it first.
			cooldown = s.RetryInterval
		}
		o.state.endRun(r.name, reason, cooldown)
		o.poke()
		o.shardMetrics.stopMargin(expires.Sub(funcEnd))
		o.shardMetrics.transition("stopped", reason)
		o.logger.Debug("leaderelection: stopped running shard", "container", s.Container, "shard", r.name, "term", r.term.Number,
			"reason", reason, "ran", funcEnd.Sub(r.state.beatBase).Round(time.Millisecond))
		o.emit(Event{Kind: StoppedLeading, Term: r.term, Reason: reason, Err: why, FuncReturned: funcEnd, LeaseExpiry: expires,
			Shard: r.name, Session: sm.s.id})
		if !returned {
			o.state.stopAll() // it panicked: the panic propagates from Run once they all have returned
		}
		close(r.done)
	}()
	m.health.beginTerm()
	m.health.funcStarted()
	r.state.start(r.term)
	m.leading.Store(true)
	o.shardMetrics.transition("started", "")
	o.logger.Debug("leaderelection: running shard", "container", s.Container, "shard", r.name, "term", r.term.Number, "session", sm.s.id)
	o.emit(Event{Kind: StartedLeading, Term: r.term, At: r.term.Since, Shard: r.name, Session: sm.s.id})
	if sm.fuse.ahead() {
		funcErr = o.fn(context.WithValue(leaderCtx, termKey{}, r.state), r.name)
	}
	returned = true
	switch {
	case funcErr != nil && leaderCtx.Err() == nil:
		o.logger.Warn("leaderelection: shard func returned an error; releasing the shard", "container", s.Container, "shard", r.name, "error", funcErr)
	case funcErr != nil:
		o.logger.Debug("leaderelection: shard func returned after its context was cancelled", "shard", r.name, "error", funcErr)
	}
}

// releaseShard gives a shard's lease back once its func has returned, a few
// at a time; a failed release is retried by the session's loop. A lease
// that is no longer ours counts as released. ctx (the manager's releases)
// ends RequestTimeout after the last shard func returned as the session
// ends: a release still waiting for its turn then is dropped.
func (o *ShardOwner) releaseShard(ctx context.Context, r *shardRun) {
	select {
	case o.release <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-o.release }()
	lm := r.runner.blob()
	id := lm.LeaseID()
	if err := lm.Release(ctx); err != nil && ctx.Err() == nil {
		o.logger.Debug("leaderelection: could not release a shard; retrying", "shard", r.name, "error", err)
		o.state.addLeftover(r.name, id)
	}
}

// shardStopReason names why a shard's run ended.
func shardStopReason(returned bool, cause, funcErr error) (StopReason, error) {
	switch {
	case returned && errors.Is(cause, ErrShardHandedOver):
		return ReasonHandedOver, cause
	case returned && errors.Is(cause, ErrShardRemoved):
		return ReasonShardRemoved, cause
	}
	return stopReason(returned, cause, funcErr)
}

// retryLeftovers releases the leases that a failed request may have left
// with this instance, a few per cycle. A lease that is not ours (any more)
// counts as released.
func (sm *shardManager) retryLeftovers() {
	o := sm.o
	for name, id := range o.state.leftovers(releaseAtOnce) {
		if err := o.managerFor(o.shardBlob(name), id).Release(sm.ctx); err != nil {
			continue
		}
		o.state.releasedLeftover(name, id)
	}
}

// releaseLeftovers tries once more every leftover lease as the session
// ends, releaseAtOnce at a time, until ctx ends; those not sent by then are
// dropped (see manage).
func (sm *shardManager) releaseLeftovers(ctx context.Context) {
	o := sm.o
	left := o.state.takeLeftovers()
	var wg sync.WaitGroup
	defer wg.Wait()
	for name, id := range left {
		select {
		case o.release <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-o.release }()
			_ = o.managerFor(o.shardBlob(name), id).Release(ctx)
		}()
	}
}
