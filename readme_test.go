package leaderelection

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeQuickStart returns the Go block that follows the README's heading.
func readmeQuickStart(t *testing.T, heading string) string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), heading+"\n\n```go\n")
	require.True(t, ok, "README has %q with a go block under it", heading)
	block, _, ok := strings.Cut(section, "```\n")
	require.True(t, ok)
	return block
}

// exampleAsProgram returns the example file as the program a user would
// copy: package main, the example func as main, tabs as four spaces.
func exampleAsProgram(t *testing.T, file, example string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	want := strings.Replace(string(src), "package leaderelection_test", "package main", 1)
	require.Contains(t, want, "func "+example+"() {")
	want = strings.Replace(want, "func "+example+"() {", "func main() {", 1)
	return strings.ReplaceAll(want, "\t", "    ")
}

// The README's quick starts are examples that go test compiles, written as
// programs: the same code, so that what users copy builds.
func TestREADMEQuickStartIsTheCompiledExample(t *testing.T) {
	assert.Equal(t, exampleAsProgram(t, "example_quickstart_test.go", "Example"),
		readmeQuickStart(t, "## Quick start: one leader"))
}

func TestREADMEShardOwnerQuickStartIsTheCompiledExample(t *testing.T) {
	assert.Equal(t, exampleAsProgram(t, "example_shardowner_test.go", "ExampleShardOwner"),
		readmeQuickStart(t, "## Quick start: shards"))
}

// figureRange is the range [min–max] that may follow a figure: 0.40 s
// [0.40–8.32], 2,763 [2,760–2,766], 1.10× [1.08–1.24].
var figureRange = regexp.MustCompile(`^\s?\[([\d.,]+\s?(?:ms|s|×|%)?–[\d.,]+\s?(?:ms|s|×|%)?)\]`)

// rangesAfter returns, for each figure of text that a range follows, the
// ranges that follow it (normalised: no spaces). figures finds the figures.
func rangesAfter(text string, figures *regexp.Regexp) map[string][]string {
	out := map[string][]string{}
	for _, m := range figures.FindAllStringSubmatchIndex(text, -1) {
		f := normFigure(text[m[2]:m[3]], groupText(text, m, 2)+groupText(text, m, 3))
		r := figureRange.FindStringSubmatch(text[m[1]:])
		if r != nil {
			out[f] = append(out[f], strings.ReplaceAll(r[1], " ", ""))
		} else if _, ok := out[f]; !ok {
			out[f] = nil
		}
	}
	return out
}

// groupText is the text of submatch i (from 1) of m, or "".
func groupText(text string, m []int, i int) string {
	if m[2*i] < 0 {
		return ""
	}
	return text[m[2*i]:m[2*i+1]]
}

// Every figure the README quotes carries its range where BENCHMARKS.md
// gives one: the median 0.40 s of three runs is not the same news as
// 0.40 s [0.40–8.32]. The range quoted is one BENCHMARKS.md gives for the
// figure.
func TestREADMEFiguresCarryTheirRanges(t *testing.T) {
	bench := rangesAfter(readDoc(t, "BENCHMARKS.md"), anyFigure)
	checked := 0
	for _, block := range readmeBlocks(readDoc(t, "README.md")) {
		text := mdLink.ReplaceAllString(codeSpan.ReplaceAllString(block, " "), "$1")
		for f, quoted := range rangesAfter(text, figure) {
			published := slices.Compact(slices.Sorted(slices.Values(bench[f])))
			if len(published) == 0 {
				continue
			}
			checked++
			if len(quoted) == 0 {
				t.Errorf("README.md quotes %q without the range BENCHMARKS.md gives it (%s), in:\n%s", f, strings.Join(published, " or "), block)
			}
			for _, r := range quoted {
				if !slices.Contains(published, r) {
					t.Errorf("README.md gives %q the range [%s], which BENCHMARKS.md does not (%s)", f, r, strings.Join(published, " or "))
				}
			}
		}
	}
	assert.Positive(t, checked, "README figures that BENCHMARKS.md gives a range")
}
