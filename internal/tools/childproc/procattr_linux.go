package childproc

import "syscall"

// procAttr gives a child its own process group, so that a Ctrl-C reaches
// only the harness, which stops its children itself; and has the kernel
// kill it if the harness dies, even while it is stopped by SIGSTOP and
// cannot see its standard input close.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
