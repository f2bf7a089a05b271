//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package leaderelection

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const flockSupported = true

// lockFile opens path (creating it, mode 0600: the lease ID lets its holder
// release the lease) and takes an exclusive flock on it without waiting.
// The lock belongs to this open file description: the kernel drops it when
// the file is closed or the process dies, and Go opens files close-on-exec,
// so no child process inherits it.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("leaderelection: opening lease ID file (WithLeaseIDFile): %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s is held by another process, which is still running; each instance needs a lease ID file of its own",
			ErrLeaseIDFileLocked, path)
	default:
		_ = f.Close()
		return nil, fmt.Errorf("leaderelection: locking lease ID file %s (WithLeaseIDFile): %w", path, err)
	}
}
