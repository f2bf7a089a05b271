package leaderelection

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/wire"
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

// A record is read as data (wire.ParseRecord): what does not read is
// reported as a *RecordError naming the blob, the key and the value, and
// LeaseInfo carries it.
func TestReadRecordReportsWhatDoesNotRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		md   map[string]*string
		key  string // the key reported, "" for none
	}{
		{"none", md(), ""},
		{"valid", md(wire.MetaTerm, "7", wire.MetaLeaseDuration, "5s", wire.MetaIdentity, "a"), ""},
		{"garbage term", md(wire.MetaTerm, "seven"), wire.MetaTerm},
		{"absurd duration", md(wire.MetaTerm, "1", wire.MetaLeaseDuration, "2562047h"), wire.MetaLeaseDuration},
		{"case-insensitive", md("LeaderTerm", "x"), wire.MetaTerm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readRecord("c", "b", tc.md)
			var info LeaseInfo
			r.fill(&info)
			assert.Equal(t, r.problem, info.RecordError)
			if tc.key == "" {
				assert.Nil(t, r.problem)
				return
			}
			require.NotNil(t, r.problem)
			assert.Equal(t, RecordError{Container: "c", Blob: "b", Key: r.Problem.Key, Value: r.Problem.Value, Rule: r.Problem.Rule}, *r.problem)
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
		r := readRecord("c", "b", md(wire.MetaTerm, "3", wire.MetaIdentity, "x", wire.MetaLeaseDuration, declared))
		now := time.Now()
		info := LeaseInfo{State: lease.StateTypeLeased, Kind: ETagLease, ETag: "\"e\"", Received: now, DeclaredDuration: r.Declared}
		var w silenceWatch
		assert.Equal(t, now.Add(24*time.Hour), w.observe(info, 5*time.Second), "declared %q", declared)
	}
}

// No term follows the largest number (wire.NextTerm): a record that has it
// is one that cannot be built on.
func TestTermCannotGrowIsAMalformedRecord(t *testing.T) {
	t.Parallel()
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

// The public roles are the wire format's, spelled out in the root so that
// their documentation shows the value stored.
func TestTheRolesAreTheWireFormats(t *testing.T) {
	for role, wireRole := range map[BlobRole]string{RoleMutex: wire.RoleMutex, RoleSession: wire.RoleSession, RoleShard: wire.RoleShard,
		RoleHandoff: wire.RoleHandoff, RoleCandidate: wire.RoleCandidate, RoleHeld: wire.RoleHeld} {
		assert.Equal(t, wireRole, string(role))
	}
}
