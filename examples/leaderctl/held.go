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

// A session's held list, <prefix>/held/<session> (the library's heldlist.go):
// a plain block blob, never leased, whose metadata says its role (held) and
// how many lines it has (leaderheld), and whose body is one line a shard the
// session runs, "name term gen ETag", sorted: the shard's term, the
// session's term its claim derived the shard's lease ID from (0: the shard
// was handed to it, and its ID derives from the term alone), and the ETag
// of the record it runs the shard under. The session rewrites it as its
// shards change, at most every RetryInterval, and deletes it as it ends.
// When it dies, the survivors read it, to take its shards without listing
// them all: each by a change of the lease's ID from the one the list implies,
// If-Match the ETag it gives. A list that does not read whole is refused
// whole, and the survivors list every shard instead. A session a few shards
// short reads the others' lists too, then each shard none names, to find the
// free ones without listing every shard.

// heldEntry is one line of a held list that reads.
type heldEntry struct {
	Name string `json:"name"`
	Term int64  `json:"term"` // the shard's term
	// Gen is the session's term its claim derived the lease ID from; 0:
	// the shard was handed to it.
	Gen  int64  `json:"gen"`
	ETag string `json:"etag"` // of the record the session runs the shard under
}

// heldList is a held list as the library reads it (wire.ParseHeld), except that
// it names every problem, not only the first.
type heldList struct {
	count    string // leaderheld, as stored
	hasCount bool
	lines    int         // lines in the body; an empty body has none
	entries  []heldEntry // the lines that read, in order
	problems []string    // why the library refuses it; none if it reads whole
}

// parseHeldList reads a held list's body, role and count by the library's
// rules: its role must be held; each line "name term gen ETag", the term a
// number from 1, gen from 0, the name a shard name; the count the number of
// lines, written as strconv.Itoa writes it.
func parseHeldList(text string, role leaderelection.BlobRole, count string, hasCount bool) heldList {
	h := heldList{count: count, hasCount: hasCount}
	if role != leaderelection.RoleHeld {
		h.problems = append(h.problems, fmt.Sprintf("%s=%q, not %q: the library reads no list of another role", wire.MetaRole, string(role), leaderelection.RoleHeld))
	}
	if text != "" {
		for i, line := range strings.Split(text, "\n") {
			h.lines++
			e, why := parseHeldLine(line)
			if why != "" {
				h.problems = append(h.problems, fmt.Sprintf("line %d does not read: %q: %s", i+1, line, why))
				continue
			}
			h.entries = append(h.entries, e)
		}
	}
	switch {
	case !hasCount:
		h.problems = append(h.problems, fmt.Sprintf("no %s count: the library reads no list that does not say how many lines it has", wire.MetaHeld))
	case count == strconv.Itoa(len(h.entries)):
	case len(h.entries) < h.lines && count == strconv.Itoa(h.lines):
		// The count is right; the lines that do not read are reported.
	case len(h.entries) == h.lines:
		h.problems = append(h.problems, fmt.Sprintf("%s=%q, but the list has %s", wire.MetaHeld, count, linesText(h.lines)))
	default:
		h.problems = append(h.problems, fmt.Sprintf("%s=%q, but the list has %s, %d of which read", wire.MetaHeld, count, linesText(h.lines), len(h.entries)))
	}
	return h
}

// parseHeldLine reads one line of a held list by the library's rules; why
// says what is wrong with one that does not read.
func parseHeldLine(line string) (heldEntry, string) {
	e, why := wire.ParseHeldLine(line)
	return heldEntry{Name: e.Name, Term: e.Term, Gen: e.Gen, ETag: e.ETag}, why
}

// heldView is what status found of a held list: the blob, its session, its
// body.
type heldView struct {
	owner   ownerBlob
	named   bool        // its name is <prefix>/held/<session>: owner says whose
	session sessionLook // what the session's own blob says; read only if named
	size    int64       // its length, -1 if unknown
	list    heldList    // read only if read
	read    bool        // its body was read, and list parsed
	tooLong bool        // longer than the library reads: not read
	readErr error       // reading its body failed
}

// newHeldView parses what the peek read of a held list.
func newHeldView(info leaderelection.LeaseInfo, blob string, p peeked) heldView {
	v := heldView{size: p.size()}
	v.owner, v.named = ownerOf(leaderelection.RoleHeld, blob)
	switch {
	case !info.Exists:
	case v.size > wire.MaxHeldBytes:
		v.tooLong = true
	case p.textErr != nil:
		v.readErr = p.textErr
	case v.size == 0:
		// An empty list has no body to read: putHeld writes it with a
		// count of 0.
		v.read = true
	case p.textRead:
		v.read = true
	default:
		v.readErr = fmt.Errorf("its body was not read")
	}
	if v.read {
		count, has := p.meta(wire.MetaHeld)
		text := ""
		if v.size > 0 {
			text = string(p.text)
		}
		v.list = parseHeldList(text, info.Role, count, has)
	}
	return v
}

// heldShown is how many of a list's shards the text names: a session may
// hold thousands, and -json lists them all.
const heldShown = 20

// printHeld writes a held list's state for a person: whose it is, what it
// names, whether it reads whole, and that it is a hint, not a lease.
func printHeld(w io.Writer, container, blob string, info leaderelection.LeaseInfo, v heldView, now time.Time) {
	line := labelled(w)
	line("role", "%s", hintRole(leaderelection.RoleHeld, blob, info, ""))
	switch {
	case !v.named:
	case !info.Exists:
		line("session", "%s", describeLook(v.session, "", "", ""))
	default:
		line("session", "%s", describeLook(v.session,
			"it rewrites its list as its shards change, at most every RetryInterval, and deletes it as it ends",
			"the survivors read its list to take its shards, then collect its blob and the list",
			"nothing reads its list any more (one left over is harmless)"))
	}
	h := v.list
	switch {
	case !info.Exists:
		line("list", "none: the blob does not exist (the session holds no shard, has not written its list yet, or has ended and deleted it)")
	case v.tooLong:
		line("list", "malformed: %d bytes, over the %d the library reads: it refuses the list whole, and were the session to die, "+
			"the survivors would list every shard instead", v.size, wire.MaxHeldBytes)
	case v.readErr != nil:
		line("list", "unknown: reading it failed: %s", readError(v.readErr))
	case len(h.problems) > 0:
		line("list", "malformed: %s: the library refuses it whole, and were the session to die, the survivors would list every shard instead",
			heldCounts(h))
		shown := h.problems[:min(len(h.problems), heldShown)]
		for _, p := range shown {
			fmt.Fprintf(w, "  %s\n", p)
		}
		if n := len(h.problems) - len(shown); n > 0 {
			fmt.Fprintf(w, "  and %d more problems (-json lists them all)\n", n)
		}
	case len(h.entries) == 0:
		line("list", "no shard: %s", heldCounts(h))
	default:
		line("list", "%d shards: %s", len(h.entries), heldCounts(h))
	}
	if len(h.entries) > 0 {
		if len(h.problems) > 0 {
			fmt.Fprintln(w, "  the lines that read, though nobody takes a shard from a list refused whole:")
		}
		printHeldEntries(w, h.entries)
	}
	printHintTail(line, container, blob, info, now, "a held list", "its session",
		"if the session dies, each survivor takes its part of the shards the list names, each only if the shard's lease "+
			"and record are still as the line says; nothing is broken on its word, and a shard it does not name is found by a listing")
}

// heldCounts says how many lines a list has, how many read, and the count
// its metadata gives: "leaderheld="3", and its 3 lines read".
func heldCounts(h heldList) string {
	count := "no " + wire.MetaHeld
	if h.hasCount {
		count = fmt.Sprintf("%s=%q", wire.MetaHeld, h.count)
	}
	switch {
	case h.lines == 0:
		return count + ", and no line"
	case h.lines == 1 && len(h.entries) == 1:
		return count + ", and its 1 line reads"
	case len(h.entries) == h.lines:
		return fmt.Sprintf("%s, and its %d lines read", count, h.lines)
	}
	return fmt.Sprintf("%s, and %d of its %s read", count, len(h.entries), linesText(h.lines))
}

// linesText is "1 line" or "3 lines".
func linesText(n int) string {
	if n == 1 {
		return "1 line"
	}
	return fmt.Sprintf("%d lines", n)
}

// printHeldEntries writes the first heldShown lines that read.
func printHeldEntries(w io.Writer, entries []heldEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  SHARD\tTERM\tGEN\tETAG")
	shown := entries[:min(len(entries), heldShown)]
	for _, e := range shown {
		gen := strconv.FormatInt(e.Gen, 10)
		if e.Gen == 0 {
			gen = "0 (handed to it)"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", e.Name, e.Term, gen, e.ETag)
	}
	tw.Flush()
	if n := len(entries) - len(shown); n > 0 {
		fmt.Fprintf(w, "  and %d more (-json lists them all)\n", n)
	}
}

// describeRecordedRole is a role as a blob's record states it, for a blob
// whose name says another.
func describeRecordedRole(role leaderelection.BlobRole) string {
	if role == "" {
		return "none"
	}
	return fmt.Sprintf("%q", string(role))
}

// heldJSON is a held list, in status -json.
type heldJSON struct {
	// Leaderheld is the count in its metadata, as stored; null if it has
	// none.
	Leaderheld *string `json:"leaderheld"`
	Lines      int     `json:"lines"`  // lines in its body
	Parsed     int     `json:"parsed"` // lines that read: len(shards)
	// Shards are the lines that read, in order.
	Shards []heldEntry `json:"shards"`
	// Malformed: the library refuses the list whole (Problems say why),
	// and, were the session to die, the survivors would list every shard.
	Malformed bool     `json:"malformed"`
	Problems  []string `json:"problems"`
	Bytes     int64    `json:"bytes"`
	// ReadError is why its body could not be read: the rest is unknown.
	ReadError string `json:"readError,omitempty"`
}

func newHeldJSON(v heldView) *heldJSON {
	out := &heldJSON{Shards: []heldEntry{}, Problems: []string{}, Bytes: max(v.size, 0)}
	switch {
	case v.tooLong:
		out.Malformed = true
		out.Problems = append(out.Problems, fmt.Sprintf("%d bytes, over the %d the library reads", v.size, wire.MaxHeldBytes))
	case v.readErr != nil:
		out.ReadError = readError(v.readErr)
	case v.read:
		h := v.list
		if h.hasCount {
			count := h.count
			out.Leaderheld = &count
		}
		out.Lines, out.Parsed = h.lines, len(h.entries)
		out.Shards = append(out.Shards, h.entries...)
		out.Problems = append(out.Problems, h.problems...)
		out.Malformed = len(h.problems) > 0
	}
	return out
}

// hintKind is what status shows a blob as: a held list or a handoff note,
// by its role, or by its name if its record says no role; "" for a lease.
func hintKind(info leaderelection.LeaseInfo, blob string) leaderelection.BlobRole {
	if isHintRole(info.Role) {
		return info.Role
	}
	if ob, ok := parseOwnerBlob(blob); ok && info.Role == "" && isHintRole(ob.role) {
		return ob.role
	}
	return ""
}
