package leaderelection

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/blobelect/leaderelection/internal/memblob"
)

// simTrigger is a blob-triggered function on the fleet's container (an
// Event Grid subscription to BlobCreated, or an Azure Functions blob
// trigger), as production containers often have: it runs on a blob an
// instance of the library uploaded (Put Blob: a record's blob created, a
// note, a held list), shortly after (Event Grid delivers within about 0 to
// 2 s), and does something to that very blob, one action of the other
// writer (sim_writers_test.go) drawn as a point's "other writer" draws it,
// held back by the same limits. Half the fleets have one, which acts on
// every upload (half of them) or on a share drawn from 5 to 50%; its
// actions fall in a storm (the first from the fleet's start), before the
// storm's calm less 10 s, as a point's effects (simPoints.left). The
// writer's own uploads (its content rewrites, which carry simWriterMarker)
// do not fire it.
type simTrigger struct {
	f    *simFleet
	odds float64 // 0: the container has no trigger

	mu  sync.Mutex
	rng *rand.Rand // the fleet's "trigger" stream: its odds, then each upload's draws
}

func newSimTrigger(f *simFleet) *simTrigger {
	t := &simTrigger{f: f, rng: f.rngFor("trigger")}
	if t.rng.IntN(2) == 0 {
		// A function that acts on every blob it is told of (most do:
		// one that tags, normalizes or copies each blob), or, half the
		// time, on some (one that filters by name or content). Counted
		// among the draws (sim.Result.Drawn), not the faults.
		t.odds = 1
		if t.rng.IntN(2) == 0 {
			t.odds = 0.05 + 0.45*t.rng.Float64()
		}
	}
	return t
}

// observe is the trigger's part of the fleet's observer, under the fake's
// lock: an upload by an instance may fire it; its action runs later, in a
// goroutine of the fleet's, outside the lock.
func (t *simTrigger) observe(e memblob.Event) {
	if t.odds == 0 || e.Op != memblob.OpUpload || !e.OK() || e.Admin || e.Container != simContainer || byWriter(e.Metadata) {
		return
	}
	f := t.f
	left, calm := f.actors.points.left()
	if left == 0 || f.ctx.Err() != nil {
		return
	}
	t.mu.Lock()
	fire := t.rng.Float64() < t.odds
	d := time.Duration(t.rng.Int64N(int64(2*time.Second) + 1))
	r := rand.New(rand.NewPCG(t.rng.Uint64(), t.rng.Uint64()))
	t.mu.Unlock()
	if !fire || d >= left {
		return
	}
	blob := e.Blob
	f.wg.Go(func() {
		select {
		case <-f.ctx.Done():
			return
		case <-time.After(d):
		}
		f.trace.printf(time.Now(), "trigger: on the upload of %s, %v later", blob, d)
		simWriterCall{simWriter: f.actors.writer, r: r, as: "trigger"}.actAs(blob, calm, "")
	})
}
