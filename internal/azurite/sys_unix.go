//go:build unix

package azurite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockFile takes an exclusive flock on path, creating it if needed, and
// returns the function that releases it. It polls with LOCK_NB instead of
// blocking in flock(2) so that ctx can end the wait; the kernel drops the
// lock by itself if this process dies, so a crashed installer never leaves
// the prefix locked.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another process that is installing Azurite (lock %s): %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// groupProcAttr puts npm in a new process group of its own, so killGroup can
// reach the scripts npm starts.
func groupProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills the process group that groupProcAttr created for p.
func killGroup(p *os.Process) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return p.Kill()
	}
	return nil
}

// terminate asks p to shut down cleanly. Azurite handles SIGTERM by closing
// its listener and saving its database, then exits with status 0.
func terminate(p *os.Process) error {
	return p.Signal(syscall.SIGTERM)
}
