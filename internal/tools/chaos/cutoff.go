package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// FaultCutOffDelete is a compound fault: the leader's proxy drops
// everything, and while the leader is cut off the other writer deletes the
// container, taking the leader's lease with it (tamper's
// DeleteContainerNow). The leader learns nothing of the deletion: it acts on
// to its deadline. The followers find the container gone, create it and the
// blob again, and must not start a func until that deadline has passed,
// whatever lease the cut-off leader declared (recreated.go, issue 38). The
// cut heals once another contender leads after the deletion and the cut-off
// leader's func has returned, or after a bound. The fault is held back
// unless every running contender but the leader has seen the leader's term
// (started or seen lead the highest term started): a blob created again
// first by an instance that never saw its terms is taken at once, a stated
// limit (docs/limits.md, "A deletion no running instance saw"), which this
// fault would otherwise draw.
const FaultCutOffDelete = "cutoff-delete"

// writes reports whether the run's faults need the other writer.
func (c Config) writes() bool {
	return c.Malformed || c.Deletes || slices.Contains(c.Kinds, FaultCutOffDelete) || slices.Contains(c.Sequence, FaultCutOffDelete)
}

// cutOffDelete injects FaultCutOffDelete into lane l, which leads; the
// container is deleted hold after the cut (holdFor).
func (h *harness) cutOffDelete(ctx context.Context, l *lane, hold time.Duration) (bool, error) {
	if ok, top := h.waitWitness(ctx, l.name, true); !ok {
		h.progress("not every running contender but %s has seen term %d lead; %s held back (docs/limits.md: A deletion no running instance saw)", l.name, top, FaultCutOffDelete)
		return false, nil
	}
	h.note(KindFault, FaultCutOffDelete, l.name, "blackhole, then the container deleted after "+hold.Round(time.Millisecond).String())
	names, err := addToxics(l.proxy, FaultBlackhole)
	if err != nil {
		return false, err
	}
	Sleep(ctx, hold)
	out, err := h.other.DeleteContainerNow(ctx, time.Now().Add(windowFor), windowPoll)
	heal := ""
	if err != nil {
		heal = fmt.Sprintf("not deleted: %v", err)
	} else {
		del := MonoOf(out.Sent)
		h.log.Add(Record{Mono: del, Who: "harness", Kind: KindDelete})
		heal = h.waitMovedOn(ctx, l, del)
	}
	for _, n := range names {
		_ = l.proxy.Toxics.RemoveToxic(context.Background(), n)
	}
	h.progress("%s: %s", FaultCutOffDelete, heal)
	h.note(KindHeal, FaultCutOffDelete, l.name, heal)
	return true, nil
}

// waitMovedOn waits, after a deletion at del while lane l was cut off,
// until another lane leads with a term started after del and l's func has
// returned: the cut-off leader's deadline (at most its lease duration after
// the cut) and the followers' wait for it (the longest lease of the
// fleet), with the liveness bound's slack. It says what it saw.
func (h *harness) waitMovedOn(ctx context.Context, l *lane, del int64) string {
	limit := time.Now().Add(l.timings.LeaseDuration + h.timings.LeaseDuration + h.timings.RetryInterval + 2*h.timings.Slack)
	var next string
	_, led := h.log.Wait(ctx, time.Until(limit), func() bool {
		next = h.leaderSince(del, l.name)
		return next != ""
	})
	_, ended := h.log.Wait(ctx, time.Until(limit), func() bool { return !h.leads(l.name) })
	var says []string
	if led {
		says = append(says, next+" leads")
	} else {
		says = append(says, "no other leader since the deletion")
	}
	if !ended {
		says = append(says, l.name+"'s func still runs")
	}
	return strings.Join(says, "; ")
}

// leaderSince returns a lane other than but whose running term started
// after at, or "".
func (h *harness) leaderSince(at int64, but string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w, s := range h.open {
		if w != but && s > at {
			return w
		}
	}
	return ""
}

// leads reports whether lane who's func runs.
func (h *harness) leads(who string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.open[who]
	return ok
}
