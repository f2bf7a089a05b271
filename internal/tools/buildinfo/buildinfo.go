// Package buildinfo says which commit a benchmark ran, for the provenance
// line of what it publishes.
package buildinfo

import (
	"os/exec"
	"runtime/debug"
	"strings"
)

// Revision is the commit the binary was built from, as go build stamps it,
// or else (GOFLAGS=-buildvcs=false, a build in a go.work) the work tree's as
// git told it when the program started, before a long benchmark gave time to
// edit the tree; "unknown" if neither can say. A tree with uncommitted
// changes says so.
func Revision() string { return atStart }

var atStart = revision()

func revision() string {
	rev, modified := "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, st := range bi.Settings {
			switch {
			case st.Key == "vcs.revision" && len(st.Value) >= 7:
				rev = st.Value[:7]
			case st.Key == "vcs.modified":
				modified = st.Value == "true"
			}
		}
	}
	if rev == "" {
		out, err := exec.Command("git", "rev-parse", "--short=7", "HEAD").Output()
		if err != nil {
			return "unknown"
		}
		rev = strings.TrimSpace(string(out))
		status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
		modified = err != nil || len(strings.TrimSpace(string(status))) > 0
	}
	if modified {
		return rev + " (with uncommitted changes)"
	}
	return rev
}
