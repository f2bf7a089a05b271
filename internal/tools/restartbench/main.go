// Command restartbench measures how soon a leader that uses
// WithLeaseIDFile leads again after it is SIGKILLed and started again with
// the same file, as systemd or a container runtime would restart it. It
// starts a local Azurite (or uses the one LEADERELECTION_AZURITE_URL names),
// runs the leader as a child process (this executable again), and restarts it
// -restarts times while a follower in this process contends for the same
// blob. After each restart it also starts a second process on the same file,
// which must be refused. It prints a Markdown section and, with -out,
// replaces that section in the file (BENCHMARKS.md) or appends it.
//
//	go run ./internal/tools/restartbench -out BENCHMARKS.md
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/benchdoc"
	"github.com/blobelect/leaderelection/internal/tools/buildinfo"
)

// processStart is as close to the process's start as Go code can note it.
var processStart = time.Now()

// The leader process is this executable again, with these variables set.
const (
	envFile       = "RESTARTBENCH_LEASE_ID_FILE"
	envConnection = "RESTARTBENCH_CONNECTION_STRING"
	envContainer  = "RESTARTBENCH_CONTAINER"
	envBlob       = "RESTARTBENCH_BLOB"
)

// heading starts the section this command writes.
const heading = "## Restart with a lease ID file"

func main() {
	restarts := flag.Int("restarts", 100, "how many times to SIGKILL and restart the leader")
	out := flag.String("out", "", "Markdown file whose section to replace (or append to); empty: print only")
	flag.Parse()
	var err error
	if file := os.Getenv(envFile); file != "" {
		err = runLeader(file)
	} else {
		err = run(*restarts, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "restartbench:", err)
		os.Exit(1)
	}
}

// runLeader is the leader process: it prints "LEADING <term> <lease ID>
// <µs since start>" when its func starts and leads until killed, or prints
// "RETURNED <µs> <refused>" if RunTaskWhenMutexAcquired returns.
func runLeader(file string) error {
	s := leaderelection.BlobSettings{
		ConnectionString: os.Getenv(envConnection),
		Container:        os.Getenv(envContainer),
		Blob:             os.Getenv(envBlob),
	}
	m, err := leaderelection.NewBlobDistributedMutex(s, func(ctx context.Context) error {
		term, _ := leaderelection.TermFromContext(ctx)
		fmt.Printf("LEADING %d %s %d\n", term.Number, term.LeaseID, time.Since(processStart).Microseconds())
		<-ctx.Done()
		return nil
	}, leaderelection.WithLeaseIDFile(file),
		leaderelection.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	start := time.Now()
	err = m.RunTaskWhenMutexAcquired(context.Background())
	fmt.Printf("RETURNED %d %t\n", time.Since(start).Microseconds(), errors.Is(err, leaderelection.ErrLeaseIDFileLocked))
	if errors.Is(err, leaderelection.ErrLeaseIDFileLocked) {
		return nil
	}
	return err
}

// child is a leader process.
type child struct {
	cmd   *exec.Cmd
	lines chan []string // each line's fields
}

func spawn(exe, conn, container, blob, file string) (*child, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envFile+"="+file, envConnection+"="+conn, envContainer+"="+container, envBlob+"="+blob)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = procAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, lines: make(chan []string, 10)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- strings.Fields(sc.Text())
		}
	}()
	return c, nil
}

// expect waits for a line starting with word and returns its other fields.
func (c *child) expect(word string, within time.Duration) ([]string, error) {
	timeout := time.After(within)
	for {
		select {
		case f, ok := <-c.lines:
			if !ok {
				return nil, fmt.Errorf("leader process %d exited without printing %s", c.cmd.Process.Pid, word)
			}
			if len(f) > 0 && f[0] == word {
				if len(f) < 3 {
					return nil, fmt.Errorf("leader process %d printed %q", c.cmd.Process.Pid, strings.Join(f, " "))
				}
				return f[1:], nil
			}
		case <-timeout:
			return nil, fmt.Errorf("leader process %d printed no %s within %v", c.cmd.Process.Pid, word, within)
		}
	}
}

// kill SIGKILLs the process and reaps it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	for range c.lines {
	}
	_ = c.cmd.Wait()
}

type trial struct {
	total, inProcess time.Duration // new process started -> its func starts; its own start -> func starts
	resumed          bool          // same lease ID, term + 1
	refused          bool          // the second process on the file was refused
	refusedIn        time.Duration // its RunTaskWhenMutexAcquired call -> return
}

func run(restarts int, out string) error {
	if restarts < 1 {
		return fmt.Errorf("-restarts must be at least 1, got %d", restarts)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	began := time.Now()
	conn, stop, err := azurite.Endpoint(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = stop() }()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "restartbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "lease-id")
	container, blob := "restartbench", fmt.Sprintf("leader-%d", time.Now().UnixNano())

	leader, err := spawn(exe, conn, container, blob, file)
	if err != nil {
		return err
	}
	defer func() { leader.kill() }()
	f, err := leader.expect("LEADING", time.Minute)
	if err != nil {
		return err
	}
	term, id := f[0], f[1]

	// A follower contends from now on, polling often: it must never lead.
	var followerLed atomic.Int64
	follower, err := leaderelection.NewBlobDistributedMutex(leaderelection.BlobSettings{
		ConnectionString: conn, Container: container, Blob: blob, RetryInterval: 250 * time.Millisecond,
	}, func(ctx context.Context) error { followerLed.Add(1); <-ctx.Done(); return nil },
		leaderelection.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	fctx, stopFollower := context.WithCancel(ctx)
	followerDone := make(chan error, 1)
	go func() { followerDone <- follower.RunTaskWhenMutexAcquired(fctx) }()
	defer func() { stopFollower(); <-followerDone }()

	var trials []trial
	for i := 0; i < restarts && ctx.Err() == nil; i++ {
		leader.kill()
		started := time.Now()
		leader, err = spawn(exe, conn, container, blob, file)
		if err != nil {
			return err
		}
		f, err := leader.expect("LEADING", time.Minute)
		if err != nil {
			return err
		}
		tr := trial{total: time.Since(started)}
		us, _ := strconv.ParseInt(f[2], 10, 64)
		tr.inProcess = time.Duration(us) * time.Microsecond
		prev, _ := strconv.ParseInt(term, 10, 64)
		next, _ := strconv.ParseInt(f[0], 10, 64)
		tr.resumed = f[1] == id && next == prev+1
		term = f[0]

		dup, err := spawn(exe, conn, container, blob, file)
		if err != nil {
			return err
		}
		r, err := dup.expect("RETURNED", time.Minute)
		dup.kill()
		if err != nil {
			return err
		}
		us, _ = strconv.ParseInt(r[0], 10, 64)
		tr.refused, tr.refusedIn = r[1] == "true", time.Duration(us)*time.Microsecond
		trials = append(trials, tr)
		fmt.Fprintf(os.Stderr, "restart %d: leading %v after start (%v in process), resumed %t; second process refused %t in %v\n",
			i+1, tr.total.Round(time.Millisecond), tr.inProcess.Round(time.Millisecond), tr.resumed, tr.refused, tr.refusedIn)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	pub := publication(trials, followerLed.Load(), time.Since(began))
	fmt.Print(pub.Sections[0])
	if out != "" {
		return benchdoc.Publish(out, pub)
	}
	return nil
}

// publication is the command's section of BENCHMARKS.md and its row of the
// summary, which replaces its row in place.
func publication(trials []trial, followerLed int64, took time.Duration) benchdoc.Publication {
	total := make([]time.Duration, len(trials))
	for i, t := range trials {
		total[i] = t.total
	}
	row := fmt.Sprintf("| a leader restarted in place with `WithLeaseIDFile`, to leading again | p50 %s, p99 %s | %d restarts | | %s | "+
		"`go run ./internal/tools/restartbench -restarts %d -out BENCHMARKS.md`, [Restart with a lease ID file](#restart-with-a-lease-id-file) |",
		ms(pct(total, 50)), ms(pct(total, 99)), len(trials), buildinfo.Revision(), len(trials))
	return benchdoc.Publication{Sections: []string{report(trials, followerLed, took)}, Rows: []string{row}}
}

func report(trials []trial, followerLed int64, took time.Duration) string {
	var total, inProc, refusedIn []time.Duration
	resumed, refused := 0, 0
	for _, t := range trials {
		total, inProc, refusedIn = append(total, t.total), append(inProc, t.inProcess), append(refusedIn, t.refusedIn)
		if t.resumed {
			resumed++
		}
		if t.refused {
			refused++
		}
	}
	n := len(trials)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", heading)
	fmt.Fprintf(&b, "Produced by `go run ./internal/tools/restartbench -restarts %d -out BENCHMARKS.md` in %v, on %s; commit %s; %s, %d cores, %s.\n\n",
		n, took.Round(time.Second), time.Now().Format("2006-01-02"), buildinfo.Revision(), runtime.Version(), runtime.NumCPU(), runtime.GOARCH)
	fmt.Fprintf(&b, "A leader process using `WithLeaseIDFile` (default timings: lease 15 s) is SIGKILLed and started again with the same file, %d times, "+
		"against a local Azurite, while a follower in the measuring process polls the same blob every 250 ms. "+
		"Restart to leading is from starting the new process to its leader func starting (the old one is dead and reaped first): "+
		"process start, opening and locking the file, the acquire with the lease ID the file gives, and the term write.\n\n", n)
	b.WriteString("| measure | p50 | p99 | max |\n|---|---|---|---|\n")
	row := func(name string, d []time.Duration) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, ms(pct(d, 50)), ms(pct(d, 99)), ms(pct(d, 100)))
	}
	row("restart to leading", total)
	row("of which inside the new process (start of main to leading)", inProc)
	row("a second process on the same file: RunTaskWhenMutexAcquired refused in", refusedIn)
	fmt.Fprintf(&b, "\nResumed with the same lease ID and the next term number: %d of %d restarts. "+
		"Second processes refused with `ErrLeaseIDFileLocked`: %d of %d. The follower led %d times. "+
		"Against Azure, add three round trips to storage (acquire, read and write of the term) to restart to leading. "+
		"Without the file, a crashed leader's successor waits for its lease to expire (crash failover of the native lease, in the Failover section above). "+
		"Percentiles are nearest-rank%s.\n", resumed, n, refused, n, followerLed, maxNote(n))
	return b.String()
}

func maxNote(n int) string {
	if n < 100 {
		return ": with fewer than 100 restarts, p99 is the maximum"
	}
	return ""
}

// pct is the nearest-rank percentile p of d.
func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
