package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/buildinfo"
	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeResults is a run's results with a few faults in every batch: what
// the publication is made from, without the 21 minutes of a run.
func fakeResults(t *testing.T, o options) results {
	faults := func(gap time.Duration) []chaos.Report {
		return []chaos.Report{{Faults: []chaos.FaultResult{
			{Kind: chaos.FaultKill, Changed: true, Gap: gap, StopMargin: time.Second, StopMarginOK: true},
			{Kind: chaos.FaultKill, Changed: true, Gap: gap + time.Second, StopMargin: 2 * time.Second, StopMarginOK: true},
		}}}
	}
	res := results{sus: setups(o), scenarios: scenarios, failover: map[string]map[string]*batch{}, steady: map[string]*batch{}}
	for _, sc := range scenarios {
		res.failover[sc.kind] = map[string]*batch{}
		for _, su := range res.sus {
			res.failover[sc.kind][su.key] = &batch{setup: su, reports: faults(3 * time.Second)}
		}
	}
	for _, su := range res.sus {
		res.steady[su.key] = &batch{setup: su, reports: []chaos.Report{{}}, dirs: []string{t.TempDir()}}
	}
	res.crowd = &batch{reports: faults(12 * time.Second)}
	for _, su := range []setup{{key: "native", title: "native lease 15 s"}, {key: "etag3", title: "ETag lease 3 s", etag: true}} {
		res.chaos = append(res.chaos, &batch{setup: su, reports: faults(2 * time.Second)})
	}
	return res
}

// The bench, run on a copy of BENCHMARKS.md, rewrites only its own
// sections and summary rows (each of which the file has: in place), keeps
// every other byte, and stamps the commit it measured in its first section
// and its rows.
func TestTheBenchRewritesOnlyWhatItOwns(t *testing.T) {
	b, err := os.ReadFile("../../../../../BENCHMARKS.md")
	require.NoError(t, err)
	o := options{commit: buildinfo.Revision(), parallel: 2, steady: 3 * time.Minute}
	pub, err := publication(o, fakeResults(t, o), 21*time.Minute)
	require.NoError(t, err)
	require.Len(t, pub.Sections, len(ownSections))
	for i, s := range pub.Sections {
		assert.True(t, strings.HasPrefix(s, "## "+ownSections[i]+"\n"), s)
	}
	assert.NoError(t, benchdoc.Check(string(b), pub, o.commit))
}
