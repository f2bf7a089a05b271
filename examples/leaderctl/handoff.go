package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/wire"
)

// A handoff note, <prefix>/handoff/<receiver>/<giver>-0 (the library's
// handoff.go): written by a session that hands shards to another (a join, a
// rebalance, a session that leaves). Before it writes the note, the giver
// has recorded each shard for the receiver at the next term and changed its
// lease's ID to one the receiver derives. The note is an empty block blob,
// never leased, whose metadata carries its role (handoff) and its entries
// (leaderhandoff): "name term ETag", separated by ";". A note too long for
// one blob's metadata goes on in <giver>-0.1, <giver>-0.2... The receiver
// lists its notes while it expects shards and adopts each shard: at once if
// the giver is a live session, else only once an acquire with that ID,
// If-Match the ETag, succeeds. An entry that does not read is skipped.
// Notes are not deleted as they are read: the receiver deletes those whose
// giver is no longer live, and the rest as it ends.

// noteName is where a note's name says it goes.
type noteName struct {
	receiver, giver string
	part            string // "0" for a note's first blob, "0.1", "0.2"... for the next
}

// parseNoteName reads "<receiver>/<giver>-<part>", the name of a note after
// <prefix>/handoff/: the giver is what comes before the last "-", as the
// library reads it (wire.NoteSender: session IDs hold dashes).
func parseNoteName(name string) (noteName, bool) {
	receiver, rest, ok := strings.Cut(name, "/")
	if !ok || receiver == "" || strings.Contains(rest, "/") {
		return noteName{}, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return noteName{}, false
	}
	return noteName{receiver: receiver, giver: rest[:i], part: rest[i+1:]}, true
}

// handedEntry is one entry of a note that reads.
type handedEntry struct {
	Name string `json:"name"`
	Term int64  `json:"term"` // the term the giver recorded for the receiver
	ETag string `json:"etag"` // of that record
}

// parseNoteEntries reads a note's entries as the library does (wire.ParseNote),
// and keeps those it skips.
func parseNoteEntries(entries string) (read []handedEntry, skipped []string) {
	for _, e := range strings.Split(entries, ";") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		h, why := wire.ParseNoteEntry(e)
		if why != "" {
			skipped = append(skipped, e)
			continue
		}
		read = append(read, handedEntry{Name: h.Name, Term: h.Term, ETag: h.ETag})
	}
	return read, skipped
}

// noteView is what status found of a handoff note.
type noteView struct {
	owner    ownerBlob
	name     noteName
	named    bool // its name is <prefix>/handoff/<receiver>/<giver>-<part>
	from, to sessionLook
	has      bool // it carries entries (the metadata key leaderhandoff)
	entries  []handedEntry
	skipped  []string
}

func newNoteView(info leaderelection.LeaseInfo, blob string, p peeked) noteView {
	var v noteView
	if v.owner, v.named = ownerOf(leaderelection.RoleHandoff, blob); v.named {
		v.name, _ = parseNoteName(v.owner.name)
	}
	var text string
	if text, v.has = p.meta(wire.MetaNote); v.has {
		v.entries, v.skipped = parseNoteEntries(text)
	}
	return v
}

// printNote writes a handoff note's state for a person: from whom to whom,
// which shards, and that it is a hint, not a lease.
func printNote(w io.Writer, container, blob string, info leaderelection.LeaseInfo, v noteView, now time.Time) {
	line := labelled(w)
	line("role", "%s", hintRole(leaderelection.RoleHandoff, blob, info,
		": the receiver adopts what it names only on the condition of an acquire, and deletes it"))
	if v.named {
		line("from", "%s", describeLook(v.from,
			"the receiver adopts what its note names at once",
			"the receiver adopts what its note names only on the condition of an acquire, and deletes the note",
			"the receiver adopts what its note names only on the condition of an acquire, and deletes the note"))
		line("to", "%s", describeLook(v.to,
			"it reads its notes while it expects shards, and adopts what they name",
			"nobody adopts what its notes name: the shards are recorded for it, and the survivors take them as a dead session's",
			"nobody adopts what its notes name: the shards are recorded for it, and the survivors take them as a dead session's; a note left over is harmless"))
		if v.name.part != "0" {
			line("part", "%s: a note too long for one blob goes on in %s-0.1, %s-0.2...", v.name.part, v.name.giver, v.name.giver)
		}
	}
	switch {
	case !info.Exists:
		line("shards", "none: the blob does not exist (no note from that giver, or the receiver has deleted it)")
	case !v.has:
		line("shards", "none: the note carries no %s entries", wire.MetaNote)
	case len(v.entries) == 0:
		line("shards", "none: the note names no shard that reads")
	default:
		names := make([]string, 0, len(v.entries))
		for _, e := range v.entries {
			names = append(names, e.Name)
		}
		line("shards", "%d handed: %s", len(v.entries), strings.Join(names[:min(len(names), heldShown)], ", ")+moreText(len(names)-heldShown))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  SHARD\tTERM\tETAG")
		for _, e := range v.entries[:min(len(v.entries), heldShown)] {
			fmt.Fprintf(tw, "  %s\t%d\t%s\n", e.Name, e.Term, e.ETag)
		}
		tw.Flush()
	}
	if len(v.skipped) > 0 {
		quoted := make([]string, 0, len(v.skipped))
		for _, e := range v.skipped[:min(len(v.skipped), heldShown)] {
			quoted = append(quoted, strconv.Quote(e))
		}
		line("skipped", "%d entries do not read (want \"name term ETag\"), and the receiver skips them: %s",
			len(v.skipped), strings.Join(quoted, ", ")+moreText(len(v.skipped)-heldShown))
	}
	printHintTail(line, container, blob, info, now, "a note", "its giver",
		"the giver recorded each shard for the receiver and handed its lease over before it wrote the note; nothing is broken on its word")
}

// labelled writes "label:   text" lines to w, as status does.
func labelled(w io.Writer) func(label, format string, args ...any) {
	return func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-9s %s\n", label+":", fmt.Sprintf(format, args...))
	}
}

// hintRole is the role line of a hint blob (a held list, a note) of role
// want: by its name where it does not exist or its record says another
// role (then with what that means, otherwise).
func hintRole(want leaderelection.BlobRole, blob string, info leaderelection.LeaseInfo, otherwise string) string {
	role := describeRole(want, blob)
	switch {
	case !info.Exists:
		return "by its name, " + role
	case info.Role != want:
		return "by its name, " + role + "; its record says " + describeRecordedRole(info.Role) + otherwise
	}
	return role
}

// printHintTail ends the report of a blob that is a hint, not a lease (a
// held list, a note), what, written by writer: what the hint is, a lease
// that should not be there, when it was written, that break refuses it, and
// the blob.
func printHintTail(line func(label, format string, args ...any), container, blob string, info leaderelection.LeaseInfo, now time.Time, what, writer, hint string) {
	if info.Exists {
		line("hint", "a hint, not a lease: %s", hint)
		if info.Held() {
			line("lease", "%s, %s: the library never leases %s, and %s cannot rewrite it while this lease stands", info.State, info.Status, what, writer)
		}
		if !info.LastModified.IsZero() {
			line("written", "%s (%s, by the server's clock)", info.LastModified.UTC().Format(time.RFC3339), ago(info.LastModified, now))
		}
		line("break", "nothing to break: it is not a lease (leaderctl break refuses it)")
	}
	line("blob", "%s/%s", container, blob)
}

// moreText is " and 3 more (-json lists them all)", or "" if n is 0 or
// less.
func moreText(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" and %d more (-json lists them all)", n)
}

// handoffJSON is a handoff note, in status -json.
type handoffJSON struct {
	// From and To are the giver and the receiver, by the note's name, and
	// what their own blobs say; null if its name does not say.
	From *sessionJSON `json:"from"`
	To   *sessionJSON `json:"to"`
	Part string       `json:"part,omitempty"` // "0", or "0.1"... for a note's next blobs
	// Shards are the entries that read, in order; Skipped those that do
	// not, as stored, which the receiver skips.
	Shards  []handedEntry `json:"shards"`
	Skipped []string      `json:"skipped"`
}

// sessionJSON is what a session's own blob says of it.
type sessionJSON struct {
	ID string `json:"id"`
	// Live: its lease is held and it has written its record; null if
	// unknown (Error says why).
	Live     *bool  `json:"live"`
	Exists   bool   `json:"exists"` // false once it ended and was collected
	Identity string `json:"identity,omitempty"`
	Error    string `json:"error,omitempty"`
}

func newSessionJSON(sl sessionLook) *sessionJSON {
	out := &sessionJSON{ID: sl.id, Exists: sl.exists, Identity: sl.identity}
	if sl.err != nil {
		out.Error = strings.TrimPrefix(sl.err.Error(), "leaderelection: ")
	} else {
		live := sl.live
		out.Live = &live
	}
	return out
}

func newHandoffJSON(v noteView) *handoffJSON {
	out := &handoffJSON{Shards: []handedEntry{}, Skipped: []string{}}
	if v.named {
		out.From, out.To, out.Part = newSessionJSON(v.from), newSessionJSON(v.to), v.name.part
	}
	out.Shards = append(out.Shards, v.entries...)
	out.Skipped = append(out.Skipped, v.skipped...)
	return out
}
