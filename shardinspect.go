package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// What an operator sees of a ShardOwner: its health (Healthy,
// HealthHandler), and the sessions and shards under its prefix (Inspect).

// Healthy reports nil while this instance's session and shard funcs are
// healthy, and an error saying why otherwise: a shard func still running
// StopMargin after its lease context was cancelled (the shard may have
// passed to another instance), the session's renewals failing for longer
// than (LeaseDuration - StopMargin)/2, or shards of the set that its last
// listing found it cannot run because their blob's record cannot be built on
// (a [*RecordError]: a term number that does not read or cannot grow, a blob
// of another role, a native lease). It makes no network call.
func (o *ShardOwner) Healthy() error {
	runs, bad, nBad, sess := o.state.forHealth()
	for _, r := range runs {
		if err := r.runner.healthy(); err != nil {
			return fmt.Errorf("leaderelection: shard %q: %w", r.name, err)
		}
	}
	if sess != nil {
		if err := sess.term.healthy(); err != nil {
			return fmt.Errorf("leaderelection: session %s: %w", sess.id, err)
		}
	}
	if nBad > 0 {
		return fmt.Errorf("leaderelection: %d shard(s) of the set cannot run until their blob's record is repaired (leaderctl repair), the first: %w", nBad, bad)
	}
	return nil
}

// HealthHandler serves [ShardOwner.Healthy] over HTTP, for a Kubernetes
// liveness probe: 200 "ok", or 503 with the reason.
func (o *ShardOwner) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := o.Healthy(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// ShardsInfo is what one listing under a ShardOwner's prefix shows.
type ShardsInfo struct {
	Sessions []SessionInfo // sorted by ID
	Shards   []ShardInfo   // every shard blob, sorted by name (also shards no longer in anyone's set)
}

// SessionInfo describes a session as the listing shows it.
type SessionInfo struct {
	ID string
	// Live: its lease is held and it has written its record, which carries
	// no end mark, so it counts for the fair shares (a silent one counts
	// until it is broken).
	Live             bool
	Identity         string
	Since            time.Time
	Owned            int           // how many shards it held at its last write, by its own count
	DeclaredDuration time.Duration // the lease duration it declared
	ETag             azcore.ETag
	LastModified     time.Time
	// ShardSet identifies the set of shards it runs (a digest of the
	// names), "" if its record does not say (an older version). Sessions
	// with the same ShardSet share that set's shards among them (see
	// [ShardOwner.SetShards]).
	ShardSet string
	SetSize  int // how many shards that set has (0 if its record does not say)
}

// ShardInfo describes a shard as the listing shows it.
type ShardInfo struct {
	Name string
	// Held: its lease is held. Held by Session if that session is live;
	// a shard held by a dead session is free to take.
	Held    bool
	Session string
	Term    Term // its last record (its LeaseID is not readable and stays empty)
}

// Inspect lists the sessions and the shards: who is alive, and who holds
// what. Read access is enough; it holds nothing. Two or more requests (the
// sessions, then the shards 1,000 a page), not one snapshot: a shard may
// name a session that started after the sessions were listed. Unless Run is
// running (which does it when it returns), it closes the idle connections of
// the library's transport before it returns: no goroutine outlives it.
func (o *ShardOwner) Inspect(ctx context.Context) (ShardsInfo, error) {
	defer func() {
		if !o.running.Load() {
			o.storage.closeIdle()
		}
	}()
	var info ShardsInfo
	err := o.list(ctx, wire.SessionsDir, func(l listed) {
		info.Sessions = append(info.Sessions, SessionInfo{
			ID: l.name, Live: l.info.State == stateLeased && l.record && !l.ended, Identity: l.info.Leader.Identity,
			Since: l.info.Leader.Since, Owned: max(l.owned, 0), ShardSet: l.set, SetSize: max(l.size, 0), DeclaredDuration: l.info.DeclaredDuration,
			ETag: l.info.ETag, LastModified: l.info.LastModified,
		})
	})
	if errors.Is(err, errContainerGone) {
		return info, nil // nothing there
	}
	if err != nil {
		return ShardsInfo{}, err
	}
	err = o.list(ctx, wire.ShardsDir, func(l listed) {
		info.Shards = append(info.Shards, ShardInfo{Name: l.name, Held: l.info.Held(), Session: l.session, Term: l.info.Leader})
	})
	if err != nil && !errors.Is(err, errContainerGone) {
		return ShardsInfo{}, err
	}
	return info, nil
}
