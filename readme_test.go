package leaderelection

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's Quick start is Example, which go test compiles, written as a
// program: the same code, so that what users copy builds.
func TestREADMEQuickStartIsTheCompiledExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "## Quick start\n\n```go\n")
	require.True(t, ok, "README has a Quick start with a go block")
	block, _, ok := strings.Cut(section, "```\n")
	require.True(t, ok)

	example, err := os.ReadFile("example_quickstart_test.go")
	require.NoError(t, err)
	want := strings.Replace(string(example), "package leaderelection_test", "package main", 1)
	want = strings.Replace(want, "func Example() {", "func main() {", 1)
	want = strings.ReplaceAll(want, "\t", "    ")
	assert.Equal(t, want, block)
}
