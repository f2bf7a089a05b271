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
//
// A shard func that returns nil by itself (a job that does its work and
// ends) frees its shard, which is taken again after a cooldown: forever, a
// few seconds apart. Those rounds are not news, and a healthy fleet logs
// nothing periodic, so neither the stops nor the takes that make up for
// them are summarised at Info: each is at Debug, per shard, and counted in
// the metrics. Debug rather than a line a minute at Info (as failureLog
// does for failures): a func that returns is how the caller's job works,
// not a fault, and a line a minute would say nothing new, forever; the
// summaries need no state but the counts they keep. Every other move
// (a handover, a removal, a lost lease, a failed func, shards taken from a
// dead session or on a set change) is still told at Info or Warn.

// reportTook logs the shards claimed since the last report, if any: once the
// session has its share, at its next listing, or as it ends. It reports
// whether there were any. A take of no more shards than have returned by
// themselves since the last report of stopped shards (see reportStopped),
// and not been made up for, is taken to be theirs and logged at Debug: the
// session is back where it was. The count cannot tell which shards came
// back: a handover received while such shards wait out their cooldown may
// be counted as theirs, and is then told at Info by the session that gave
// it. So are the shards a peer released (sameSetPeers): one whose func returned
// while this session took the shard first, its own still cooling down (so
// two sessions trade such shards round after round); or one the peer
// tells of, at Info if it is news.
func (sm *shardManager) reportTook() bool {
	took := sm.candidates.took.Swap(0)
	freed := min(sm.candidates.tookFreed.Swap(0), took)
	if took == 0 {
		return false
	}
	o := sm.o
	running, share, routine := o.state.settleTook(took, freed)
	level := slog.LevelInfo
	if routine {
		level = slog.LevelDebug
	}
	o.logger.Log(context.Background(), level, "leaderelection: took shards", "container", o.settings.Container, "prefix", o.prefix,
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
func (sm *shardManager) recordSoon() {
	select {
	case sm.s.term.hooks.renewSoon <- make(chan error, 1):
	default:
	}
}

// reportSlow warns of the shards asked to leave (a handover, a removal)
// more than StopMargin ago whose func is still running, once for each: it
// holds their handover up.
func (o *ShardOwner) reportSlow() {
	if n, oldest := o.state.slowToLeave(o.settings.StopMargin); n > 0 {
		o.logger.Warn("leaderelection: shard funcs asked to stop for a handover or a removal are still running after StopMargin",
			"container", o.settings.Container, "prefix", o.prefix, "count", n, "askedFor", time.Since(oldest).Round(time.Millisecond))
	}
}

// reportStopped logs the shard runs that ended since the last report, if
// any, with their reasons: at Warn if one ended otherwise than the owner or
// the caller asked (its lease lost, its func failed or stalled), at Info
// otherwise. Unless final, it waits until no shard has stopped since its
// last call and none asked to leave (a handover, a removal) is still
// stopping, so that a handover made over several rounds is one line. Runs
// that only returned by themselves are not reported until something else
// stops too, or the session ends: until then, reportTook sets the takes of
// their shards against them.
func (o *ShardOwner) reportStopped(final bool) {
	stopped, running, ok := o.state.takeStopped(final)
	if !ok || len(stopped) == 0 {
		return
	}
	reasons := make([]string, 0, len(stopped))
	n := 0
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
