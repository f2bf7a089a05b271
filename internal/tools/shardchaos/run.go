package shardchaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/tamper"
)

// ChaosConfig configures RunChaos.
type ChaosConfig struct {
	Config
	Instances int
	Seed      int64    // the faults are drawn from it
	Faults    int      // how many faults to inject
	Kinds     []string // default AllFaults
	// Sequence, if set, is the faults' kinds in order (Faults and Kinds
	// are then ignored); only their targets are drawn.
	Sequence []string
	// Overlap lets faults overlap: a new one every 1 to 3 s on an instance
	// not already hit, with at most half the instances hit at once, and
	// no wait for the shards to settle in between. Otherwise each fault
	// waits until every shard runs, spread within one.
	Overlap bool
	// Settle bounds the wait for the shards to settle after a fault (and
	// at the start and the end). Default 30 s.
	Settle time.Duration
	// SetChanges adds SetFaults to the draw (rolling changes of every
	// instance's set, and one instance's set alone), Malformed adds
	// OtherWriterFaults (malformed shard records, repaired a hold later,
	// and phantom sessions). A Sequence may name them whatever these say.
	SetChanges, Malformed bool
}

// ChaosResult is what RunChaos did and found.
type ChaosResult struct {
	Report
	// Settled is, for each fault (without Overlap), how long after it
	// healed every shard ran again, spread within one.
	Settled   []time.Duration
	Unsettled int // faults after which the shards did not settle within Settle
	Records   []Record
}

// RunChaos starts cfg.Instances instances, injects faults, stops them all,
// and checks the records.
func RunChaos(ctx context.Context, cfg ChaosConfig) (res ChaosResult, err error) {
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = AllFaults
	}
	if cfg.SetChanges {
		cfg.Kinds = append(slices.Clone(cfg.Kinds), SetFaults...)
	}
	if cfg.Malformed {
		cfg.Kinds = append(slices.Clone(cfg.Kinds), OtherWriterFaults...)
	}
	if cfg.Settle == 0 {
		cfg.Settle = 30 * time.Second
	}
	h, err := Start(ctx, cfg.Config)
	if err != nil {
		return ChaosResult{}, err
	}
	defer func() {
		err = errors.Join(err, h.Close())
		res.Records = h.Records()
		res.Report = Check(res.Records, cfg.CheckTimings())
	}()
	for range cfg.Instances {
		if _, err := h.AddLane(); err != nil {
			return res, err
		}
	}
	lanes := h.Lanes()
	// Settled: every lane alive and, a ShardOwner's, running a session (so
	// that a process started again has resumed its session, or started
	// another, before the next fault: the check of a late acquire needs
	// it), every shard of a live set running on one instance that has it,
	// nothing else running; the counts within one while the sets agree.
	sessions := h.cfg.Algo != AlgoMutex // a mutex per shard has no session
	settled := func(s State) bool {
		for _, l := range lanes {
			if !s.Alive[l] || sessions && s.Sessions[l] == "" {
				return false
			}
		}
		return s.Covered()
	}
	if _, ok := h.WaitFor(ctx, cfg.Settle, settled); !ok {
		return res, fmt.Errorf("shardchaos: %d shards did not settle over %d instances within %v: %+v", cfg.Shards, cfg.Instances, cfg.Settle, h.State())
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Seed)>>32|1))
	D := cfg.Timings.LeaseDuration
	if len(cfg.Sequence) > 0 {
		cfg.Faults = len(cfg.Sequence)
	}
	if !cfg.Overlap {
		for n := 0; n < cfg.Faults && ctx.Err() == nil; n++ {
			kind := cfg.Kinds[rng.IntN(len(cfg.Kinds))]
			if len(cfg.Sequence) > 0 {
				kind = cfg.Sequence[n]
			}
			target := h.targetOf(kind, lanes, rng.IntN(len(lanes)))
			hold := D + time.Duration(1000+rng.IntN(2000))*time.Millisecond
			respawnAfter := time.Duration(rng.IntN(int(D/time.Millisecond))) * time.Millisecond
			if err := h.inject(ctx, kind, target, hold, respawnAfter, messySeed(kind, rng)); err != nil {
				return res, err
			}
			took, ok := h.WaitFor(ctx, cfg.Settle, settled)
			if ok {
				res.Settled = append(res.Settled, took)
			} else {
				res.Unsettled++
				h.progress("shards did not settle within %v after %s of %s: %+v", cfg.Settle, kind, target, h.State())
			}
			h.progress("fault %d: %s %s; settled %v later", n+1, kind, target, took.Round(time.Millisecond))
		}
		return res, ctx.Err()
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	hit := map[string]bool{}
	var injectErr error
	for n := 0; n < cfg.Faults && ctx.Err() == nil; n++ {
		if !chaos.Sleep(ctx, time.Duration(1000+rng.IntN(2000))*time.Millisecond) {
			break
		}
		kind := cfg.Kinds[rng.IntN(len(cfg.Kinds))]
		hold := D + time.Duration(1000+rng.IntN(2000))*time.Millisecond
		respawnAfter := time.Duration(rng.IntN(int(D/time.Millisecond))) * time.Millisecond
		pick := rng.IntN(len(lanes))
		seed := messySeed(kind, rng)
		mu.Lock()
		var free []string
		for _, l := range lanes {
			if !hit[l] {
				free = append(free, l)
			}
		}
		if len(free) <= len(lanes)-len(lanes)/2 {
			mu.Unlock()
			n-- // wait for a fault to end
			continue
		}
		target := h.targetOf(kind, free, pick)
		hit[target] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.inject(ctx, kind, target, hold, respawnAfter, seed); err != nil {
				mu.Lock()
				injectErr = errors.Join(injectErr, err)
				mu.Unlock()
			}
			mu.Lock()
			delete(hit, target)
			mu.Unlock()
		}()
		if (n+1)%25 == 0 {
			h.progress("%d faults injected", n+1)
		}
	}
	wg.Wait()
	if injectErr != nil {
		return res, injectErr
	}
	if _, ok := h.WaitFor(ctx, cfg.Settle, settled); !ok {
		res.Unsettled++
		h.progress("shards did not settle within %v after the last fault: %+v", cfg.Settle, h.State())
	}
	return res, ctx.Err()
}

// CheckTimings are the chaos checker's timings for these instances.
func (cfg ChaosConfig) CheckTimings() chaos.Timings {
	t := cfg.Timings
	return chaos.Timings{LeaseDuration: t.LeaseDuration, RetryInterval: t.RetryInterval, Slack: 5 * time.Second, Detect: t.LeaseDuration}
}

// messySeed draws the choices of a messy world's fault (and nothing for
// the others, whose draws stay as they were).
func messySeed(kind string, rng *rand.Rand) uint64 {
	if slices.Contains(SetFaults, kind) || slices.Contains(OtherWriterFaults, kind) {
		return rng.Uint64()
	}
	return 0
}

// inject applies one fault to lane target, holds it, heals it, and for a
// kill or a graceful stop starts a new instance in the lane respawnAfter
// later. The messy world's faults draw their choices from seed.
func (h *Harness) inject(ctx context.Context, kind, target string, hold, respawnAfter time.Duration, seed uint64) error {
	switch kind {
	case FaultKill:
		h.Note(chaos.KindFault, kind, target, "SIGKILL")
		h.Kill(target)
		h.Note(chaos.KindHeal, kind, target, "")
		chaos.Sleep(ctx, respawnAfter)
		return h.Spawn(target)
	case FaultGraceful:
		h.Note(chaos.KindFault, kind, target, "SIGTERM")
		err := h.Terminate(target, 30*time.Second)
		h.Note(chaos.KindHeal, kind, target, "")
		if err != nil {
			return err
		}
		chaos.Sleep(ctx, respawnAfter)
		return h.Spawn(target)
	case FaultFreeze:
		h.Note(chaos.KindFault, kind, target, "hold "+hold.Round(time.Millisecond).String())
		h.Freeze(target)
		chaos.Sleep(ctx, hold)
		// Stamped before the signal: the thawed process stamps its own
		// records at once.
		h.Note(chaos.KindHeal, kind, target, "SIGCONT")
		h.Thaw(target)
		return nil
	case FaultLateAcquire:
		return h.lateAcquire(ctx, target, respawnAfter)
	case FaultPartition:
		h.Note(chaos.KindFault, kind, target, "hold "+hold.Round(time.Millisecond).String())
		if err := h.Partition(target); err != nil {
			return err
		}
		chaos.Sleep(ctx, hold)
		h.Heal(target)
		h.Note(chaos.KindHeal, kind, target, "")
		return nil
	}
	return h.injectMessy(ctx, kind, target, hold, seed)
}

// targetOf picks lanes[pick % len] as the target of a fault of kind, but
// for a late acquire, which hits a static lane (one with a lease ID file:
// its restart could resume the dead session) when lanes has one.
func (h *Harness) targetOf(kind string, lanes []string, pick int) string {
	if kind == FaultLateAcquire {
		var static []string
		for _, l := range lanes {
			if h.static(l) {
				static = append(static, l)
			}
		}
		if len(static) > 0 {
			lanes = static
		}
	}
	return lanes[pick%len(lanes)]
}

// lateAcquire kills lane target, waits until the others have judged its
// session dead (its lease broken and its end mark written), acquires that
// lease under the session's ID as a late acquire would, and starts a new
// process in the lane respawnAfter later.
func (h *Harness) lateAcquire(ctx context.Context, target string, respawnAfter time.Duration) error {
	h.mu.Lock()
	session := h.sessions[target]
	h.mu.Unlock()
	h.Note(chaos.KindFault, FaultLateAcquire, target, "SIGKILL; session "+session)
	h.Kill(target)
	detail := "no session"
	if session != "" {
		blob := Prefix + "/" + tamper.SessionsDir + session
		out, err := h.messy.other.AcquireLate(ctx, blob, session, time.Now().Add(3*h.cfg.Timings.LeaseDuration+30*time.Second), 50*time.Millisecond)
		switch {
		case err == nil:
			detail = "leased again under its ID"
			h.log.Add(Record{Mono: chaos.MonoOf(out.Sent), Who: "harness", Kind: KindLateAcquire, Blob: blob, Session: session})
		default:
			detail = "not leased again: " + err.Error()
		}
	}
	h.Note(chaos.KindHeal, FaultLateAcquire, target, detail)
	chaos.Sleep(ctx, respawnAfter)
	return h.Spawn(target)
}
