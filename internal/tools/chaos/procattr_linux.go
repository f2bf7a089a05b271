package chaos

import "syscall"

// contenderProcAttr gives a contender its own process group, so that a
// Ctrl-C reaches only the harness, which stops the contenders itself; and
// has the kernel kill it if the harness dies, even while it is stopped by
// SIGSTOP and cannot see its standard input close.
func contenderProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
