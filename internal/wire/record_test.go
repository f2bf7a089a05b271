package wire

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A record is read as data: what does not read is reported with the key
// and the value, and nothing is built on it.
func TestParseRecordReportsWhatDoesNotRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		md       map[string]*string
		number   int64
		termBad  bool
		declared time.Duration
		key      string // the key reported, "" for none
	}{
		{"none", md(), 0, false, 0, ""},
		{"valid", md(MetaTerm, "7", MetaLeaseDuration, "5s", MetaIdentity, "a"), 7, false, 5 * time.Second, ""},
		{"garbage term", md(MetaTerm, "seven"), 0, true, 0, MetaTerm},
		{"negative term", md(MetaTerm, "-3"), 0, true, 0, MetaTerm},
		{"term past int64", md(MetaTerm, "9223372036854775808"), 0, true, 0, MetaTerm},
		{"largest term reads", md(MetaTerm, "9223372036854775807"), math.MaxInt64, false, 0, ""},
		{"absurd duration", md(MetaTerm, "1", MetaLeaseDuration, "2562047h"), 1, false, 24 * time.Hour, MetaLeaseDuration},
		{"unreadable duration", md(MetaLeaseDuration, "soon"), 0, false, 24 * time.Hour, MetaLeaseDuration},
		{"too short a duration", md(MetaLeaseDuration, "1ms"), 0, false, 24 * time.Hour, MetaLeaseDuration},
		{"longest valid", md(MetaLeaseDuration, "24h"), 0, false, 24 * time.Hour, ""},
		{"case-insensitive", md("LeaderTerm", "x"), 0, true, 0, MetaTerm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ParseRecord(tc.md)
			assert.Equal(t, tc.number, r.Term.Number)
			assert.Equal(t, tc.termBad, r.TermBad)
			assert.Equal(t, tc.declared, r.Declared)
			if tc.key == "" {
				assert.Nil(t, r.Problem)
				return
			}
			require.NotNil(t, r.Problem)
			assert.Equal(t, tc.key, r.Problem.Key)
		})
	}
}

// No term follows the largest number: the fencing token never wraps.
func TestNextTermNeverOverflowsOrGoesBelowTheFloor(t *testing.T) {
	t.Parallel()
	n, ok := NextTerm(4, 0)
	assert.Equal(t, int64(5), n)
	assert.True(t, ok)
	n, ok = NextTerm(1, 9)
	assert.Equal(t, int64(10), n, "a blob created again continues above the highest term seen")
	assert.True(t, ok)
	_, ok = NextTerm(math.MaxInt64, 0)
	assert.False(t, ok)
	_, ok = NextTerm(0, math.MaxInt64)
	assert.False(t, ok)
}
