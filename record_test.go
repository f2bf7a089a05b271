package leaderelection

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func md(kv ...string) map[string]*string {
	out := map[string]*string{}
	for i := 0; i < len(kv); i += 2 {
		v := kv[i+1]
		out[kv[i]] = &v
	}
	return out
}

// A record is read as data: what does not read is reported with the blob,
// the key and the value, and nothing is built on it.
func TestReadRecordReportsWhatDoesNotRead(t *testing.T) {
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
		{"valid", md(metaTerm, "7", metaLeaseDuration, "5s", metaIdentity, "a"), 7, false, 5 * time.Second, ""},
		{"garbage term", md(metaTerm, "seven"), 0, true, 0, metaTerm},
		{"negative term", md(metaTerm, "-3"), 0, true, 0, metaTerm},
		{"term past int64", md(metaTerm, "9223372036854775808"), 0, true, 0, metaTerm},
		{"largest term reads", md(metaTerm, "9223372036854775807"), math.MaxInt64, false, 0, ""},
		{"absurd duration", md(metaTerm, "1", metaLeaseDuration, "2562047h"), 1, false, 24 * time.Hour, metaLeaseDuration},
		{"unreadable duration", md(metaLeaseDuration, "soon"), 0, false, 24 * time.Hour, metaLeaseDuration},
		{"too short a duration", md(metaLeaseDuration, "1ms"), 0, false, 24 * time.Hour, metaLeaseDuration},
		{"longest valid", md(metaLeaseDuration, "24h"), 0, false, 24 * time.Hour, ""},
		{"case-insensitive", md("LeaderTerm", "x"), 0, true, 0, metaTerm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readRecord("c", "b", tc.md)
			assert.Equal(t, tc.number, r.term.Number)
			assert.Equal(t, tc.termBad, r.termBad)
			assert.Equal(t, tc.declared, r.declared)
			if tc.key == "" {
				assert.Nil(t, r.problem)
				return
			}
			require.NotNil(t, r.problem)
			assert.Equal(t, tc.key, r.problem.Key)
			assert.ErrorIs(t, r.problem, ErrMalformedRecord)
			assert.Contains(t, r.problem.Error(), "c/b")
			assert.Contains(t, r.problem.Error(), tc.key+"=")
		})
	}
}

// A follower times a holder that declared more than any setting can, or
// something that does not read, as the longest valid lease: never forever,
// never sooner than that holder could have stopped.
func TestSilenceOfAnAbsurdDeclarationIsTheLongestValid(t *testing.T) {
	t.Parallel()
	for _, declared := range []string{"2562047h", "forever", "0s"} {
		r := readRecord("c", "b", md(metaTerm, "3", metaIdentity, "x", metaLeaseDuration, declared))
		now := time.Now()
		info := LeaseInfo{State: lease.StateTypeLeased, Kind: ETagLease, ETag: "\"e\"", Received: now, DeclaredDuration: r.declared}
		var w silenceWatch
		assert.Equal(t, now.Add(24*time.Hour), w.observe(info, 5*time.Second), "declared %q", declared)
	}
}

// No term follows the largest number: the fencing token never wraps.
func TestNextTermNeverOverflowsOrGoesBelowTheFloor(t *testing.T) {
	t.Parallel()
	n, ok := nextTerm(4, 0)
	assert.Equal(t, int64(5), n)
	assert.True(t, ok)
	n, ok = nextTerm(1, 9)
	assert.Equal(t, int64(10), n, "a blob created again continues above the highest term seen")
	assert.True(t, ok)
	_, ok = nextTerm(math.MaxInt64, 0)
	assert.False(t, ok)
	_, ok = nextTerm(0, math.MaxInt64)
	assert.False(t, ok)
	err := termCannotGrow("c", "b", math.MaxInt64)
	assert.True(t, errors.Is(err, ErrMalformedRecord))
	assert.Contains(t, err.Error(), "9223372036854775807")
}

// Names that would put one owner's blobs among another's are refused when
// the owner is built.
func TestNamesAmongAShardOwnersBlobsAreRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		prefix bool
		bad    bool
	}{
		{"jobs", false, false},
		{"shards", false, false},
		{"shards/x", false, false},  // no owner has an empty prefix
		{"a/shards", false, false},  // the directory itself is no blob of the owner's
		{"a/shards/x", false, true}, // owner "a"'s shard "x"
		{"a/b/sessions/x", false, true},
		{"jobs", true, false},
		{"a/shards", true, true}, // its sessions would be owner "a"'s shard "sessions/<id>"
		{"a/sessions/b", true, true},
		{"shards", true, false},
	} {
		err := checkOwnName(tc.name, tc.prefix)
		if !tc.bad {
			assert.NoError(t, err, "%q prefix=%v", tc.name, tc.prefix)
			continue
		}
		var se *SettingsError
		if assert.ErrorAs(t, err, &se, "%q prefix=%v", tc.name, tc.prefix) {
			assert.Equal(t, "Blob", se.Field)
			assert.True(t, strings.Contains(err.Error(), "ShardOwner"), err.Error())
		}
	}
	s := testSettings(t)
	s.Blob = "app/shards/x"
	_, err := NewBlobDistributedMutex(s, untilCancelled)
	assert.ErrorContains(t, err, "Blob")
	s.Blob = "app/sessions"
	_, err = NewShardOwner(s, []string{"a"}, func(context.Context, string) error { return nil })
	assert.ErrorContains(t, err, "Blob")
}
