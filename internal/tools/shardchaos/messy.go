package shardchaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/tamper"
)

// Faults of the messy world, beside the process faults: the instances'
// sets change at run time, and another writer (package tamper) writes into
// the shards' and sessions' blobs.
const (
	// FaultSetRolling: a rolling change of every instance's set, from the
	// fleet's set A to a set B that keeps most of A, drops one to three of
	// its shards and adds one to three (new ones, or ones dropped before),
	// one instance at a time, 0.3 to 1 s apart.
	FaultSetRolling = "set-rolling"
	// FaultSetOne: one instance alone takes a set of its own: its set with
	// a new shard that no other instance has, or without one of its
	// shards. The next rolling change brings it back in line.
	FaultSetOne = "set-one"
	// FaultMalformed: a malformed record (a tamper.Case, in turn) on the
	// blob of a shard the fleet does not run: a new one, whose blob the
	// other writer creates with it, or one dropped before, once its blob
	// is unleased. Every instance then takes it into its set; the record
	// is repaired half the fault's hold later (a few seconds), with the
	// term after the highest seen on the shard, and the fault heals then.
	FaultMalformed = chaos.FaultMalformed
	// FaultPhantom: two phantom session blobs under the prefix's
	// sessions/, an empty one and a leased one with a mutex's record, for
	// half the fault's hold; then deleted.
	FaultPhantom = "phantom-sessions"
)

// SetFaults and OtherWriterFaults are the messy world's faults, which
// ChaosConfig.SetChanges and ChaosConfig.Malformed add to the draw.
var (
	SetFaults         = []string{FaultSetRolling, FaultSetOne}
	OtherWriterFaults = []string{FaultMalformed, FaultPhantom}
)

// messy is the harness's state for the messy world's faults.
type messy struct {
	other *tamper.Writer
	// setMu serialises the faults that change sets, and guards what
	// follows.
	setMu   chan struct{}
	fleet   []string // the set the last rolling change gave every instance
	next    int      // the index of the next new shard's name
	dropped []string // shards some rolling change dropped, and none took back since
	nCase   int      // malformed records written so far: the next case
	nTag    int      // phantoms created so far
}

func (m *messy) lock(ctx context.Context) bool {
	select {
	case m.setMu <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (m *messy) unlock() { <-m.setMu }

// shardBlob is shard's blob, as the ShardOwner names it.
func shardBlob(shard string) string { return Prefix + "/" + tamper.ShardsDir + shard }

// newShard names a shard no instance has had.
func (m *messy) newShard() string {
	s := ShardName(m.next)
	m.next++
	return s
}

// injectMessy applies one of the messy world's faults; seed draws its
// choices, and a malformed record or a phantom stays for half of hold.
func (h *Harness) injectMessy(ctx context.Context, kind, target string, hold time.Duration, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed>>32|1))
	hold /= 2
	m := &h.messy
	if !m.lock(ctx) {
		return ctx.Err()
	}
	locked := true
	defer func() {
		if locked {
			m.unlock()
		}
	}()
	switch kind {
	case FaultSetRolling:
		b, dropped, added := m.change(rng)
		h.Note(chaos.KindFault, kind, "", fmt.Sprintf("%d shards: -%v +%v", len(b), dropped, added))
		h.rollOut(ctx, b, 300*time.Millisecond, 700*time.Millisecond, rng)
		h.Note(chaos.KindHeal, kind, "", "")
		return nil
	case FaultSetOne:
		set := h.SetOf(target)
		if set == nil {
			set = slices.Clone(m.fleet)
		}
		var detail string
		if rng.IntN(2) == 0 || len(set) < 2 {
			s := m.newShard()
			m.dropped = append(m.dropped, s) // no one else has it: dropped for the rest of the fleet
			set = append(set, s)
			detail = "+" + s
		} else {
			i := rng.IntN(len(set))
			detail = "-" + set[i]
			set = slices.Delete(set, i, i+1)
		}
		h.Note(chaos.KindFault, kind, target, detail)
		h.SetShards(target, set)
		h.Note(chaos.KindHeal, kind, target, "")
		return nil
	case FaultMalformed:
		c := tamper.Cases[m.nCase%len(tamper.Cases)]
		m.nCase++
		shard, out, err := h.writeMalformed(ctx, c, rng)
		h.Note(chaos.KindFault, kind, "", fmt.Sprintf("shard %s: %s", shard, c))
		if err != nil {
			h.Note(chaos.KindHeal, kind, "", "not written: "+err.Error())
			return nil
		}
		h.log.Add(Record{Mono: chaos.MonoOf(out.Done), Who: "harness", Kind: chaos.KindMalformed, Shard: shard, Detail: string(c)})
		b := append(slices.Clone(m.fleet), shard)
		m.dropped = slices.DeleteFunc(m.dropped, func(s string) bool { return s == shard })
		h.rollOut(ctx, b, 100*time.Millisecond, 200*time.Millisecond, rng)
		m.unlock()
		locked = false
		chaos.Sleep(ctx, hold)
		out, err = m.other.Repair(context.WithoutCancel(ctx), shardBlob(shard), tamper.KindShard, time.Now().Add(h.repairWithin()), 20*time.Millisecond)
		if err != nil {
			h.Note(chaos.KindHeal, kind, "", "unrepaired: "+err.Error())
			return nil
		}
		h.log.Add(Record{Mono: chaos.MonoOf(out.Sent), Who: "harness", Kind: chaos.KindRepair, Shard: shard, Term: out.Term})
		h.Note(chaos.KindHeal, kind, "", "repaired: term "+strconv.FormatInt(out.Term, 10))
		return nil
	case FaultPhantom:
		m.nTag++
		tag := strconv.Itoa(m.nTag)
		m.unlock()
		locked = false
		h.Note(chaos.KindFault, kind, "", "")
		ps, err := m.other.Phantoms(ctx, Prefix, tag)
		for _, p := range ps {
			h.log.Add(Record{Mono: chaos.Mono(), Who: "harness", Kind: KindPhantom, Blob: p.Name})
		}
		if err == nil {
			chaos.Sleep(ctx, hold)
		}
		rerr := m.other.RemovePhantoms(context.WithoutCancel(ctx), ps, time.Now().Add(30*time.Second), 50*time.Millisecond)
		if rerr == nil {
			for _, p := range ps {
				h.log.Add(Record{Mono: chaos.Mono(), Who: "harness", Kind: KindPhantomGone, Blob: p.Name})
			}
		}
		detail := ""
		if err != nil || rerr != nil {
			detail = fmt.Sprint(err, rerr)
		}
		h.Note(chaos.KindHeal, kind, "", detail)
		return nil
	}
	return fmt.Errorf("shardchaos: unknown fault kind %q", kind)
}

// change draws the fleet's next set: one to three of its shards dropped,
// one to three added, each a shard dropped before or, half the time, a new
// one.
func (m *messy) change(rng *rand.Rand) (b, dropped, added []string) {
	b = slices.Clone(m.fleet)
	for range 1 + rng.IntN(3) {
		if len(b) <= 2 {
			break
		}
		i := rng.IntN(len(b))
		dropped = append(dropped, b[i])
		b = slices.Delete(b, i, i+1)
	}
	for range 1 + rng.IntN(3) {
		if len(m.dropped) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(m.dropped))
			added = append(added, m.dropped[i])
			m.dropped = slices.Delete(m.dropped, i, i+1)
		} else {
			added = append(added, m.newShard())
		}
	}
	m.dropped = append(m.dropped, dropped...)
	return append(b, added...), dropped, added
}

// rollOut gives every lane set b, one at a time, pausing between lo and
// lo+spread after each, and makes it the fleet's set. Call it holding
// setMu.
func (h *Harness) rollOut(ctx context.Context, b []string, lo, spread time.Duration, rng *rand.Rand) {
	for _, l := range h.Lanes() {
		h.SetShards(l, b)
		chaos.Sleep(ctx, lo+time.Duration(rng.Int64N(int64(spread))))
	}
	h.messy.fleet = slices.Sorted(slices.Values(b))
}

// writeMalformed writes c's record on the blob of a shard the fleet does
// not run: half the time one dropped before, once its blob is unleased
// (within 3 s), else (or failing that) a new one, whose blob it creates.
// Call it holding setMu.
func (h *Harness) writeMalformed(ctx context.Context, c tamper.Case, rng *rand.Rand) (string, tamper.Outcome, error) {
	m := &h.messy
	if len(m.dropped) > 0 && rng.IntN(2) == 0 {
		shard := m.dropped[rng.IntN(len(m.dropped))]
		out, err := m.other.WriteMalformed(ctx, shardBlob(shard), tamper.KindShard, c, time.Now().Add(3*time.Second), 20*time.Millisecond)
		if err == nil {
			return shard, out, nil
		}
		h.progress("malformed record on dropped shard %s: %v; on a new shard instead", shard, err)
	}
	shard := m.newShard()
	out, err := m.other.WriteMalformed(ctx, shardBlob(shard), tamper.KindShard, c, time.Now().Add(3*time.Second), 20*time.Millisecond)
	return shard, out, err
}

// repairWithin bounds how long a repair waits for the shard's blob to be
// unleased: an instance that took the lease and found the record malformed
// must let it go.
func (h *Harness) repairWithin() time.Duration {
	return max(time.Minute, 4*h.cfg.Timings.LeaseDuration)
}
