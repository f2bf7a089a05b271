package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// A handoff note, P/handoff/<receiver>/<giver>-0 (NoteName): written by a
// session that hands shards to another, for the receiver to adopt them at
// once (see the top of the library's handoff.go). A note's content is in its
// metadata (MetaNote), so that the receiver's listing of its notes reads
// them all at once: entries "name term ETag" (NoteEntry), separated by ";",
// at most NoteBytes in a note; a longer one goes on in <giver>-0.1,
// <giver>-0.2... (NoteParts, NotePart). An entry that does not read is
// skipped (ParseNote).

// NoteBytes is the most a note's entries take, of the 8 KiB of metadata a
// blob may carry.
const NoteBytes = 6 << 10

// NotePrefix is the directory of the notes to session receiver, under
// prefix.
func NotePrefix(prefix, receiver string) string {
	return prefix + HandoffDir + receiver + "/"
}

// NoteName is the note a giver session writes to a receiver session (its
// first part: see NotePart).
func NoteName(prefix, receiver, giver string) string {
	return NotePrefix(prefix, receiver) + giver + "-0"
}

// NotePart is the name of part i of the note name: name itself, then
// name.1, name.2...
func NotePart(name string, i int) string {
	if i == 0 {
		return name
	}
	return fmt.Sprintf("%s.%d", name, i)
}

// NoteSender is the session that wrote the note name, under notePrefix
// (NotePrefix): what comes before the last "-" (session IDs hold dashes).
func NoteSender(notePrefix, name string) string {
	rest := strings.TrimPrefix(name, notePrefix)
	if i := strings.LastIndexByte(rest, '-'); i > 0 {
		return rest[:i]
	}
	return ""
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

// NoteParts is the content of each part of the note naming hs, in order: in
// as few parts as their size allows, each at most NoteBytes (an entry
// longer than that alone in its part). A part left from a longer note before
// names shards handed earlier: the receiver skips a term it has adopted
// already.
func NoteParts(hs []Handed) []string {
	var parts []string
	var b strings.Builder
	flush := func() {
		if b.Len() == 0 {
			return
		}
		parts = append(parts, b.String())
		b.Reset()
	}
	for _, h := range hs {
		entry := NoteEntry(h)
		if b.Len()+len(entry)+1 > NoteBytes {
			flush()
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(entry)
	}
	flush()
	return parts
}

// NoteMetadata is the metadata of a note part whose content is entries.
func NoteMetadata(entries string) map[string]*string {
	role := RoleHandoff
	return map[string]*string{MetaRole: &role, MetaNote: &entries}
}

// ParseNote reads a note's entries. One that does not read is skipped: the
// note was not written by this library, or not whole.
func ParseNote(entries string) []Handed {
	var hs []Handed
	for _, e := range strings.Split(entries, ";") {
		if h, why := ParseNoteEntry(e); why == "" {
			hs = append(hs, h)
		}
	}
	return hs
}
