package leaderelection

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
)

// A read of the session's blob proves the claims that were waiting when it
// was started, not those that asked while it was in flight (it may have
// been sent before their leases were granted); a failure is shared as a
// success is; a read that finds the blob gone answers every later claim,
// with no read.
func TestSessionProofSharesEachReadAmongTheClaimsWaitingWhenItStarted(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		ctx := context.Background()
		var p sessionProof
		var reads atomic.Int32
		answer := func(there bool, err error) func(context.Context) (bool, error) {
			return func(context.Context) (bool, error) {
				reads.Add(1)
				time.Sleep(100 * time.Millisecond)
				return there, err
			}
		}
		var wg sync.WaitGroup
		ask := func(n int, read func(context.Context) (bool, error), want bool, wantErr error) {
			for range n {
				wg.Go(func() {
					ok, err := p.after(ctx, read)
					assert.Equal(t, want, ok)
					assert.Equal(t, wantErr, err)
				})
			}
		}

		ask(1, answer(true, nil), true, nil)
		time.Sleep(10 * time.Millisecond) // the first read in flight
		ask(9, answer(true, nil), true, nil)
		wg.Wait()
		assert.EqualValues(t, 2, reads.Load(), "one read for the first claim, one for the nine that asked during it")

		failed := errors.New("timed out")
		ask(1, answer(false, failed), false, failed)
		time.Sleep(10 * time.Millisecond)
		ask(4, answer(false, failed), false, failed)
		wg.Wait()
		assert.EqualValues(t, 4, reads.Load(), "a failure shared by the four that asked during the last")

		ask(1, answer(false, nil), false, nil)
		wg.Wait()
		ok, err := p.after(ctx, answer(true, nil))
		assert.False(t, ok)
		assert.NoError(t, err)
		assert.EqualValues(t, 5, reads.Load(), "gone for good: no more reads")
	})
}
