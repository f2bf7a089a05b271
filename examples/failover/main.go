// Command failover shows leader election and failover end to end. It starts
// a local Azurite (or uses the one LEADERELECTION_AZURITE_URL names), runs
// three contenders as separate processes on one lease blob, kills the leader
// with SIGKILL, and shows the takeover and its timing; then it stops the new
// leader gracefully (SIGTERM) and shows the fast handover a released lease
// allows.
//
//	go run ./examples/failover
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azurite"
)

// The demo starts its contenders by running its own executable again with
// these variables set.
const (
	envContender  = "FAILOVER_DEMO_CONTENDER"
	envBlob       = "FAILOVER_DEMO_BLOB"
	envConnection = "FAILOVER_DEMO_CONNECTION_STRING"
)

func main() {
	flag.Parse()
	var err error
	if name := os.Getenv(envContender); name != "" {
		err = runContender(name, os.Getenv(envBlob))
	} else {
		_, err = runDemo(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

// Summary is what the demo measured.
type Summary struct {
	Leader           string        // the first leader, killed
	CrashFailover    time.Duration // SIGKILL of the leader -> the next leader's func starts
	GracefulHandover time.Duration // SIGTERM of the next leader -> the third's func starts
}

// runContender is one service instance: its leader func announces on stdout
// when it starts and stops leading, for the demo to time.
func runContender(name, blob string) error {
	s := leaderelection.BlobSettings{
		ConnectionString: os.Getenv(envConnection),
		Container:        "failover-demo",
		Blob:             blob,
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mutex, err := leaderelection.NewBlobDistributedMutex(s, func(ctx context.Context) error {
		fmt.Println("leading")
		<-ctx.Done()
		fmt.Println("stopped", context.Cause(ctx))
		return nil
	}, leaderelection.WithLogger(logger))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := mutex.RunTaskWhenMutexAcquired(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

type event struct {
	who  string
	what string // "leading", "stopped ...", "exited"
	at   time.Time
}

type proc struct {
	name string
	cmd  *exec.Cmd
}

func runDemo(w io.Writer) (Summary, error) {
	var sum Summary
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(w, "%6.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	say("starting Azurite (installs azurite@%s with npm on first use)...", azurite.Version)
	conn, stopAzurite, err := azurite.Endpoint(ctx)
	if err != nil {
		return sum, fmt.Errorf("azurite: %w", err)
	}
	defer func() {
		if err := stopAzurite(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping azurite:", err)
		}
	}()
	say("Azurite is up")

	exe, err := os.Executable()
	if err != nil {
		return sum, err
	}
	blob := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	events := make(chan event, 100)
	var wg sync.WaitGroup
	procs := map[string]*proc{}
	for _, name := range []string{"a", "b", "c"} {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), envContender+"="+name, envBlob+"="+blob, envConnection+"="+conn)
		cmd.Stderr = prefixWriter{prefix: "        [" + name + "] ", w: os.Stderr}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return sum, err
		}
		if err := cmd.Start(); err != nil {
			return sum, err
		}
		procs[name] = &proc{name: name, cmd: cmd}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				events <- event{who: name, what: sc.Text(), at: time.Now()}
			}
			_ = cmd.Wait()
			events <- event{who: name, what: "exited", at: time.Now()}
		}()
	}
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
		}
		go func() { wg.Wait(); close(events) }()
		for range events {
		}
	}()
	say("started contenders a, b, c (separate processes, lease 15 s, retry every 2 s)")

	waitFor := func(what string, timeout time.Duration) (event, error) {
		deadline := time.After(timeout)
		for {
			select {
			case e := <-events:
				switch {
				case strings.HasPrefix(e.what, "leading"):
					say("%s is the leader", e.who)
				case strings.HasPrefix(e.what, "stopped"):
					say("%s stopped leading (%s)", e.who, strings.TrimPrefix(e.what, "stopped "))
				}
				if strings.HasPrefix(e.what, what) {
					return e, nil
				}
			case <-deadline:
				return event{}, fmt.Errorf("nothing %q within %v", what, timeout)
			}
		}
	}

	first, err := waitFor("leading", 30*time.Second)
	if err != nil {
		return sum, err
	}
	time.Sleep(3 * time.Second)

	killed := time.Now()
	say("SIGKILL %s: it cannot release its lease; the others must wait for it to expire", first.who)
	if err := procs[first.who].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return sum, err
	}
	second, err := waitFor("leading", 40*time.Second)
	if err != nil {
		return sum, err
	}
	crash := second.at.Sub(killed)
	say("crash failover: %s took over %.2fs after the kill (the lease ran out <= 15 s after %s's last renewal, then a follower took it within one 2 s retry)", second.who, crash.Seconds(), first.who)
	time.Sleep(3 * time.Second)

	stopped := time.Now()
	say("SIGTERM %s: it cancels its leader func and releases the lease", second.who)
	if err := procs[second.who].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return sum, err
	}
	third, err := waitFor("leading", 30*time.Second)
	if err != nil {
		return sum, err
	}
	graceful := third.at.Sub(stopped)
	say("graceful handover: %s took over %.2fs after the SIGTERM (about one retry interval)", third.who, graceful.Seconds())

	fmt.Fprintf(w, "\nsummary: crash failover %.2fs, graceful handover %.2fs\n", crash.Seconds(), graceful.Seconds())
	return Summary{Leader: first.who, CrashFailover: crash, GracefulHandover: graceful}, nil
}

// prefixWriter labels a contender's log lines.
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Fprint(p.w, p.prefix+line)
		}
	}
	return len(b), nil
}
