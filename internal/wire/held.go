package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// A session's held list, P/held/<session>: one line per shard it runs,
// "name term gen ETag" (HeldLine), joined by newlines, in a block blob whose
// metadata carries its role and its count of lines (HeldMetadata). The
// survivors of a session read it when it dies (see the top of the library's
// heldlist.go); a list that does not read whole is refused whole (ParseHeld).

// MaxHeldBytes is the longest held list read: a longer one is not read.
const MaxHeldBytes = 4 << 20

// HeldBlob is the held list of session under prefix.
func HeldBlob(prefix, session string) string { return prefix + HeldDir + session }

// Held is one line of a held list: a shard the session runs.
type Held struct {
	Name string
	Term int64 // the shard's term, from 1
	// Gen is the session's term its claim derived the shard's lease ID
	// from; 0: the shard was handed to it.
	Gen  int64
	ETag string // of the record the session runs the shard under
}

// LeaseID is the lease ID the holder session derived for the shard of e:
// its claim's (ClaimLeaseID), or, handed to it, its giver's
// (HandoffLeaseID).
func (e Held) LeaseID(session string) string {
	if e.Gen == 0 {
		return HandoffLeaseID(session, e.Name, e.Term)
	}
	return ClaimLeaseID(session, e.Gen, e.Name, e.Term)
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

// HeldMetadata is the metadata of the held list text: its role, and how many
// lines it has, which a reader checks, so that a list cut short is refused.
func HeldMetadata(text string) map[string]*string {
	role := RoleHeld
	count := strconv.Itoa(strings.Count(text, "\n") + 1)
	if text == "" {
		count = "0"
	}
	return map[string]*string{MetaRole: &role, MetaHeld: &count}
}

// ParseHeld reads a list as the library writes it (HeldLine, HeldMetadata);
// count and role are its metadata. Anything else is refused whole.
func ParseHeld(text, count, role string) ([]Held, error) {
	if role != RoleHeld {
		return nil, fmt.Errorf("leaderelection: a list of held shards whose %s is %q, not %q", MetaRole, role, RoleHeld)
	}
	var out []Held
	if text != "" {
		for i, line := range strings.Split(text, "\n") {
			e, why := ParseHeldLine(line)
			if why != "" {
				return nil, fmt.Errorf("leaderelection: a list of held shards whose line %d does not read: %q: %s", i+1, line, why)
			}
			out = append(out, e)
		}
	}
	if strconv.Itoa(len(out)) != count {
		return nil, fmt.Errorf("leaderelection: a list of held shards with %d entries, which says it has %q", len(out), count)
	}
	return out, nil
}
