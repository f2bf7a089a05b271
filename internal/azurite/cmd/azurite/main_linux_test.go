package main

import (
	"bufio"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `go run ./internal/azurite/cmd/azurite run` stopped as a script stops it
// (SIGTERM to go run's PID) or as a terminal does (SIGINT to the process
// group, Ctrl-C) leaves nothing behind: not this program, not Azurite's
// node process, nothing listening. go run passes no SIGTERM on: the program
// follows its death (followGoRun).
func TestStoppedGoRunLeavesNothingListening(t *testing.T) {
	for _, tc := range []struct {
		name  string
		group bool // signal the process group, not go run alone
		sig   syscall.Signal
	}{
		{"SIGTERM to go run", false, syscall.SIGTERM},
		{"SIGINT to the group (Ctrl-C)", true, syscall.SIGINT},
		{"SIGTERM to the group", true, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			goTool, err := exec.LookPath("go")
			if err != nil {
				t.Fatalf("the go command: %v", err)
			}
			cmd := exec.CommandContext(ctx, goTool, "run", ".", "run", "-port", "0")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pgid := cmd.Process.Pid
			t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }) // the program, should the test fail; node follows it
			defer func() { _ = cmd.Wait() }()

			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatalf("no connection string on stdout: %v", err)
			}
			addr := blobHost(t, line)
			program := childrenOf(t, cmd.Process.Pid)
			if len(program) != 1 {
				t.Fatalf("go run's children: %v, want the program", program)
			}
			node := childrenOf(t, program[0])
			if len(node) != 1 {
				t.Fatalf("the program's children: %v, want Azurite's node", node)
			}

			target := cmd.Process.Pid
			if tc.group {
				target = -pgid
			}
			if err := syscall.Kill(target, tc.sig); err != nil {
				t.Fatal(err)
			}
			for _, pid := range []int{program[0], node[0]} {
				waitGone(t, pid)
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Fatalf("%s still accepts connections", addr)
			}
		})
	}
}

// blobHost is the host:port of the connection string's BlobEndpoint.
func blobHost(t *testing.T, cs string) string {
	t.Helper()
	for kv := range strings.SplitSeq(strings.TrimSpace(cs), ";") {
		if v, ok := strings.CutPrefix(kv, "BlobEndpoint="); ok {
			u, err := url.Parse(v)
			if err != nil {
				t.Fatal(err)
			}
			return u.Host
		}
	}
	t.Fatalf("no BlobEndpoint in %q", cs)
	return ""
}

// childrenOf lists the live processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, state, ok := procStat(child); ok && ppid == pid && state != "Z" {
			out = append(out, child)
		}
	}
	return out
}

// procStat reads a process's parent and state from /proc.
func procStat(pid int) (ppid int, state string, ok bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	_, rest, found := strings.Cut(string(stat), ") ") // after the command, which may hold spaces
	f := strings.Fields(rest)
	if !found || len(f) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0], err == nil
}

// waitGone fails unless process pid has exited (or is a zombie) within 20 s:
// the program gives Azurite 5 s to stop before SIGKILL.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, state, ok := procStat(pid); !ok || state == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still running", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
