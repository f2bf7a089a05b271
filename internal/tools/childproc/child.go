package childproc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Maybe turns this process into a child, and exits, if a harness started it
// as one: if the environment variable env is set, it decodes its value
// (JSON) into a C and calls run with it. It exits 0 if run returns nil, 1 if
// run returns an error and 2 if the value does not decode, saying why on
// standard error after name. If env is not set, it returns at once.
func Maybe[C any](env, name string, run func(C) error) {
	raw := os.Getenv(env)
	if raw == "" {
		return
	}
	var cfg C
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, name+": bad configuration:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Context returns the context a child runs in: cancelled on SIGTERM or
// SIGINT, or when its standard input closes. The harness holds that open,
// so a child stops when the harness dies.
func Context() (context.Context, context.CancelFunc) { return ContextWithInput(nil) }

// ContextWithInput is Context, and calls input, if not nil, with each line
// the harness sends the child on its standard input (Process.Send), in
// order, from one goroutine, without its newline.
func ContextWithInput(input func(line string)) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		defer stop()
		if input == nil {
			_, _ = io.Copy(io.Discard, os.Stdin)
			return
		}
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 64*1024), maxLine)
		for sc.Scan() {
			input(sc.Text())
		}
		_, _ = io.Copy(io.Discard, os.Stdin) // a line too long: stop only at the end
	}()
	return ctx, stop
}

// maxLine bounds a line to or from a child.
const maxLine = 1 << 20

// Recorder writes a child's records to standard output, one JSON object a
// line, for the harness to read. It is safe for concurrent use.
type Recorder[R any] struct {
	stamp func(*R)
	mu    sync.Mutex
	enc   *json.Encoder
}

// NewRecorder returns a Recorder that calls stamp on each record before it
// writes it: to set who wrote it, and when.
func NewRecorder[R any](stamp func(*R)) *Recorder[R] {
	return &Recorder[R]{stamp: stamp, enc: json.NewEncoder(os.Stdout)}
}

// Write stamps rec and writes it.
func (r *Recorder[R]) Write(rec R) {
	r.stamp(&rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(rec)
}

// Every calls f every d, from a goroutine of its own, until ctx is done or
// stop is called; stop waits for that goroutine to return. A d of 0 or less
// never calls f.
func Every(ctx context.Context, d time.Duration, f func()) (stop func()) {
	if d <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				f()
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
