package memblob

import (
	"slices"
	"testing"
	"unicode/utf16"
)

// TestCompareNamesIsUTF16Order checks compareNames against its definition,
// the order of the names' UTF-16 code units, on every pair of names that
// mix the characters where UTF-8 and UTF-16 disagree.
func TestCompareNamesIsUTF16Order(t *testing.T) {
	parts := []string{"", "a", "\u00e9", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uff21", "\uffff",
		"\U00010000", "\U0001F600", "\U0010FFFF"}
	var all []string
	for _, x := range parts {
		for _, y := range parts {
			all = append(all, x+y, "a"+x+y)
		}
	}
	sign := func(n int) int { return min(max(n, -1), 1) }
	for _, a := range all {
		for _, b := range all {
			want := slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
			if got := compareNames(a, b); sign(got) != want {
				t.Errorf("compareNames(%+q, %+q) = %d, want %d", a, b, got, want)
			}
		}
	}
}
