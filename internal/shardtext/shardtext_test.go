package shardtext

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNameProblem(t *testing.T) {
	for name, want := range map[string]string{
		"shard-00001":            "",
		"tenant/a:b@c=d~e_f.g":   "",
		strings.Repeat("x", 256): "",
		"":                       "must not be empty",
		strings.Repeat("x", 257): "must be at most 256 characters long, got 257",
		"a.":                     "must not end with a dot",
		"a*b":                    "may contain only letters, digits, '/' and - _ . ~ : @ =, got '*'",
		"a b":                    "may contain only letters, digits, '/' and - _ . ~ : @ =, got ' '",
		"a//b":                   "'/' must separate non-empty segments other than . and ..",
		"a/../b":                 "'/' must separate non-empty segments other than . and ..",
		"/a":                     "'/' must separate non-empty segments other than . and ..",
		"./a":                    "'/' must separate non-empty segments other than . and ..",
	} {
		assert.Equal(t, want, NameProblem(name), "%q", name)
	}
}

func TestHeldLinesReadBackAndSayWhyNot(t *testing.T) {
	e := Held{Name: "t/s-1", Term: 7, Gen: 0, ETag: `"0x8DC1"`}
	assert.Equal(t, `t/s-1 7 0 "0x8DC1"`, HeldLine(e))
	got, why := ParseHeldLine(HeldLine(e))
	assert.Empty(t, why)
	assert.Equal(t, e, got)
	for line, want := range map[string]string{
		"":               "want 4 fields (name term gen ETag), got 0",
		`a 1 1`:          "want 4 fields (name term gen ETag), got 3",
		`a 1 1 "e" x`:    "want 4 fields (name term gen ETag), got 5",
		`a x 1 "e"`:      `the term "x" is not a number from 1`,
		`a 0 1 "e"`:      `the term "0" is not a number from 1`,
		`a 1 -1 "e"`:     `the gen "-1" is not a number from 0`,
		`a 1 1.5 "e"`:    `the gen "1.5" is not a number from 0`,
		`a. 1 1 "e"`:     "the shard name must not end with a dot",
		`a/../b 1 1 "e"`: "the shard name '/' must separate non-empty segments other than . and ..",
	} {
		_, why := ParseHeldLine(line)
		assert.Equal(t, want, why, "%q", line)
	}
}

func TestNoteEntriesReadBackAndSayWhyNot(t *testing.T) {
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
