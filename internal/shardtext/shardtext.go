// Package shardtext holds the rules, shared by the library and leaderctl,
// for the text a ShardOwner writes about shards: what a shard name may be,
// how a line of a session's held list reads (the library's held.go), and an
// entry of a handoff note (handoff.go). What the library refuses or skips,
// leaderctl explains.
package shardtext

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxName is the longest shard name accepted.
const MaxName = 256

// NameProblem says what is wrong with a shard name, or "" if nothing. A
// name keeps to what a blob name carries unchanged through URLs and
// listings, and reads back the same: letters, digits and - _ . ~ : @ =,
// with / between non-empty segments other than . and .. (which a URL path
// would resolve), not ending with a dot (Azure's rule).
func NameProblem(name string) string {
	switch {
	case name == "":
		return "must not be empty"
	case len(name) > MaxName:
		return fmt.Sprintf("must be at most %d characters long, got %d", MaxName, len(name))
	case strings.HasSuffix(name, "."):
		return "must not end with a dot"
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.~:@=/", r)
		if !ok {
			return fmt.Sprintf("may contain only letters, digits, '/' and - _ . ~ : @ =, got %q", r)
		}
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "'/' must separate non-empty segments other than . and .."
		}
	}
	return ""
}

// Held is one line of a held list: a shard the session runs.
type Held struct {
	Name string
	Term int64 // the shard's term, from 1
	// Gen is the session's term its claim derived the shard's lease ID
	// from; 0: the shard was handed to it.
	Gen  int64
	ETag string // of the record the session runs the shard under
}

// HeldLine is how a held list writes e: "name term gen ETag".
func HeldLine(e Held) string {
	return e.Name + " " + strconv.FormatInt(e.Term, 10) + " " + strconv.FormatInt(e.Gen, 10) + " " + e.ETag
}

// ParseHeldLine reads one line of a held list; why says what is wrong with one
// that does not read.
func ParseHeldLine(line string) (e Held, why string) {
	f, term, why := nameAndTerm(line, "name term gen ETag")
	if why != "" {
		return e, why
	}
	gen, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || gen < 0 {
		return e, fmt.Sprintf("the gen %q is not a number from 0", f[2])
	}
	return Held{Name: f[0], Term: term, Gen: gen, ETag: f[3]}, ""
}

// Handed is one entry of a handoff note: a shard handed to the note's
// receiver.
type Handed struct {
	Name string
	Term int64  // the term the giver recorded for the receiver, from 1
	ETag string // of that record
}

// NoteEntry is how a note writes h: "name term ETag". A note joins its
// entries with ";".
func NoteEntry(h Handed) string {
	return h.Name + " " + strconv.FormatInt(h.Term, 10) + " " + h.ETag
}

// ParseNoteEntry reads one entry of a handoff note; why says what is wrong
// with one that does not read.
func ParseNoteEntry(entry string) (h Handed, why string) {
	f, term, why := nameAndTerm(entry, "name term ETag")
	if why != "" {
		return h, why
	}
	return Handed{Name: f[0], Term: term, ETag: f[2]}, ""
}

// nameAndTerm splits s into the fields layout names, and reads the first
// two: a shard name, and a term from 1.
func nameAndTerm(s, layout string) (f []string, term int64, why string) {
	f = strings.Fields(s)
	if want := len(strings.Fields(layout)); len(f) != want {
		return nil, 0, fmt.Sprintf("want %d fields (%s), got %d", want, layout, len(f))
	}
	term, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || term < 1 {
		return nil, 0, fmt.Sprintf("the term %q is not a number from 1", f[1])
	}
	if why := NameProblem(f[0]); why != "" {
		return nil, 0, "the shard name " + why
	}
	return f, term, ""
}
