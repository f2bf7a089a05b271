package main

import (
	"os"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/buildinfo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Run on a copy of BENCHMARKS.md, the command rewrites its section and its
// summary row in place, stamped with the commit, and keeps every other
// byte.
func TestRollbenchRewritesOnlyWhatItOwns(t *testing.T) {
	results := [][]outcome{
		{{moves: 2, stopped: 680 * time.Millisecond}, {moves: 1, stopped: 450 * time.Millisecond}, {moves: 2, stopped: 870 * time.Millisecond}},
		{{moves: 1, stopped: 100 * time.Millisecond, onNew: true}, {moves: 1, stopped: 70 * time.Millisecond, onNew: true}, {moves: 1, stopped: 130 * time.Millisecond, onNew: true}},
	}
	pub := publication(5, 3, 5*time.Second, time.Minute, modes, results)
	assert.Contains(t, pub.Rows[0], "| 2 [1–2] / 0.68 s [0.45–0.87]; with `WithPriority` 1 [1–1] / 0.10 s [0.07–0.13] |")
	b, err := os.ReadFile("../../../BENCHMARKS.md")
	require.NoError(t, err)
	assert.NoError(t, benchdoc.Check(string(b), pub, buildinfo.Revision()))
}
