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
func TestRestartbenchRewritesOnlyWhatItOwns(t *testing.T) {
	var trials []trial
	for i := range 100 {
		d := time.Duration(10+i%7) * time.Millisecond
		trials = append(trials, trial{total: d, inProcess: d / 2, resumed: true, refused: true, refusedIn: 100 * time.Microsecond})
	}
	b, err := os.ReadFile("../../../BENCHMARKS.md")
	require.NoError(t, err)
	assert.NoError(t, benchdoc.Check(string(b), publication(trials, 0, 3*time.Second), buildinfo.Revision()))
}
