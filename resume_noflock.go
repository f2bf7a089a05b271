//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package leaderelection

import (
	"errors"
	"os"
)

// flockSupported is false: WithLeaseIDFile is refused at construction here.
const flockSupported = false

func lockFile(path string) (*os.File, error) {
	return nil, errors.New("leaderelection: WithLeaseIDFile needs flock(2), which this platform does not have")
}
