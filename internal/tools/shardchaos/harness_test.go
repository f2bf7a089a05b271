package shardchaos

import (
	"context"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/childproc"
	"github.com/blobelect/leaderelection/internal/tools/tamper"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The counts kept as records come say what State says, through starts,
// ends, a shard run twice and an instance's exit.
func TestCountsFollowTheRecordsAsStateDoes(t *testing.T) {
	other, err := tamper.New(azurite.ConnectionStringFor("http://127.0.0.1:1/devstoreaccount1"), Container)
	require.NoError(t, err)
	h := &Harness{running: map[string]map[string]bool{}, owned: map[string]int{}, alive: map[string]bool{}, reqs: map[string]int64{}, sets: map[string][]string{}}
	h.messy.other = other
	h.log = childproc.NewLog(h.track)
	check := func(running, doubled int, owned map[string]int) {
		t.Helper()
		s := h.State()
		assert.Equal(t, running, s.Running)
		assert.Len(t, s.Doubled, doubled)
		assert.Equal(t, owned, s.Owned)
		var c Counts
		_, ok := h.WaitCounts(context.Background(), time.Second, func(got Counts) bool { c = got; return true })
		require.True(t, ok)
		assert.Equal(t, Counts{Running: running, Doubled: doubled, Owned: owned}, c)
	}
	for _, r := range join(spawn(0, "a"), spawn(0, "b")) {
		h.log.Add(r)
	}
	h.log.Add(start(1, "a", "s1", 1))
	h.log.Add(start(1, "a", "s1", 1)) // a repeat changes nothing
	h.log.Add(start(1, "a", "s2", 1))
	h.log.Add(start(1, "b", "s3", 1))
	check(3, 0, map[string]int{"a": 2, "b": 1})
	h.log.Add(start(2, "b", "s1", 2))
	check(3, 1, map[string]int{"a": 2, "b": 2})
	h.log.Add(end(3, "a", "s1", 1))
	h.log.Add(end(3, "a", "s9", 1)) // never started: nothing
	check(3, 0, map[string]int{"a": 1, "b": 2})
	h.log.Add(start(4, "a", "s3", 2))
	check(3, 1, map[string]int{"a": 2, "b": 2})
	h.log.Add(Record{Mono: at(5), Who: "b", Kind: chaos.KindExit})
	check(2, 0, map[string]int{"a": 2})
	assert.True(t, Counts{Running: 2, Owned: map[string]int{"a": 1, "c": 1}}.Converged(2, []string{"a", "c"}))
	assert.False(t, Counts{Running: 2, Doubled: 1, Owned: map[string]int{"a": 1, "c": 1}}.Converged(2, []string{"a", "c"}))
	assert.False(t, Counts{Running: 2, Owned: map[string]int{"a": 2}}.Converged(2, []string{"a", "c"}))
}
