package leaderelection

import (
	"log/slog"
	"testing"
	"time"
)

// BenchmarkShutdown10000Shards measures the shutdown bound at scale: one
// ShardOwner runs 10,000 shards on Azurite at the default timings (but a
// RetryInterval of 300 ms, which only makes the claims faster), storage
// goes silent (the fault transport's Blackhole), and the caller cancels.
// It reports how long Run took to return after the cancel (s/shutdown);
// every shard func returns at once. Each run claims 10,000 shards first (a
// minute or two); not part of the default test run. For the figure in
// BENCHMARKS.md:
//
//	go test -run '^$' -bench BenchmarkShutdown10000Shards -benchtime 1x -count 3 -timeout 30m .
func BenchmarkShutdown10000Shards(b *testing.B) {
	const n = 10000
	var total time.Duration
	for range b.N {
		b.StopTimer()
		s := testSettings(b)
		s.LeaseDuration, s.StopMargin, s.RetryInterval = 0, 0, shardTestRetry // defaults: RequestTimeout 4 s
		s, tr := withTransport(b, s)
		took, sinceFuncs := shutdownShardOwner(b, s, tr.Blackhole, n, slog.New(slog.DiscardHandler))
		tr.Close()
		total += took
		b.Logf("%d shards, storage silent: Run returned %v after the cancel, %v after the last shard func returned (bound %v)",
			n, took.Round(time.Millisecond), sinceFuncs.Round(time.Millisecond), 2*s.withDefaults().RequestTimeout)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(total.Seconds()/float64(b.N), "s/shutdown")
}
