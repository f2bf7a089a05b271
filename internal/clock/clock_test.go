package clock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestJitterAndBehindStayInTheirRanges(t *testing.T) {
	d := 400 * time.Millisecond
	for range 10000 {
		j, b := Jitter(d), Behind(d)
		assert.True(t, j >= 3*d/4 && j <= d, "jitter %v", j)
		assert.True(t, b >= d && b <= 5*d/4, "behind %v", b)
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		assert.True(t, Sleep(context.Background(), time.Minute))
		assert.Equal(t, time.Minute, time.Since(start))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		assert.False(t, Sleep(ctx, time.Hour))
		assert.False(t, Sleep(ctx, 0), "a done context ends even a zero wait")
		assert.True(t, Sleep(context.Background(), 0))
	})
}

func TestTheBootClockCounts(t *testing.T) {
	a := SinceBoot()
	time.Sleep(10 * time.Millisecond)
	assert.GreaterOrEqual(t, SinceBoot()-a, 10*time.Millisecond)
	synctest.Test(t, func(t *testing.T) {
		b := Monotonic()
		time.Sleep(15 * time.Second)
		assert.Equal(t, 15*time.Second, b(), "a bubble's boot clock follows its time")
	})
}

func TestSeedRepeatsTheWaits(t *testing.T) {
	draws := func() []time.Duration {
		restore := Seed(42)
		defer restore()
		var out []time.Duration
		for range 5 {
			out = append(out, Jitter(time.Second), Behind(time.Second))
		}
		return out
	}
	a, b := draws(), draws()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d: %v then %v under the same seed", i, a[i], b[i])
		}
	}
	if seeded.Load() != nil {
		t.Fatal("the global source was not put back")
	}
}
