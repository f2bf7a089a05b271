package main

import (
	"os"
	"syscall"
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
func TestShardrestartRewritesOnlyWhatItOwns(t *testing.T) {
	var rs []restart
	for i := range 24 {
		sig := syscall.SIGKILL
		if i%2 == 1 {
			sig = syscall.SIGTERM
		}
		all := time.Duration(600+i*10) * time.Millisecond
		rs = append(rs, restart{file: true, sig: sig, held: 250, all: all, idle: []time.Duration{all / 2}, starts: 250, resumed: 250, floor: 400 * time.Millisecond})
	}
	rs = append(rs, restart{sig: syscall.SIGKILL, held: 250, all: 15 * time.Second, idle: []time.Duration{15 * time.Second}, away: 150, starts: 400, resumed: 100})
	pub := publication(rs, 1000, 4, 3*time.Minute)
	assert.Contains(t, pub.Rows[0], "| 250 shards: p50 0.70 s, p99 0.82 s (SIGKILL; target 1 s at p99) | 12 restarts | 0.40 s: 1.75× [1.50–2.05] |")
	b, err := os.ReadFile("../../../BENCHMARKS.md")
	require.NoError(t, err)
	assert.NoError(t, benchdoc.Check(string(b), pub, buildinfo.Revision()))
}
