package leaderelection

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
)

// One read of the session's blob proves every claim granted before it was
// sent, and none granted after; a read that finds the blob gone answers
// every later claim, with no read.
func TestSessionProofSharesOneReadAmongTheClaimsGrantedBeforeIt(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		var p sessionProof
		var reads atomic.Int32
		there := true
		read := func(context.Context) (bool, error) {
			reads.Add(1)
			time.Sleep(100 * time.Millisecond)
			return there, nil
		}
		granted := time.Now()
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				ok, err := p.after(ctx, granted, read)
				assert.NoError(t, err)
				assert.True(t, ok)
			})
		}
		wg.Wait()
		assert.EqualValues(t, 1, reads.Load(), "one read for the ten claims")

		ok, err := p.after(ctx, granted, read)
		assert.True(t, ok && err == nil)
		assert.EqualValues(t, 1, reads.Load(), "already proved")

		time.Sleep(time.Millisecond)
		there = false
		ok, err = p.after(ctx, time.Now(), read)
		assert.False(t, ok)
		assert.NoError(t, err)
		assert.EqualValues(t, 2, reads.Load(), "a claim granted after the read was sent needs another")
		ok, _ = p.after(ctx, time.Now(), read)
		assert.False(t, ok)
		assert.EqualValues(t, 2, reads.Load(), "gone for good")
	})
}
