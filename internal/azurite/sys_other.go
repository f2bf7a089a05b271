//go:build !unix

package azurite

import (
	"context"
	"os"
	"syscall"
)

// lockFile is a no-op where flock(2) does not exist: concurrent first
// installs may then run npm twice into the same prefix, which npm tolerates
// badly but rarely. The supported platforms for the test suite are Unix.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	return func() {}, nil
}

// groupProcAttr returns nil: there are no process groups to set up here.
func groupProcAttr() *syscall.SysProcAttr { return nil }

// killGroup kills just p, the best that is portable.
func killGroup(p *os.Process) error { return p.Kill() }

// terminate kills p: SIGTERM cannot be sent on this platform.
func terminate(p *os.Process) error { return p.Kill() }
