package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// The text a ShardOwner writes about shards follows rules shared by the
// library and leaderctl: what a shard name may be, how a line of a
// session's held list reads (HeldLine), and an entry of a handoff note
// (NoteEntry). What the library refuses or skips, leaderctl explains.

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
