package wire

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The golden values below are what the library's root package wrote and
// read, for these inputs, before the wire format moved here (at 94c504b):
// each was computed by the root's own functions (recordMetadata,
// createMetadata, endedMetadata, readRecord, listedItem, nextTerm,
// handoffLeaseID, claimLeaseID, the names, parseHeld, parseNote) or, where
// the root built the value inline (a session's and a shard's record, a held
// list's and a note's metadata, a note's parts), by its lines as they were.
// The times the root took from its clock were taken in a synctest bubble,
// whose clock starts at goldenAt. A change here is a change of the wire
// format: every version of the fleet reads what the others write.

var (
	goldenAt    = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	goldenSince = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
)

func tm(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// plain is md with its values, for comparing ("<nil>" for a nil one).
func plain(md map[string]*string) map[string]string {
	out := make(map[string]string, len(md))
	for k, v := range md {
		out[k] = "<nil>"
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// sessionMetadata is a session's record as its renewals write it: its term
// record and its fields.
func sessionMetadata(f SessionFields, d time.Duration) map[string]*string {
	md := RecordMetadata(Term{7, "node-a", goldenSince}, d, RoleSession)
	f.Put(md)
	return md
}

func TestGoldenMetadata(t *testing.T) {
	t.Parallel()
	at, since := goldenAt, goldenSince
	for _, tc := range []struct {
		name string
		got  map[string]*string
		want map[string]string
	}{
		{"mutex record", RecordMetadata(Term{7, "node-a", since}, 15*time.Second, RoleMutex), map[string]string{"leaderidentity": "node-a", "leaderkind": "mutex", "leaderleaseduration": "15s", "leadersince": "2024-05-06T07:08:09.123456789Z", "leaderterm": "7"}},
		{"etag record without role", RecordMetadata(Term{7, "node-a", since}, 90*time.Minute, ""), map[string]string{"leaderidentity": "node-a", "leaderkind": "", "leaderleaseduration": "1h30m0s", "leadersince": "2024-05-06T07:08:09.123456789Z", "leaderterm": "7"}},
		{"first term, zero since", RecordMetadata(Term{Number: 1, Identity: "x y"}, 3*time.Second, RoleSession), map[string]string{"leaderidentity": "x y", "leaderkind": "session", "leaderleaseduration": "3s", "leadersince": "0001-01-01T00:00:00Z", "leaderterm": "1"}},
		{"largest term", RecordMetadata(Term{math.MaxInt64, "z", since}, 24*time.Hour, RoleShard), map[string]string{"leaderidentity": "z", "leaderkind": "shard", "leaderleaseduration": "24h0m0s", "leadersince": "2024-05-06T07:08:09.123456789Z", "leaderterm": "9223372036854775807"}},
		{"create, no floor", CreateMetadata(RoleMutex, 0, at), map[string]string{"leaderkind": "mutex"}},
		{"create, floor", CreateMetadata(RoleShard, 41, at), map[string]string{"leaderended": "2000-01-01T00:00:00Z", "leaderkind": "shard", "leaderrecreated": "2000-01-01T00:00:00Z", "leaderterm": "41"}},
		{"create, no role, floor", CreateMetadata("", 5, at), map[string]string{"leaderended": "2000-01-01T00:00:00Z", "leaderrecreated": "2000-01-01T00:00:00Z", "leaderterm": "5"}},
		{"create, no role, no floor", CreateMetadata("", 0, at), map[string]string{}},
		{"seed, floor, longest", SeedMetadata(RoleMutex, 41, 5*time.Minute, at), map[string]string{"leaderended": "2000-01-01T00:00:00Z", "leaderkind": "mutex", "leaderlongest": "5m0s", "leaderrecreated": "2000-01-01T00:00:00Z", "leaderterm": "41"}},
		{"seed, no floor", SeedMetadata(RoleMutex, 0, 5*time.Minute, at), map[string]string{"leaderkind": "mutex", "leaderlongest": "5m0s", "leaderrecreated": "2000-01-01T00:00:00Z"}},
		{"seed, no longest", SeedMetadata(RoleMutex, 3, 0, at), map[string]string{"leaderended": "2000-01-01T00:00:00Z", "leaderkind": "mutex", "leaderrecreated": "2000-01-01T00:00:00Z", "leaderterm": "3"}},
		{"ended", EndedMetadata(RoleSession, 12, at), map[string]string{"leaderended": "2000-01-01T00:00:00Z", "leaderkind": "session", "leaderterm": "12"}},
		{"ended, no term", EndedMetadata(RoleHeld, 0, at), map[string]string{"leaderkind": "held"}},
		{"shard record, claimed", ShardMetadata(Term{7, "node-a", since}, time.Hour, "s-1", 3), map[string]string{"leaderclaimgen": "3", "leaderidentity": "node-a", "leaderkind": "shard", "leaderleaseduration": "1h0m0s", "leadersession": "s-1", "leadersince": "2024-05-06T07:08:09.123456789Z", "leaderterm": "7"}},
		{"shard record, handed", ShardMetadata(Term{7, "node-a", since}, time.Hour, "s-1", 0), map[string]string{"leaderidentity": "node-a", "leaderkind": "shard", "leaderleaseduration": "1h0m0s", "leadersession": "s-1", "leadersince": "2024-05-06T07:08:09.123456789Z", "leaderterm": "7"}},
		{"session record", sessionMetadata(SessionFields{Owned: 12, Set: "0123456789abcdef", Size: 100, Handing: 2, Seen: 99, Longest: 45 * time.Second}, 30*time.Second), map[string]string{"leaderhanding": "2", "leaderidentity": "node-a", "leaderkind": "session", "leaderleaseduration": "30s", "leaderlongest": "45s", "leaderseen": "99", "leadershardcount": "100", "leadershards": "12", "leadershardset": "0123456789abcdef", "leadersince": "2024-05-06T07:08:09.123456789Z", "leaderterm": "7"}},
		{"session record, leaving, inherited", sessionMetadata(SessionFields{Owned: 5, Size: 0, Leaving: true, Longest: 30 * time.Second}, 30*time.Second), map[string]string{"leaderhanding": "0", "leaderidentity": "node-a", "leaderkind": "session", "leaderleaseduration": "30s", "leaderleaving": "true", "leaderlongest": "30s", "leaderseen": "0", "leadershardcount": "0", "leadershards": "5", "leadershardset": "", "leadersince": "2024-05-06T07:08:09.123456789Z", "leaderterm": "7"}},
		{"held list", HeldMetadata("a 1 0 \"e\"\nb 2 3 \"f\""), map[string]string{"leaderheld": "2", "leaderkind": "held"}},
		{"held list, one", HeldMetadata("a 1 0 \"e\""), map[string]string{"leaderheld": "1", "leaderkind": "held"}},
		{"held list, empty", HeldMetadata(""), map[string]string{"leaderheld": "0", "leaderkind": "held"}},
		{"note", NoteMetadata("s1 3 \"0x1\";s2 4 \"0x2\""), map[string]string{"leaderhandoff": "s1 3 \"0x1\";s2 4 \"0x2\"", "leaderkind": "handoff"}},
	} {
		assert.Equal(t, tc.want, plain(tc.got), tc.name)
	}
}

func TestGoldenRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		md   map[string]*string
		want Record
	}{
		{"none", md(), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "", Problem: nil, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"nil value", map[string]*string{MetaTerm: nil}, Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "", Problem: nil, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"full", md(MetaTerm, "7", MetaIdentity, "node-a", MetaSince, "2024-05-06T07:08:09.123456789Z", MetaLeaseDuration, "15s", MetaRole, "mutex", MetaPriority, "3", MetaNext, "b"), Record{Term: Term{Number: 7, Identity: "node-a", Since: tm("2024-05-06T07:08:09.123456789Z")}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 15000000000, Role: "mutex", Problem: nil, TermBad: false, Priority: 3, Prioritized: true, Next: "b"}},
		{"ended, recreated", md(MetaTerm, "41", MetaEnded, "2000-01-01T00:00:00Z", MetaRecreated, "2000-01-01T00:00:00Z", MetaRole, "shard"), Record{Term: Term{Number: 41, Identity: "", Since: time.Time{}}, Ended: tm("2000-01-01T00:00:00Z"), EndMark: true, Recreated: tm("2000-01-01T00:00:00Z"), Declared: 0, Role: "shard", Problem: nil, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"end mark that does not read", md(MetaEnded, "yesterday"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: true, Recreated: time.Time{}, Declared: 0, Role: "", Problem: nil, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"garbage term", md(MetaTerm, "seven"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "", Problem: &Problem{Key: "leaderterm", Value: "seven", Rule: "is not a term number (0 to 9223372036854775807): no term can follow it until it is repaired"}, TermBad: true, Priority: 0, Prioritized: false, Next: ""}},
		{"negative term", md(MetaTerm, "-3"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "", Problem: &Problem{Key: "leaderterm", Value: "-3", Rule: "is not a term number (0 to 9223372036854775807): no term can follow it until it is repaired"}, TermBad: true, Priority: 0, Prioritized: false, Next: ""}},
		{"term past int64", md(MetaTerm, "9223372036854775808"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "", Problem: &Problem{Key: "leaderterm", Value: "9223372036854775808", Rule: "is not a term number (0 to 9223372036854775807): no term can follow it until it is repaired"}, TermBad: true, Priority: 0, Prioritized: false, Next: ""}},
		{"largest term", md(MetaTerm, "9223372036854775807"), Record{Term: Term{Number: 9223372036854775807, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "", Problem: nil, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"term with plus", md(MetaTerm, "+5"), Record{Term: Term{Number: 5, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "", Problem: nil, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"absurd duration", md(MetaTerm, "1", MetaLeaseDuration, "2562047h"), Record{Term: Term{Number: 1, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 86400000000000, DeclaredBad: true, Role: "", Problem: &Problem{Key: "leaderleaseduration", Value: "2562047h", Rule: "is longer than any setting declares: timed as 24h0m0s"}, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"unreadable duration", md(MetaLeaseDuration, "soon"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 86400000000000, DeclaredBad: true, Role: "", Problem: &Problem{Key: "leaderleaseduration", Value: "soon", Rule: "is not a lease duration any setting declares (3s to 24h0m0s): timed as 24h0m0s"}, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"too short a duration", md(MetaLeaseDuration, "1ms"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 86400000000000, DeclaredBad: true, Role: "", Problem: &Problem{Key: "leaderleaseduration", Value: "1ms", Rule: "is not a lease duration any setting declares (3s to 24h0m0s): timed as 24h0m0s"}, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"shortest", md(MetaLeaseDuration, "3s"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 3000000000, Role: "", Problem: nil, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"longest", md(MetaLeaseDuration, "24h"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 86400000000000, Role: "", Problem: nil, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"seed with the longest declared", md(MetaTerm, "9", MetaRecreated, "2000-01-01T00:00:00Z", MetaLongest, "5m0s"), Record{Term: Term{Number: 9}, Recreated: tm("2000-01-01T00:00:00Z"), Longest: 5 * time.Minute}},
		{"seed whose longest does not read", md(MetaTerm, "9", MetaLongest, "2s"), Record{Term: Term{Number: 9}, LongestBad: "2s"}},
		{"created again, its longest does not read", md(MetaTerm, "9", MetaRecreated, "2000-01-01T00:00:00Z", MetaLongest, "ever"), Record{Term: Term{Number: 9}, Recreated: tm("2000-01-01T00:00:00Z"), LongestBad: "ever", Problem: &Problem{Key: "leaderlongest", Value: "ever", Rule: "is not a lease duration any setting declares (3s to 24h0m0s): the blob created again is waited for as if a holder had declared 24h0m0s, until it is repaired or raised by an instance that saw a higher term"}}},
		{"bad term and duration", md(MetaLeaseDuration, "0s", MetaTerm, "x"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 86400000000000, DeclaredBad: true, Role: "", Problem: &Problem{Key: "leaderterm", Value: "x", Rule: "is not a term number (0 to 9223372036854775807): no term can follow it until it is repaired"}, TermBad: true, Priority: 0, Prioritized: false, Next: ""}},
		{"case-insensitive", md("LeaderTerm", "x", "LEADERKIND", "session"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "session", Problem: &Problem{Key: "leaderterm", Value: "x", Rule: "is not a term number (0 to 9223372036854775807): no term can follow it until it is repaired"}, TermBad: true, Priority: 0, Prioritized: false, Next: ""}},
		{"bad priority, bad since", md(MetaPriority, "high", MetaSince, "noon", MetaIdentity, " a "), Record{Term: Term{Number: 0, Identity: " a ", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "", Problem: nil, TermBad: false, Priority: 0, Prioritized: false, Next: ""}},
		{"negative priority", md(MetaPriority, "-2"), Record{Term: Term{Number: 0, Identity: "", Since: time.Time{}}, Ended: time.Time{}, EndMark: false, Recreated: time.Time{}, Declared: 0, Role: "", Problem: nil, TermBad: false, Priority: -2, Prioritized: true, Next: ""}},
	} {
		got := ParseRecord(tc.md)
		// Times compare by their instant (time.Parse keeps no monotonic
		// reading, but may keep a location).
		assert.True(t, tc.want.Term.Since.Equal(got.Term.Since), "%s: since %v", tc.name, got.Term.Since)
		assert.True(t, tc.want.Ended.Equal(got.Ended), "%s: ended %v", tc.name, got.Ended)
		assert.True(t, tc.want.Recreated.Equal(got.Recreated), "%s: recreated %v", tc.name, got.Recreated)
		got.Term.Since, got.Ended, got.Recreated = tc.want.Term.Since, tc.want.Ended, tc.want.Recreated
		assert.Equal(t, tc.want, got, tc.name)
	}
}

func TestGoldenListed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		md   map[string]*string
		want Listed
	}{
		{"none", md(), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "", LongestBad: "", Session: "", Gen: 0}},
		{"session", md(MetaOwned, "12", MetaSet, "abc", MetaSetCount, "100", MetaHanding, "2", MetaSeen, "99", MetaLongest, "45s", MetaLeaving, "true"), Listed{SessionFields: SessionFields{Owned: 12, Set: "abc", Size: 100, Handing: 2, Seen: 99, Longest: 45000000000, Leaving: true}, SeenBad: "", LongestBad: "", Session: "", Gen: 0}},
		{"zeros", md(MetaOwned, "0", MetaSetCount, "0", MetaHanding, "0", MetaSeen, "0", MetaLeaving, "false"), Listed{SessionFields: SessionFields{Owned: 0, Set: "", Size: 0, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "", LongestBad: "", Session: "", Gen: 0}},
		{"negatives", md(MetaOwned, "-1", MetaSetCount, "-4", MetaHanding, "-2", MetaSeen, "-1", MetaClaimGen, "-3"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "-1", LongestBad: "", Session: "", Gen: 0}},
		{"garbage", md(MetaOwned, "x", MetaSetCount, "1.5", MetaHanding, "two", MetaSeen, "lots", MetaLongest, "ever", MetaClaimGen, "g", MetaLeaving, "TRUE"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "lots", LongestBad: "ever", Session: "", Gen: 0}},
		{"seen at the limit", md(MetaSeen, "9007199254740992"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 9007199254740992, Longest: 0, Leaving: false}, SeenBad: "", LongestBad: "", Session: "", Gen: 0}},
		{"seen past the limit", md(MetaSeen, "9007199254740993"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "9007199254740993", LongestBad: "", Session: "", Gen: 0}},
		{"longest bounds", md(MetaLongest, "3s"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 3000000000, Leaving: false}, SeenBad: "", LongestBad: "", Session: "", Gen: 0}},
		{"longest too short", md(MetaLongest, "2s"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "", LongestBad: "2s", Session: "", Gen: 0}},
		{"longest too long", md(MetaLongest, "25h"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "", LongestBad: "25h", Session: "", Gen: 0}},
		{"longest at most", md(MetaLongest, "24h"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 86400000000000, Leaving: false}, SeenBad: "", LongestBad: "", Session: "", Gen: 0}},
		{"empty values", md(MetaSeen, "", MetaLongest, "", MetaOwned, ""), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "", LongestBad: "", Session: "", Gen: 0}},
		{"shard", md(MetaSession, "s-1", MetaClaimGen, "4"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "", LongestBad: "", Session: "s-1", Gen: 4}},
		{"shard, gen 0", md(MetaSession, "s-1", MetaClaimGen, "0"), Listed{SessionFields: SessionFields{Owned: -1, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "", LongestBad: "", Session: "s-1", Gen: 0}},
		{"case-insensitive", md("LeaderShards", "3", "LEADERSESSION", "S"), Listed{SessionFields: SessionFields{Owned: 3, Set: "", Size: -1, Handing: 0, Seen: 0, Longest: 0, Leaving: false}, SeenBad: "", LongestBad: "", Session: "S", Gen: 0}},
	} {
		assert.Equal(t, tc.want, ParseListed(tc.md), tc.name)
	}
}

func TestGoldenNextTerms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prev, floor, want int64
		ok                bool
	}{
		{0, 0, 1, true},
		{4, 0, 5, true},
		{1, 9, 10, true},
		{9, 1, 10, true},
		{9223372036854775806, 0, 9223372036854775807, true},
		{9223372036854775807, 0, 0, false},
		{0, 9223372036854775807, 0, false},
		{-5, 0, 1, true},
	} {
		n, ok := NextTerm(tc.prev, tc.floor)
		assert.Equal(t, tc.want, n, "%d, %d", tc.prev, tc.floor)
		assert.Equal(t, tc.ok, ok, "%d, %d", tc.prev, tc.floor)
	}
}

func TestGoldenNamesAndLeaseIDs(t *testing.T) {
	t.Parallel()
	for _, tc := range [][2]string{
		{HandoffLeaseID("s-1", "shard-00001", 7), "e07da997-1abd-64d6-0546-b2aa3fa5a751"},
		{HandoffLeaseID("", "", 0), "6001e46c-b3cc-598b-94de-ea77169dc2e6"},
		{ClaimLeaseID("s-1", 3, "shard-00001", 7), "0835bd8c-2555-c3aa-05b2-b5f155620d72"},
		{ClaimLeaseID("c96f0cba-ff7e-4c9f-8a92-818c89139eb7", 1, "t/a:b", math.MaxInt64), "293b733c-55b0-c137-a9a4-82073905df0c"},
		{SessionBlob("jobs/", "s-1"), "jobs/sessions/s-1"},
		{ShardBlob("jobs/", "t/a"), "jobs/shards/t/a"},
		{HeldBlob("jobs/", "s-1"), "jobs/held/s-1"},
		{NotePrefix("jobs/", "r"), "jobs/handoff/r/"},
		{NoteName("jobs/", "r", "g-1"), "jobs/handoff/r/g-1-0"},
		{NoteSender("jobs/handoff/r/", "jobs/handoff/r/g-1-0"), "g-1"},
		{NoteSender("jobs/handoff/r/", "jobs/handoff/r/g-1-0.2"), "g-1"},
		{NoteSender("jobs/handoff/r/", "jobs/handoff/r/-0"), ""},
		{NoteSender("jobs/handoff/r/", "jobs/handoff/r/g"), ""},
		{NoteSender("jobs/handoff/r/", "other/x-0"), "other/x"},
		{NoteSender("jobs/handoff/r/", "jobs/handoff/r/a/b-0"), "a/b"},
	} {
		assert.Equal(t, tc[1], tc[0])
	}
}

func TestGoldenHeldLists(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text, count, role string
		want              []Held
		err               string
	}{
		{"a 3 0 \"0x1\"\nb 7 2 \"0x2\"", "2", "held", []Held{{"a", 3, 0, "\"0x1\""}, {"b", 7, 2, "\"0x2\""}}, ""},
		{"", "0", "held", nil, ""},
		{"", "1", "held", nil, "leaderelection: a list of held shards with 0 entries, which says it has \"1\""},
		{"a 3 0 \"0x1\"", "1", "", nil, "leaderelection: a list of held shards whose leaderkind is \"\", not \"held\""},
		{"a 3 0 \"0x1\"", "1", "mutex", nil, "leaderelection: a list of held shards whose leaderkind is \"mutex\", not \"held\""},
		{"a 3 0 \"1\"\nb 7 2 \"2\"", "3", "held", nil, "leaderelection: a list of held shards with 2 entries, which says it has \"3\""},
		{"a 3 0", "1", "held", nil, "leaderelection: a list of held shards whose line 1 does not read: \"a 3 0\": want 4 fields (name term gen ETag), got 3"},
		{"a 0 1 \"1\"", "1", "held", nil, "leaderelection: a list of held shards whose line 1 does not read: \"a 0 1 \\\"1\\\"\": the term \"0\" is not a number from 1"},
		{"a 3 -1 \"1\"", "1", "held", nil, "leaderelection: a list of held shards whose line 1 does not read: \"a 3 -1 \\\"1\\\"\": the gen \"-1\" is not a number from 0"},
		{"a x 1 \"1\"", "1", "held", nil, "leaderelection: a list of held shards whose line 1 does not read: \"a x 1 \\\"1\\\"\": the term \"x\" is not a number from 1"},
		{"a/../b 3 1 \"1\"", "1", "held", nil, "leaderelection: a list of held shards whose line 1 does not read: \"a/../b 3 1 \\\"1\\\"\": the shard name '/' must separate non-empty segments other than . and .."},
		{"a 9223372036854775808 1 \"1\"", "1", "held", nil, "leaderelection: a list of held shards whose line 1 does not read: \"a 9223372036854775808 1 \\\"1\\\"\": the term \"9223372036854775808\" is not a number from 1"},
		{"a 3 1 \"1\" more", "1", "held", nil, "leaderelection: a list of held shards whose line 1 does not read: \"a 3 1 \\\"1\\\" more\": want 4 fields (name term gen ETag), got 5"},
		{"a 3 1 \"1\"\n", "2", "held", nil, "leaderelection: a list of held shards whose line 2 does not read: \"\": want 4 fields (name term gen ETag), got 0"},
		{"  a   3 1 \"1\"  ", "1", "held", []Held{{"a", 3, 1, "\"1\""}}, ""},
		{"a 3 1 \"1\"", "01", "held", nil, "leaderelection: a list of held shards with 1 entries, which says it has \"01\""},
	} {
		got, err := ParseHeld(tc.text, tc.count, tc.role)
		assert.Equal(t, tc.want, got, "%q", tc.text)
		if tc.err == "" {
			assert.NoError(t, err, "%q", tc.text)
		} else {
			assert.EqualError(t, err, tc.err, "%q", tc.text)
		}
	}
}

func TestGoldenNotes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		entries string
		want    []Handed
	}{
		{"", nil},
		{"s1 3 \"0x1\"", []Handed{{"s1", 3, "\"0x1\""}}},
		{"s1 3 \"0x1\";s2 4 \"0x2\"", []Handed{{"s1", 3, "\"0x1\""}, {"s2", 4, "\"0x2\""}}},
		{"s1 3 \"0x1\";;bad;s2 0 \"e\"; s3 5 \"e\" ", []Handed{{"s1", 3, "\"0x1\""}, {"s3", 5, "\"e\""}}},
		{"s* 1 \"e\";a.b 2 \"e\"", []Handed{{"a.b", 2, "\"e\""}}},
		{";", nil},
	} {
		assert.Equal(t, tc.want, ParseNote(tc.entries), "%q", tc.entries)
	}
}

// A note's parts, by their length and count of entries, for n shards
// handed at once (names shard-00000..., ETags of Azure's length).
func TestGoldenNoteParts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		want string
	}{
		{0, ""},
		{1, "33:1"},
		{2, "67:2"},
		{150, "5291:150"},
		{151, "5327:151"},
		{400, "6119:173 6119:170 2051:57"},
	} {
		var hs []Handed
		for i := range tc.n {
			hs = append(hs, Handed{Name: fmt.Sprintf("shard-%05d", i), Term: int64(i + 1), ETag: `"0x8DC0123456789AB"`})
		}
		var got []string
		for _, p := range NoteParts(hs) {
			got = append(got, strconv.Itoa(len(p))+":"+strconv.Itoa(strings.Count(p, ";")+1))
		}
		assert.Equal(t, tc.want, strings.Join(got, " "), "%d shards", tc.n)
	}
}
