package benchdoc

import (
	"os"
	"path/filepath"
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
	assert.Equal(t, "\n\n## B\n\nfirst\n", read(), "a missing file is created")

	require.NoError(t, os.WriteFile(path, []byte("# Benchmarks\n\n## A\n\na\n\n## B\n\nold\nlines\n\n## C\n\nc\n"), 0o644))
	require.NoError(t, WriteSection(path, "## B", "## B\n\nnew\n"))
	assert.Equal(t, "# Benchmarks\n\n## A\n\na\n\n## B\n\nnew\n\n## C\n\nc\n", read())

	require.NoError(t, WriteSection(path, "## C", "## C\n\nlast\n"))
	assert.Equal(t, "# Benchmarks\n\n## A\n\na\n\n## B\n\nnew\n\n## C\n\nlast\n", read(), "the last section runs to the end")

	require.NoError(t, WriteSection(path, "## D", "## D\n\nd\n"))
	assert.Equal(t, "# Benchmarks\n\n## A\n\na\n\n## B\n\nnew\n\n## C\n\nlast\n\n## D\n\nd\n", read(), "a new section is appended")
}
