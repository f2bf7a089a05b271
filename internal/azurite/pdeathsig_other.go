//go:build !linux

package azurite

import "syscall"

// serverProcAttr returns nil: only Linux has a parent-death signal. Elsewhere
// a test binary that dies without calling Stop leaves Azurite running.
func serverProcAttr() *syscall.SysProcAttr { return nil }
