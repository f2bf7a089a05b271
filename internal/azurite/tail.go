package azurite

import (
	"io"
	"sync"
)

// tail is an io.Writer that keeps the last max bytes written to it, so that
// start errors can quote what Azurite or npm printed without buffering all of
// it. It also copies everything to an optional writer.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
	out io.Writer
}

func newTail(max int) *tail { return &tail{max: max} }

// Write never fails: os/exec stops copying a child's output at the first
// write error and closes the pipe, and Azurite would then die of EPIPE on
// its next log line. So errors from the copy writer are ignored.
func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	if t.out != nil {
		_, _ = t.out.Write(p)
	}
	return len(p), nil
}

// String returns the retained output.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
