//go:build !linux

package childproc

import "syscall"

// procAttr gives a child its own process group, so that a Ctrl-C reaches
// only the harness, which stops its children itself.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
