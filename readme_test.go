package leaderelection

import (
	"os"
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
