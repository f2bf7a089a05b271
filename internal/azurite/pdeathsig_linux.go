package azurite

import "syscall"

// serverProcAttr makes the kernel SIGKILL Azurite when the thread that
// started it exits, so a test binary that crashes or is killed (go test's
// timeout, Ctrl-C, SIGKILL) does not leave Azurite listening. Pdeathsig is
// tied to the creating OS thread, not to the process: launch therefore starts
// Azurite from a goroutine locked to its thread, which stays alive (and
// locked) until Azurite has been reaped. See process.supervise.
//
// Azurite also gets a process group of its own, so that a Ctrl-C in the
// terminal reaches only the Go program, which then stops Azurite (or dies,
// and Pdeathsig stops it). Otherwise Azurite would see the SIGINT too, exit
// by itself, and Stop could not tell that from a crash.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
