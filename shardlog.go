package leaderelection

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// A ShardOwner's Info lines are summaries: how many shards a session took in
// a listing's claims, how many stopped and why, never a line per shard
// (those are at Debug). Ten thousand shards make a handful of lines.

// reportTook logs the shards claimed since the last report, if any: once the
// session has its share, at its next listing, or as it ends. It reports
// whether there were any.
func (g *shardManager) reportTook() bool {
	took := g.took.Swap(0)
	if took == 0 {
		return false
	}
	o := g.o
	o.mu.Lock()
	running, share := len(o.runs), o.target
	o.mu.Unlock()
	o.logger.Info("leaderelection: took shards", "container", o.settings.Container, "prefix", o.prefix,
		"count", took, "running", running, "share", share)
	return true
}

// recordSoon asks the session's renewal loop to rewrite its record now, if
// the loop is waiting for its next renewal (else one is under way). A
// session that has taken its share says so at once, not a RenewInterval
// later: until then the others count it as short. A giver that did took
// it for a receiver of a joiner's share, and the joiner, counting every
// session short, read no notes (the handover tests saw both, after a cold
// start: the joiner's last shards came 31 s late).
func (g *shardManager) recordSoon() {
	select {
	case g.s.m.renewSoon <- make(chan error, 1):
	default:
	}
}

// stopped counts a shard's run that ended, by why; under o.mu.
func (o *ShardOwner) stoppedRun(reason StopReason) {
	if o.stopped == nil {
		o.stopped = map[StopReason]int{}
	}
	o.stopped[reason]++
}

// reportSlow warns of the shards asked to leave (a handover, a removal)
// more than StopMargin ago whose func is still running, once for each: it
// holds their handover up.
func (o *ShardOwner) reportSlow() {
	o.mu.Lock()
	n, oldest := 0, time.Time{}
	for _, r := range o.runs {
		if !r.leaving || r.leftAt.IsZero() || r.slowSaid || r.returned.Load() || time.Since(r.leftAt) < o.settings.StopMargin {
			continue
		}
		r.slowSaid = true
		n++
		if oldest.IsZero() || r.leftAt.Before(oldest) {
			oldest = r.leftAt
		}
	}
	o.mu.Unlock()
	if n > 0 {
		o.logger.Warn("leaderelection: shard funcs asked to stop for a handover or a removal are still running after StopMargin",
			"container", o.settings.Container, "prefix", o.prefix, "count", n, "askedFor", time.Since(oldest).Round(time.Millisecond))
	}
}

// reportStopped logs the shard runs that ended since the last report, if
// any, with their reasons: at Warn if one ended otherwise than the owner or
// the caller asked (its lease lost, its func failed or stalled), at Info
// otherwise. Unless final, it waits until no shard has stopped since its
// last call and none asked to leave (a handover, a removal) is still
// stopping, so that a handover made over several rounds is one line.
func (o *ShardOwner) reportStopped(final bool) {
	o.mu.Lock()
	n := 0
	for _, c := range o.stopped {
		n += c
	}
	settling := n != o.stoppedSeen
	o.stoppedSeen = n
	for _, r := range o.runs {
		settling = settling || r.leaving && !r.returned.Load() && !r.slowSaid
	}
	if settling && !final {
		o.mu.Unlock()
		return
	}
	o.stoppedSeen = 0
	stopped := o.stopped
	o.stopped = nil
	running := len(o.runs)
	o.mu.Unlock()
	if len(stopped) == 0 {
		return
	}
	reasons := make([]string, 0, len(stopped))
	n = 0
	level := slog.LevelInfo
	for r, c := range stopped {
		reasons = append(reasons, fmt.Sprintf("%s: %d", r, c))
		n += c
		switch r {
		case ReasonCallerCancelled, ReasonHandedOver, ReasonShardRemoved, ReasonFuncReturned:
		default:
			level = slog.LevelWarn
		}
	}
	slices.Sort(reasons)
	o.logger.Log(context.Background(), level, "leaderelection: stopped shards", "container", o.settings.Container, "prefix", o.prefix,
		"count", n, "reasons", strings.Join(reasons, ", "), "running", running)
}
