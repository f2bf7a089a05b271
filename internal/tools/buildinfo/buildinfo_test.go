package buildinfo

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A test binary, like a program under `go run` in the workspace, carries no
// VCS stamp: the revision is the work tree's, as git tells it, and says
// whether the tree had uncommitted changes.
func TestRevisionWithoutAStampIsTheWorkTrees(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "--short=7", "HEAD").Output()
	require.NoError(t, err)
	status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	require.NoError(t, err)
	want := strings.TrimSpace(string(head))
	if len(strings.TrimSpace(string(status))) > 0 {
		want += " (with uncommitted changes)"
	}
	assert.Equal(t, want, Revision())
}
