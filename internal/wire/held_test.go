package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseHeld(t *testing.T) {
	t.Parallel()
	good, err := ParseHeld("a 3 0 \"0x1\"\nb 7 2 \"0x2\"", "2", RoleHeld)
	require.NoError(t, err)
	assert.Equal(t, []Held{{"a", 3, 0, `"0x1"`}, {"b", 7, 2, `"0x2"`}}, good)
	empty, err := ParseHeld("", "0", RoleHeld)
	require.NoError(t, err)
	assert.Empty(t, empty)
	for _, bad := range []struct{ text, count, role string }{
		{`a 3 0 "1"`, "1", ""},                       // not a list
		{"a 3 0 \"1\"\nb 7 2 \"2\"", "3", "held"},    // not whole
		{"a 3 0", "1", "held"},                       // a field missing
		{`a 0 1 "1"`, "1", "held"},                   // no such term
		{`a 3 -1 "1"`, "1", "held"},                  // no such session term
		{`a x 1 "1"`, "1", "held"},                   // does not read
		{`a/../b 3 1 "1"`, "1", "held"},              // not a shard's name
		{`a 9223372036854775808 1 "1"`, "1", "held"}, // out of range
		{`a 3 1 "1" more`, "1", "held"},              // a field too many
	} {
		_, err := ParseHeld(bad.text, bad.count, bad.role)
		assert.Error(t, err, "%q", bad.text)
	}
}

func TestHeldLinesReadBackAndSayWhyNot(t *testing.T) {
	t.Parallel()
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

// An entry's lease ID is the one its session derived: its claim's, or its
// giver's for a shard handed to it.
func TestHeldLeaseIDIsTheOneItsSessionDerived(t *testing.T) {
	t.Parallel()
	assert.Equal(t, ClaimLeaseID("s", 4, "a", 9), Held{Name: "a", Term: 9, Gen: 4}.LeaseID("s"))
	assert.Equal(t, HandoffLeaseID("s", "a", 9), Held{Name: "a", Term: 9}.LeaseID("s"))
	assert.NotEqual(t, ClaimLeaseID("s", 4, "a", 9), ClaimLeaseID("s", 4, "a", 10), "each term its own")
	assert.NotEqual(t, ClaimLeaseID("s", 4, "a", 9), ClaimLeaseID("t", 4, "a", 9), "each session its own")
}
