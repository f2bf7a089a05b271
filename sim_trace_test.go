package leaderelection

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/blobelect/leaderelection/internal/memblob"
)

// What the simulator keeps of a fleet (see sim_test.go): the library's
// logs and every step, written to a trace file when a rule is broken.

// simLogs keeps an instance's logs, at every level, in the fleet's trace:
// a fleet-hour logs a thousand lines or so, kept as records and formatted
// only if a trace file is written.
type simLogs struct {
	tr    *simTracer
	name  string
	attrs []slog.Attr
}

func (h simLogs) Enabled(context.Context, slog.Level) bool { return true }

func (h simLogs) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	if len(h.attrs) > 0 {
		r.AddAttrs(h.attrs...)
	}
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	h.tr.entries = append(h.tr.entries, simEntry{at: r.Time, log: &r, text: h.name})
	return nil
}

func (h simLogs) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clip(h.attrs), as...)
	return h
}

func (h simLogs) WithGroup(string) slog.Handler { return h }

// simTracer keeps a fleet's steps, for a trace file written when the
// fleet breaks a rule, or for a replay (-sim.trace): the plan's actions,
// the instances' starts and events, the funcs, and every request the fake
// applied or refused but listings and successful reads. It keeps the
// fake's events as they came (formatting them only for the file), so
// that every fleet of a run can keep one: a failure found in a run of
// many fleets is rarely met again in a replay.
type simTracer struct {
	mu      sync.Mutex
	entries []simEntry
}

type simEntry struct {
	at   time.Time
	text string
	ev   memblob.Event // when text is ""
	log  *slog.Record  // a log of instance text's, when not nil
}

// printf keeps a line stamped with at (the bubble's clock, which starts
// at midnight).
func (tr *simTracer) printf(at time.Time, format string, args ...any) {
	if tr == nil {
		return
	}
	text := fmt.Sprintf(format, args...)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.entries = append(tr.entries, simEntry{at: at, text: text})
}

// fake keeps an event of the fake's.
func (tr *simTracer) fake(e memblob.Event) {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.entries = append(tr.entries, simEntry{at: e.Time, ev: e})
}

// write writes the steps kept to the file at path.
func (tr *simTracer) write(path string) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(file)
	for _, en := range tr.entries {
		text := en.text
		if en.log != nil {
			var b strings.Builder
			fmt.Fprintf(&b, "%s log %s %s", text, en.log.Level, en.log.Message)
			en.log.Attrs(func(a slog.Attr) bool {
				fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
				return true
			})
			text = b.String()
		} else if text == "" {
			e := en.ev
			term, who, ended := simRecord(e.Metadata)
			text = fmt.Sprintf("fake %s %s/%s: %d %s lease %s %s etag %s", e.Op, e.Container, e.Blob, e.Status, e.ErrorCode,
				e.LeaseState, e.Lease, e.ETag)
			if e.LeaseID != "" || e.ProposedLeaseID != "" {
				text += fmt.Sprintf(" (asked with %s proposing %s)", e.LeaseID, e.ProposedLeaseID)
			}
			if term != "" {
				text += fmt.Sprintf(" record term %s for %q ended %v", term, who, ended)
			}
		}
		fmt.Fprintf(w, "%s %s\n", en.at.Format("15:04:05.000"), text)
	}
	if err := w.Flush(); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}
