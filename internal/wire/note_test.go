package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNoteEntriesReadBackAndSayWhyNot(t *testing.T) {
	t.Parallel()
	h := Handed{Name: "s1", Term: 3, ETag: `"0x1"`}
	assert.Equal(t, `s1 3 "0x1"`, NoteEntry(h))
	got, why := ParseNoteEntry(" " + NoteEntry(h) + " ")
	assert.Empty(t, why)
	assert.Equal(t, h, got)
	for entry, want := range map[string]string{
		"":          "want 3 fields (name term ETag), got 0",
		`s1 3`:      "want 3 fields (name term ETag), got 2",
		`s1 0 "e"`:  `the term "0" is not a number from 1`,
		`s1 -2 "e"`: `the term "-2" is not a number from 1`,
		`s* 1 "e"`:  "the shard name may contain only letters, digits, '/' and - _ . ~ : @ =, got '*'",
	} {
		_, why := ParseNoteEntry(entry)
		assert.Equal(t, want, why, "%q", entry)
	}
}

// A note's name says who wrote it: the giver is what comes before the
// last "-", whatever dashes its session ID holds, in every part.
func TestNoteNamesSayTheirSender(t *testing.T) {
	t.Parallel()
	giver := "c96f0cba-ff7e-4c9f-8a92-818c89139eb7"
	name := NoteName("jobs/", "r", giver)
	for i := range 3 {
		assert.Equal(t, giver, NoteSender(NotePrefix("jobs/", "r"), NotePart(name, i)), "part %d", i)
	}
	assert.Equal(t, name, NotePart(name, 0))
	assert.Equal(t, name+".2", NotePart(name, 2))
}
