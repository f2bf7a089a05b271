//go:build !linux

package scale

import (
	"fmt"
	"runtime"
)

// readUsage is implemented for Linux only, where getrusage's units are
// known (ru_maxrss is in KiB there, in bytes on macOS).
func readUsage() (usage, error) {
	return usage{}, fmt.Errorf("scale: measuring CPU and RSS is implemented for linux only, not %s", runtime.GOOS)
}
