package wire

import (
	"crypto/sha256"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What every kind of record is built with is read back as it was: the
// builders and the parsers agree, value for value.

func TestAMutexRecordReadsBack(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{MinDeclarable, 15 * time.Second, 90 * time.Minute, MaxDeclarable} {
		for _, term := range []Term{{1, "a", goldenSince}, {math.MaxInt64, "node-7 (x)", goldenSince.Add(time.Nanosecond)}} {
			r := ParseRecord(RecordMetadata(term, d, RoleMutex))
			assert.Nil(t, r.Problem)
			assert.False(t, r.TermBad)
			assert.Equal(t, term.Number, r.Term.Number)
			assert.Equal(t, term.Identity, r.Term.Identity)
			assert.True(t, term.Since.Equal(r.Term.Since))
			assert.Equal(t, d, r.Declared)
			assert.Equal(t, RoleMutex, r.Role)
			assert.False(t, r.EndMark)
			assert.False(t, r.Prioritized)
		}
	}
}

// A mutex holder with a priority adds it (and, once it chose one, the
// contender it hands the lease to); as it releases, its holder adds the end
// mark.
func TestAPrioritizedAndEndedRecordReadsBack(t *testing.T) {
	t.Parallel()
	m := RecordMetadata(Term{4, "a", goldenSince}, time.Minute, RoleMutex)
	p, next, ended := "-3", "b", goldenAt.Format(time.RFC3339Nano)
	m[MetaPriority], m[MetaNext], m[MetaEnded] = &p, &next, &ended
	r := ParseRecord(m)
	assert.Nil(t, r.Problem)
	assert.Equal(t, -3, r.Priority)
	assert.True(t, r.Prioritized)
	assert.Equal(t, "b", r.Next)
	assert.True(t, r.EndMark)
	assert.True(t, goldenAt.Equal(r.Ended))
	assert.Equal(t, int64(4), r.Term.Number)
}

func TestACreatedBlobsRecordReadsBack(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 2, 3, 4, 5, 6, 7, time.FixedZone("x", 3600))
	for _, role := range []string{"", RoleMutex, RoleSession, RoleShard} {
		r := ParseRecord(CreateMetadata(role, 0, at))
		assert.Equal(t, Record{Role: role}, r, "a first creation says only its role")
		r = ParseRecord(CreateMetadata(role, 41, at))
		assert.Nil(t, r.Problem)
		assert.Equal(t, role, r.Role)
		assert.Equal(t, int64(41), r.Term.Number, "the floor, as an ended term")
		assert.True(t, r.EndMark)
		assert.True(t, at.Equal(r.Ended))
		assert.True(t, at.Equal(r.Recreated), "marked as created again")
		r = ParseRecord(EndedMetadata(role, 9, at))
		assert.Equal(t, int64(9), r.Term.Number)
		assert.True(t, at.Equal(r.Ended))
		assert.True(t, r.Recreated.IsZero())
	}
}

func TestASessionsRecordReadsBack(t *testing.T) {
	t.Parallel()
	for _, f := range []SessionFields{
		{Owned: 0, Set: "", Size: 0, Longest: MinDeclarable},
		{Owned: 12, Set: "0123456789abcdef", Size: 10000, Handing: 3, Seen: 99, Longest: time.Hour, Leaving: true},
		{Owned: math.MaxInt32, Size: math.MaxInt32, Handing: math.MaxInt32, Seen: MaxSpreadTerm, Longest: MaxDeclarable},
	} {
		m := RecordMetadata(Term{3, "x", goldenSince}, 30*time.Second, RoleSession)
		f.Put(m)
		r := ParseRecord(m)
		assert.Nil(t, r.Problem)
		assert.Equal(t, RoleSession, r.Role)
		assert.Equal(t, 30*time.Second, r.Declared)
		l := ParseListed(m)
		assert.Equal(t, Listed{SessionFields: f}, l, "%+v", f)
	}
}

func TestAShardsRecordReadsBack(t *testing.T) {
	t.Parallel()
	for _, gen := range []int64{0, 1, math.MaxInt64} {
		term := Term{7, "x", goldenSince}
		m := ShardMetadata(term, time.Hour, "c96f0cba-ff7e-4c9f-8a92-818c89139eb7", gen)
		r := ParseRecord(m)
		assert.Nil(t, r.Problem)
		assert.Equal(t, RoleShard, r.Role)
		assert.Equal(t, term.Number, r.Term.Number)
		l := ParseListed(m)
		assert.Equal(t, "c96f0cba-ff7e-4c9f-8a92-818c89139eb7", l.Session)
		assert.Equal(t, gen, l.Gen)
		assert.Equal(t, -1, l.Owned, "no session's fields")
	}
}

func TestAHeldListReadsBack(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 2, 1000} {
		var want []Held
		var lines []string
		for i := range n {
			e := Held{Name: fmt.Sprintf("t/shard-%05d", i), Term: int64(i + 1), Gen: int64(i % 3), ETag: `"0x8DC0123456789AB"`}
			want = append(want, e)
			lines = append(lines, HeldLine(e))
		}
		text := strings.Join(lines, "\n")
		m := HeldMetadata(text)
		got, err := ParseHeld(text, Value(m, MetaHeld), Value(m, MetaRole))
		require.NoError(t, err, "%d", n)
		assert.Equal(t, want, got, "%d", n)
		if n > 0 {
			_, err := ParseHeld(text[:strings.LastIndexByte(text, '\n')+1], Value(m, MetaHeld), Value(m, MetaRole))
			assert.Error(t, err, "a list cut short is refused whole")
		}
	}
}

func TestANoteReadsBack(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 150, 151, 1000} {
		var want []Handed
		for i := range n {
			want = append(want, Handed{Name: fmt.Sprintf("tenant-%03d/shard-%05d", i%7, i), Term: int64(i)*1e9 + 1, ETag: `"0x8DC0123456789AB"`})
		}
		var got []Handed
		for _, part := range NoteParts(want) {
			assert.LessOrEqual(t, len(part), NoteBytes)
			m := NoteMetadata(part)
			assert.Equal(t, RoleHandoff, Value(m, MetaRole))
			got = append(got, ParseNote(Value(m, MetaNote))...)
		}
		assert.Equal(t, want, got, "%d", n)
	}
}

func TestNamesReadBack(t *testing.T) {
	t.Parallel()
	p := "tenants/eu/"
	assert.Equal(t, "tenants/eu/sessions/s", SessionBlob(p, "s"))
	assert.Equal(t, "tenants/eu/shards/a/b", ShardBlob(p, "a/b"))
	assert.Equal(t, "tenants/eu/held/s", HeldBlob(p, "s"))
	assert.True(t, strings.HasPrefix(NoteName(p, "r", "g"), NotePrefix(p, "r")))
	assert.Equal(t, "g", NoteSender(NotePrefix(p, "r"), NoteName(p, "r", "g")))
}

// The derived lease IDs are GUIDs, spelt as every version so far spelt
// them: the first 16 bytes of the SHA-256, formatted as a GUID with no bit
// changed (as uuid.FromBytes and String did in the root).
func TestDerivedLeaseIDsAreSpeltAsBefore(t *testing.T) {
	t.Parallel()
	for i := range 2000 {
		parts := []string{"leaderelection claim", fmt.Sprint("s", i), fmt.Sprint(i % 17), fmt.Sprintf("shard-%05d", i), fmt.Sprint(i * 7919)}
		sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
		id, err := uuid.FromBytes(sum[:16])
		require.NoError(t, err)
		assert.Equal(t, id.String(), derivedLeaseID(parts...))
	}
}
