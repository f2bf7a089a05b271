package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection"
)

// statusCmd holds the flags of status.
type statusCmd struct {
	target
	json bool
}

func (cmd *statusCmd) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	cmd.register(fs)
	fs.BoolVar(&cmd.json, "json", false, "")
	return fs
}

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

	var info leaderelection.LeaseInfo
	err := l.call(ctx, func(ctx context.Context) (err error) {
		info, err = l.manager.Inspect(ctx)
		return err
	})
	if err != nil {
		return c.fail(err)
	}
	s := l.manager.Settings()
	if cmd.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(newStatusJSON(s.Container, s.Blob, info, time.Now())); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	printStatus(c.stdout, l.name, info, time.Now())
	return exitOK
}

// printStatus writes the lease's state for a person: the answer to "who
// leads?" first.
func printStatus(w io.Writer, name string, info leaderelection.LeaseInfo, now time.Time) {
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
	line("blob", "%s", name)
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

func newStatusJSON(container, blob string, info leaderelection.LeaseInfo, now time.Time) statusJSON {
	out := statusJSON{
		Container: container, Blob: blob, Exists: info.Exists, Held: info.Held(),
		State: string(info.State), Status: string(info.Status), Duration: string(info.Duration),
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
