package benchdoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A section is created, appended, and replaced in place, keeping the
// sections around it.
func TestWriteSectionReplacesOnlyItsOwnSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	read := func() string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}

	require.NoError(t, WriteSection(path, "## B", "## B\n\nfirst\n"))
	assert.Equal(t, "## B\n\nfirst\n", read(), "a missing file is created")

	require.NoError(t, os.WriteFile(path, []byte("# Benchmarks\n\n## A\n\na\n\n## B\n\nold\nlines\n\n## C\n\nc\n"), 0o644))
	require.NoError(t, WriteSection(path, "## B", "## B\n\nnew\n"))
	assert.Equal(t, "# Benchmarks\n\n## A\n\na\n\n## B\n\nnew\n\n## C\n\nc\n", read())

	require.NoError(t, WriteSection(path, "## C", "## C\n\nlast\n"))
	assert.Equal(t, "# Benchmarks\n\n## A\n\na\n\n## B\n\nnew\n\n## C\n\nlast\n", read(), "the last section runs to the end")

	require.NoError(t, WriteSection(path, "## D", "## D\n\nd\n"))
	assert.Equal(t, "# Benchmarks\n\n## A\n\na\n\n## B\n\nnew\n\n## C\n\nlast\n\n## D\n\nd\n", read(), "a new section is appended")

	require.NoError(t, WriteSection(path, "## A", "## A\n\n### A1\n\na1\n"))
	assert.Equal(t, "# Benchmarks\n\n## A\n\n### A1\n\na1\n\n## B\n\nnew\n\n## C\n\nlast\n\n## D\n\nd\n", read(), "a section's subsections are its own")

	assert.Error(t, WriteSection(path, "## E", "## F\n\nf\n"), "a section under another heading")
}

// A summary row replaces the row of the same first cell, in place; a new
// one goes after the table's last row; the rest of the table, and of the
// file, stays as it was.
func TestSummaryRowsReplaceTheirOwnRows(t *testing.T) {
	doc := "# B\n\n## Summary\n\n| figure | value |\n|---|---|\n| crash | 1 s |\n| handover | 2 s |\n| restart | 3 ms |\n\nafter the table\n\n## Failover\n\nold\n"
	got, err := Apply(doc, Publication{
		Sections: []string{"## Failover\n\nnew\n"},
		Rows:     []string{"| handover | 0.5 s |", "| rollout | 4 s |"},
	})
	require.NoError(t, err)
	assert.Equal(t, "# B\n\n## Summary\n\n| figure | value |\n|---|---|\n| crash | 1 s |\n| handover | 0.5 s |\n| restart | 3 ms |\n| rollout | 4 s |\n\nafter the table\n\n## Failover\n\nnew\n", got)

	_, err = Apply("# B\n", Publication{Rows: []string{"| a | b |"}})
	assert.Error(t, err, "no summary to put a row in")
	_, err = Apply(doc, Publication{Rows: []string{"not a row"}})
	assert.Error(t, err)
}

// On a copy of the real BENCHMARKS.md, a publication that rewrites some
// sections and summary rows (and adds one of each) leaves everything else
// byte for byte, which Outside shows.
func TestAPublicationKeepsTheRestOfBENCHMARKSByteForByte(t *testing.T) {
	b, err := os.ReadFile("../../../BENCHMARKS.md")
	require.NoError(t, err)
	before := string(b)
	p := Publication{
		Sections: []string{"## Failover\n\nrewritten\n", "## Restart with a lease ID file\n\nrewritten too\n| a | table |\n", "## A new one\n\nnew\n"},
		Rows: []string{
			"| crash failover (SIGKILL), defaults (native lease 15 s) | p50 1 s, p99 2 s | 30 trials | | abcdef0 | the same |",
			"| a figure not there before | 1 | one run | | abcdef0 | a command |",
		},
	}
	after, err := Apply(before, p)
	require.NoError(t, err)
	assert.Equal(t, Outside(before, p), Outside(after, p))
	assert.NotEqual(t, before, after)
	for _, s := range p.Sections {
		assert.Contains(t, after, s)
	}
	for _, r := range p.Rows {
		assert.Contains(t, after, r+"\n")
	}
	changed := strings.Replace(after, "## How to measure", "## How to Measure", 1)
	assert.NotEqual(t, Outside(before, p), Outside(changed, p), "a change outside shows")
	again, err := Apply(after, p)
	require.NoError(t, err)
	assert.Equal(t, after, again, "publishing the same twice changes nothing")
}

// Check accepts a command's refresh of what it owns, and names each way a
// publication would go wrong.
func TestCheckNamesWhatAPublicationWouldBreak(t *testing.T) {
	doc := "# B\n\n## Summary\n\n| figure | commit |\n|---|---|\n| crash | abc |\n\n## Failover\n\nProduced at commit abc.\n"
	good := Publication{Sections: []string{"## Failover\n\nProduced at commit def.\n"}, Rows: []string{"| crash | def |"}}
	assert.NoError(t, Check(doc, good, "def"))
	for _, tc := range []struct {
		p    Publication
		want string
	}{
		{Publication{Sections: []string{"## Other\n\ncommit def\n"}}, `the file has no section "## Other"`},
		{Publication{Sections: []string{"## Failover\n\nno stamp\n"}}, `does not say "commit def"`},
		{Publication{Rows: []string{"| restart | def |"}}, `the summary has no row "restart"`},
		{Publication{Rows: []string{"| crash | abc |"}}, `the row "crash" does not carry the commit def`},
	} {
		assert.ErrorContains(t, Check(doc, tc.p, "def"), tc.want)
	}
}

// A figure over runs is their median and range, never the best run.
func TestSpreadOfTakesTheMedianNotTheBest(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Spread
	}{
		{[]float64{3, 1, 2}, Spread{2, 1, 3}},
		{[]float64{4, 1, 3, 2}, Spread{2.5, 1, 4}},
		{[]float64{7}, Spread{7, 7, 7}},
		{nil, Spread{}},
	} {
		assert.Equal(t, c.want, SpreadOf(c.in), "%v", c.in)
	}
	assert.Equal(t, "2.00 s [1.00–3.50]", Spread{2, 1, 3.5}.Format("%.2f", " s"))
	assert.Equal(t, "720 [715–2070]", Spread{720, 715, 2070}.Format("%.0f", ""))
}
