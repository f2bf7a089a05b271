package main

import "syscall"

// procAttr has the kernel kill a owner process if this command dies first.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
