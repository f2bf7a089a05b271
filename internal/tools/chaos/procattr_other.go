//go:build !linux

package chaos

import "syscall"

// contenderProcAttr gives a contender its own process group, so that a
// Ctrl-C reaches only the harness, which stops the contenders itself.
func contenderProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
