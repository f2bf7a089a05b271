//go:build linux

package scale

import (
	"fmt"
	"syscall"
	"time"
)

// readUsage reads this process's CPU time and peak RSS with getrusage
// (RUSAGE_SELF: children, such as an Azurite it started, are not counted).
func readUsage() (usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}, fmt.Errorf("scale: getrusage: %w", err)
	}
	return usage{
		cpu:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		maxRSS: ru.Maxrss * 1024, // KiB on Linux
	}, nil
}
