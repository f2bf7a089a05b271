// Package childproc is what the fault-injection harnesses (packages chaos
// and shardchaos) share about the processes they run. The harness starts a
// child, the same executable as a rule, with its configuration in an
// environment variable (Start), reads the records it writes to standard
// output as JSON lines, and keeps them with its own in a Log; it kills,
// freezes, stops and at the end reaps its children (Process, Stop). The
// child recognises the variable (Maybe), writes its records (Recorder), and
// stops on SIGTERM, SIGINT or when its standard input closes (Context), so
// that none outlives a harness that was killed.
package childproc

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec says how to start a child process and what to do with what it
// writes. R is the type of its records.
type Spec[R any] struct {
	Command []string // the executable and its arguments
	Env     string   // the environment variable that carries Config
	Config  any      // the child's configuration, passed as JSON
	Log     string   // the file the child's standard error is appended to
	// Started is called with the child's process ID once it runs, before
	// any of its records is read: the moment to record the spawn.
	Started func(pid int)
	// Record is called with each line of the child's standard output that
	// decodes as an R, in order.
	Record func(R)
	// Exited is called once the child has been reaped, after its last
	// record, with its status: "exit 0", or what Wait returned.
	Exited func(status string)
}

// Start starts the child process s describes, in a process group of its own
// so that a Ctrl-C reaches only the harness, which stops its children
// itself; on Linux the kernel kills it if the harness dies, even while it is
// stopped by SIGSTOP and cannot see its standard input close. A goroutine
// reads its records until it exits.
func Start[R any](s Spec[R]) (*Process, error) {
	cfg, err := json.Marshal(s.Config)
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.Command[0], s.Command[1:]...)
	cmd.Env = append(os.Environ(), s.Env+"="+string(cfg))
	cmd.Stderr = logFile
	cmd.SysProcAttr = procAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	// A pipe of our own, not StdinPipe's: its write end takes deadlines.
	stdinR, stdin, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd.Stdin = stdinR
	err = cmd.Start()
	stdinR.Close()
	if err != nil {
		logFile.Close()
		stdin.Close()
		return nil, err
	}
	p := &Process{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	s.Started(cmd.Process.Pid)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), maxLine)
		for sc.Scan() {
			var r R
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				s.Record(r)
			}
		}
		werr := cmd.Wait()
		logFile.Close()
		status := "exit 0"
		if werr != nil {
			status = werr.Error()
		}
		s.Exited(status)
		close(p.done)
	}()
	return p, nil
}

// Process is a child process that Start started.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has been reaped and Exited called

	inMu  sync.Mutex // one Send at a time, and none after Stop closed stdin
	stdin *os.File
}

// Send writes line, and a newline, to the process's standard input, where
// the child reads it (ContextWithInput). A frozen child reads it when it
// thaws: the pipe holds up to 64 KiB. It fails once the process has exited
// or been stopped, or after d if the pipe stays full.
func (p *Process) Send(line string, d time.Duration) error {
	if strings.ContainsRune(line, '\n') || len(line) >= maxLine {
		return errors.New("childproc: a line to send must be shorter than 1 MiB and hold no newline")
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	select {
	case <-p.done:
		return errors.New("childproc: the process has exited")
	default:
	}
	_ = p.stdin.SetWriteDeadline(time.Now().Add(d))
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Freeze stops the process (SIGSTOP); Thaw continues it.
func (p *Process) Freeze() { p.signal(syscall.SIGSTOP) }

// Thaw continues a frozen process (SIGCONT).
func (p *Process) Thaw() { p.signal(syscall.SIGCONT) }

func (p *Process) signal(sig os.Signal) { _ = p.cmd.Process.Signal(sig) }

// Kill SIGKILLs the process and waits until it has been reaped.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Terminate sends the process SIGTERM, waits up to d for it to exit, and
// kills it if it has not. It reports whether it exited within d.
func (p *Process) Terminate(d time.Duration) bool {
	p.signal(syscall.SIGTERM)
	return p.await(d)
}

// await waits up to d for the process to exit, and kills it if it has not.
func (p *Process) await(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		p.Kill()
		return false
	}
}

// Stop stops the processes ps (nil ones are skipped) by their PIDs: it
// thaws each and sends it SIGTERM, all at once; then waits up to d for each
// in turn to exit, kills it if it has not, and closes its standard input.
// It returns the indexes in ps of those it had to kill.
func Stop(ps []*Process, d time.Duration) (killed []int) {
	for _, p := range ps {
		if p != nil {
			p.Thaw()
			p.signal(syscall.SIGTERM)
		}
	}
	for i, p := range ps {
		if p == nil {
			continue
		}
		if !p.await(d) {
			killed = append(killed, i)
		}
		p.inMu.Lock()
		_ = p.stdin.Close()
		p.inMu.Unlock()
	}
	return killed
}
