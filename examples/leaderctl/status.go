package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection"
)

// statusCmd holds the flags of status.
type statusCmd struct {
	target
	json  bool
	watch time.Duration
}

func (cmd *statusCmd) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	cmd.register(fs)
	fs.BoolVar(&cmd.json, "json", false, "")
	fs.Var((*duration)(&cmd.watch), "watch", "")
	return fs
}

// watchEvery is how often status -watch reads the lease.
const watchEvery = 500 * time.Millisecond

// etagWatch is how the blob's ETag behaved over the answers status read:
// how long the current one has stood, as seen from here, and how often it
// changed (every renewal of an ETag lease changes it).
type etagWatch struct {
	etag    azcore.ETag
	since   time.Time // when the first answer that showed etag arrived
	first   time.Time // when the first answer arrived
	last    time.Time // when the last answer arrived
	changes int
}

func (w *etagWatch) see(info leaderelection.LeaseInfo) {
	if w.first.IsZero() {
		w.first = info.Received
	}
	w.last = info.Received
	if info.ETag != w.etag || w.since.IsZero() {
		if w.etag != "" {
			w.changes++
		}
		w.etag, w.since = info.ETag, info.Received
	}
}

// stood is how long the current ETag has stood, as seen from here.
func (w *etagWatch) stood() time.Duration { return w.last.Sub(w.since) }

// watched is how long status read the lease.
func (w *etagWatch) watched() time.Duration { return w.last.Sub(w.first) }

func (c *cli) status(ctx context.Context, args []string) int {
	var cmd statusCmd
	fs := cmd.flags()
	if code, ok := c.parse(fs, statusHelp, args); !ok {
		return code
	}
	l, code, ok := c.open(fs, &cmd.target)
	if !ok {
		return code
	}
	defer l.close()

	var (
		info leaderelection.LeaseInfo
		w    etagWatch
	)
	read := func() error {
		return l.call(ctx, func(ctx context.Context) (err error) {
			info, err = l.manager.Inspect(ctx)
			w.see(info)
			return err
		})
	}
	if err := read(); err != nil {
		return c.fail(err)
	}
	for end := time.Now().Add(cmd.watch); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return c.fail(ctx.Err())
		case <-time.After(min(watchEvery, time.Until(end))):
		}
		if err := read(); err != nil {
			return c.fail(err)
		}
	}
	s := l.manager.Settings()
	if cmd.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(newStatusJSON(s.Container, s.Blob, info, w, time.Now())); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	printStatus(c.stdout, l.name, info, w, time.Now())
	return exitOK
}

// printStatus writes the lease's state for a person: the answer to "who
// leads?" first.
func printStatus(w io.Writer, name string, info leaderelection.LeaseInfo, watch etagWatch, now time.Time) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-9s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	switch {
	case !info.Exists:
		line("leader", "no leader (lease blob does not exist yet: nobody has contended for it)")
		line("blob", "%s", name)
		return
	case info.Held() && info.Leader.Number == 0:
		line("leader", "unknown (the lease is held, but no leader has recorded its term)")
	case info.TermPending():
		line("leader", "unknown (the lease was taken, and its holder has not recorded its term yet)")
		line("previous", "%s, ended %s", describeTerm(info.Leader, now), ago(info.LeaderEnded, now))
	case info.Held():
		note := ""
		if info.State == lease.StateTypeBreaking {
			note = " (its lease is being broken: it stops leading)"
		}
		line("leader", "%s%s", info.Leader.Identity, note)
		line("term", "%d", info.Leader.Number)
		if !info.Leader.Since.IsZero() {
			line("since", "%s (%s)", info.Leader.Since.UTC().Format(time.RFC3339), ago(info.Leader.Since, now))
		}
	default:
		line("leader", "no leader (the lease is %s)", info.State)
		if info.Leader.Number > 0 {
			ended := ""
			if !info.LeaderEnded.IsZero() {
				ended = ", ended " + ago(info.LeaderEnded, now)
			}
			line("previous", "%s%s", describeTerm(info.Leader, now), ended)
		}
	}
	state := fmt.Sprintf("%s, %s", info.State, info.Status)
	if info.Duration != "" {
		state += ", " + string(info.Duration)
	}
	line("lease", "%s", state)
	switch info.Kind {
	case leaderelection.NativeLease:
		if info.DeclaredDuration > 0 {
			line("kind", "native lease%s: Azure expires it that long after its last renewal; followers never break it", declaredText(info))
		} else {
			line("kind", "native lease: Azure expires it 15s to 60s after its last renewal; followers never break it")
		}
	case leaderelection.ETagLease:
		if info.DeclaredDuration > 0 {
			line("kind", "ETag lease%s: a follower breaks it once its ETag has stood unchanged that long", declaredText(info))
		} else {
			line("kind", "ETag lease, no declared duration (its holder has not written): a follower breaks it after its own LeaseDuration of silence")
		}
		stood := fmt.Sprintf("unchanged for %v, as seen from here", watch.stood().Round(100*time.Millisecond))
		switch {
		case watch.watched() == 0:
			stood += " (first seen now; -watch D measures it)"
		case watch.changes > 0:
			stood += fmt.Sprintf(" (watched %v: changed %d times, the holder is renewing)", watch.watched().Round(100*time.Millisecond), watch.changes)
		default:
			stood += fmt.Sprintf(" (watched %v: no renewal seen)", watch.watched().Round(100*time.Millisecond))
		}
		line("etag", "%s %s", info.ETag, stood)
		if !info.LastModified.IsZero() {
			line("written", "%s (%s, by the server's clock): the holder's last renewal", info.LastModified.UTC().Format(time.RFC3339), ago(info.LastModified, now))
		}
	}
	line("blob", "%s", name)
}

// declaredText is ", declared 3m0s", or "" when the record declares none.
func declaredText(info leaderelection.LeaseInfo) string {
	if info.DeclaredDuration == 0 {
		return ""
	}
	return fmt.Sprintf(", declared %v", info.DeclaredDuration)
}

// statusJSON is what status -json prints.
type statusJSON struct {
	Container string `json:"container"`
	Blob      string `json:"blob"`
	Exists    bool   `json:"exists"` // false: the lease blob has not been created yet
	Held      bool   `json:"held"`   // someone leads: the lease is leased or breaking
	State     string `json:"state"`  // available, leased, expired, breaking or broken
	Status    string `json:"status"` // locked or unlocked
	Duration  string `json:"duration,omitempty"`
	// Kind is "native" or "etag" while someone holds the lease.
	Kind string `json:"kind,omitempty"`
	// DeclaredSeconds is the lease duration the leader's record declares.
	DeclaredSeconds float64 `json:"declaredSeconds,omitempty"`
	// ETag is the blob's ETag, which every renewal of an ETag lease changes;
	// ETagStoodSeconds how long it has stood, as seen from here (0 without
	// -watch), ETagChanges how often it changed while watched.
	ETag             string     `json:"etag,omitempty"`
	ETagStoodSeconds float64    `json:"etagStoodSeconds"`
	ETagChanges      int        `json:"etagChanges"`
	WatchedSeconds   float64    `json:"watchedSeconds"`
	LastModified     *time.Time `json:"lastModified,omitempty"` // the blob's last write, by the server's clock
	// Leader is the current leader, null when nobody holds the lease. Its
	// identity is empty and its term 0 if the holder has not recorded one.
	Leader *termJSON `json:"leader"`
	// LastLeader is the last recorded leader, when nobody holds the lease
	// or its holder has not recorded its term yet.
	LastLeader *termJSON `json:"lastLeader,omitempty"`
}

type termJSON struct {
	Identity   string     `json:"identity"`
	Term       int64      `json:"term"`
	Since      *time.Time `json:"since,omitempty"`      // UTC, by the leader's clock
	AgeSeconds *float64   `json:"ageSeconds,omitempty"` // now - since, by ours
}

func newStatusJSON(container, blob string, info leaderelection.LeaseInfo, w etagWatch, now time.Time) statusJSON {
	out := statusJSON{
		Container: container, Blob: blob, Exists: info.Exists, Held: info.Held(),
		State: string(info.State), Status: string(info.Status), Duration: string(info.Duration),
		Kind: string(info.Kind), DeclaredSeconds: info.DeclaredDuration.Seconds(), ETag: string(info.ETag),
		ETagStoodSeconds: w.stood().Seconds(), ETagChanges: w.changes, WatchedSeconds: w.watched().Seconds(),
	}
	if !info.LastModified.IsZero() {
		lm := info.LastModified.UTC()
		out.LastModified = &lm
	}
	t := &termJSON{Identity: info.Leader.Identity, Term: info.Leader.Number}
	if since := info.Leader.Since; !since.IsZero() {
		since = since.UTC()
		age := now.Sub(since).Round(time.Millisecond).Seconds()
		t.Since, t.AgeSeconds = &since, &age
	}
	switch {
	case info.TermPending():
		out.Leader, out.LastLeader = &termJSON{}, t
	case info.Held():
		out.Leader = t
	case info.Leader.Number > 0:
		out.LastLeader = t
	}
	return out
}
