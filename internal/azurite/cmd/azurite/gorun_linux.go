package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// followGoRun makes this process stop with `go run` when go run started it.
// A SIGTERM sent to go run's PID (as a script stops what it started) ends go
// run alone: it passes no signal on, so this process, and the Azurite it
// started, would be left listening. Here the kernel is asked to send this
// process SIGTERM when its parent dies (PR_SET_PDEATHSIG), which stops
// Azurite as any SIGTERM does. Only under go run: a process started by a
// shell gets the shell's SIGTERM itself, and may outlive the shell.
//
// (go run ignores a SIGINT sent to its PID alone, and so does nothing: a
// Ctrl-C reaches the whole process group, this process included.)
func followGoRun() {
	ppid := os.Getppid()
	if !isGoRun(ppid) {
		return
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return
	}
	if os.Getppid() != ppid {
		// go run died before the request was made: no signal will come.
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}

// isGoRun reports whether process pid is `go run`.
func isGoRun(pid int) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	return len(args) > 1 && filepath.Base(string(args[0])) == "go" && string(args[1]) == "run"
}
