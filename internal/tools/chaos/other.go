package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/tamper"
)

// messyFault is one of the messy world's faults: its kind, and for a
// malformed record, which.
type messyFault struct {
	kind string
	c    tamper.Case
}

// messyCycle is the messy world's faults the run takes in turn: a
// malformed record of each case, and deletions in between: two of the
// blob, then the container, then the container under a cut-off leader.
func (h *harness) messyCycle() []messyFault {
	var out []messyFault
	deletes := []string{FaultDeleteBlob, FaultDeleteBlob, FaultDeleteContainer, FaultCutOffDelete}
	for i, c := range tamper.Cases {
		if h.cfg.Malformed {
			out = append(out, messyFault{kind: FaultMalformed, c: c})
		}
		if h.cfg.Deletes && i < len(deletes) {
			out = append(out, messyFault{kind: deletes[i]})
		}
	}
	return out
}

// How the other writer goes about it.
const (
	// windowFor is how long after the SIGTERM the other writer looks for
	// the lease to be free: the leader releases it as it stops, and a
	// follower may take it first (it is then held until the next fault).
	windowFor = 5 * time.Second
	// windowPoll is how often it reads the blob meanwhile: followers try
	// every retry interval, ¾ of it at least.
	windowPoll = 5 * time.Millisecond
	// repairPoll is how often a repair reads the blob until it is free.
	repairPoll = 20 * time.Millisecond
)

// repairWithin bounds how long a repair waits for the blob to be free: a
// contender that took the lease and found the record malformed must let
// it go (a native lease expires on its own; an ETag lease's silent holder
// is broken after the lease duration).
func (h *harness) repairWithin() time.Duration {
	return max(time.Minute, 4*h.timings.LeaseDuration)
}

// witnessed reports whether a running process other than lane but's has
// started or seen lead the highest term started on the blob (top): it then
// seeds the blob, if deleted, above that term (see docs/limits.md: a blob
// deleted while no running instance saw its last term may repeat it). With
// all, whether every lane's process but but's has: then none that never saw
// the term can be the first to create the blob again.
func (h *harness) witnessed(but string, all bool) (ok bool, top int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, l := range h.lanes {
		if l.name != but {
			if t, saw := h.seen[l.name]; saw && t >= h.top {
				n++
			} else if all {
				return false, h.top
			}
		}
	}
	return n > 0, h.top
}

// waitWitness waits, up to the liveness bound, for a running contender
// other than target to witness the highest term started (see witnessed):
// followers read the blob every retry interval, but back off while
// storage fails them.
func (h *harness) waitWitness(ctx context.Context, target string, all bool) (ok bool, top int64) {
	h.log.Wait(ctx, h.timings.LeaseDuration+h.timings.RetryInterval+2*h.timings.Slack, func() bool {
		ok, top = h.witnessed(target, all)
		return ok
	})
	return ok, top
}

// injectMessy applies one of the messy world's faults: it SIGTERMs the
// leader, whose lease is then free, and as soon as it is, writes a
// malformed record into the blob, or deletes the blob or the container.
// A deletion waits first for a witness of the leader's term, and is held
// back (false) without one.
// A malformed record is repaired between 2 and 6 s later (u of the way),
// and the fault heals then. The lane's new process starts once another
// contender leads. It reports false, having done nothing, when there is
// no leader to stop.
func (h *harness) injectMessy(ctx context.Context, m messyFault, u float64, blob string) (bool, error) {
	if m.kind == FaultCutOffDelete {
		// A process fault and a deletion at once: the leader is not
		// stopped.
		return h.inject(ctx, m.kind, u, blob)
	}
	target := h.leader()
	var l *lane
	for _, x := range h.lanes {
		if x.name == target {
			l = x
		}
	}
	if l == nil {
		h.progress("no leader to stop for %s; skipped", m.kind)
		return false, nil
	}
	if m.kind != FaultMalformed {
		if ok, top := h.waitWitness(ctx, target, false); !ok {
			h.progress("no running contender but %s has seen term %d lead; %s held back", target, top, m.kind)
			return false, nil
		}
	}
	what := m.kind
	if m.kind == FaultMalformed {
		what = string(m.c)
	}
	h.note(KindFault, m.kind, target, "SIGTERM, then "+what)
	// Watch for the release from the SIGTERM on, not from the exit: a
	// follower may take the lease in between.
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		l.proc.Terminate(30 * time.Second)
	}()
	deadline := time.Now().Add(windowFor)
	var heal string
	switch m.kind {
	case FaultMalformed:
		out, err := h.other.WriteMalformed(ctx, blob, tamper.KindMutex, m.c, deadline, windowPoll)
		if err != nil {
			heal = fmt.Sprintf("not written: %v", err)
			break
		}
		h.log.Add(Record{Mono: MonoOf(out.Done), Who: "harness", Kind: KindMalformed, Blob: blob, Detail: string(m.c)})
		Sleep(ctx, 2*time.Second+time.Duration(u*float64(4*time.Second)))
		out, err = h.other.Repair(context.WithoutCancel(ctx), blob, tamper.KindMutex, time.Now().Add(h.repairWithin()), repairPoll)
		if err != nil {
			heal = fmt.Sprintf("unrepaired: %v", err)
			break
		}
		h.log.Add(Record{Mono: MonoOf(out.Sent), Who: "harness", Kind: KindRepair, Blob: blob, Term: out.Term})
		heal = fmt.Sprintf("repaired: term %d, %d reads of the leased blob", out.Term, out.Tries)
	case FaultDeleteBlob, FaultDeleteContainer:
		del := h.other.DeleteBlob
		gone := blob
		if m.kind == FaultDeleteContainer {
			del, gone = h.other.DeleteContainer, ""
		}
		out, err := del(ctx, blob, deadline, windowPoll)
		if err != nil {
			heal = fmt.Sprintf("not deleted: %v", err)
			break
		}
		h.log.Add(Record{Mono: MonoOf(out.Sent), Who: "harness", Kind: KindDelete, Blob: gone})
	default:
		<-stopped
		return false, fmt.Errorf("chaos: unknown fault kind %q", m.kind)
	}
	<-stopped
	if heal != "" {
		h.progress("%s: %s", m.kind, heal)
	}
	h.note(KindHeal, m.kind, target, heal)
	return true, h.respawn(ctx, l, blob)
}
