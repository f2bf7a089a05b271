package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// A ShardOwner's blobs lie under its prefix P (BlobSettings.Blob and a
// slash): its sessions' blobs P/sessions/<ID>, its shards' P/shards/<name>,
// the sessions' held lists P/held/<session> (HeldBlob) and the notes of the
// shards handed to a session, P/handoff/<receiver>/... (NoteName). The
// library refuses a name that would put one owner's blobs among another's
// (its checkOwnName): these directories are reserved.
const (
	SessionsDir = "sessions/"
	ShardsDir   = "shards/"
	HeldDir     = "held/"
	HandoffDir  = "handoff/"
)

// CandidatesDir is where the blobs beside a mutex's lease lie,
// <blob>.candidates/<name>: a preferred candidate's, or a twin's mark (see
// the library's prefer.go).
const CandidatesDir = ".candidates/"

// SessionBlob is the blob of session id under prefix (which ends with a
// slash).
func SessionBlob(prefix, id string) string { return prefix + SessionsDir + id }

// ShardBlob is the blob of shard name under prefix.
func ShardBlob(prefix, name string) string { return prefix + ShardsDir + name }

// MaxSpreadTerm is the highest term the fleet's highest (the library's
// seenMax, fleetSeen: shardfloors.go) takes in, and so the highest a session's
// record may say its instance saw (MetaSeen): more than a claim a
// microsecond for 285 years could reach. A higher one is a repair's, or
// another writer's, and stays its shard's own: spread to every shard created
// again, a value near the largest number would leave each one's term no room
// to grow.
const MaxSpreadTerm = 1 << 53

// SessionFields is what a session's record says beyond its term record, as
// its renewals write it (Put).
type SessionFields struct {
	Owned   int           // how many shards it holds; -1 read: its record does not say
	Set     string        // its set's digest; "" read: none (an older version)
	Size    int           // how many shards its set has; -1 read: its record does not say
	Handing int           // how many shards it is handing over (asked to stop, not yet handed)
	Seen    int64         // the highest term its instance saw, or sent a record of, on any shard
	Longest time.Duration // the longest lease duration its instance knows a session declared, its own included
	Leaving bool          // it is handing its shards on, to end
}

// Put adds f to md, a session's record.
func (f SessionFields) Put(md map[string]*string) {
	n := strconv.Itoa(f.Owned)
	digest := f.Set
	count := strconv.Itoa(f.Size)
	handing := strconv.Itoa(f.Handing)
	seen := strconv.FormatInt(f.Seen, 10)
	longest := f.Longest.String()
	md[MetaOwned], md[MetaSet], md[MetaSetCount], md[MetaHanding], md[MetaSeen] = &n, &digest, &count, &handing, &seen
	md[MetaLongest] = &longest
	if f.Leaving {
		yes := "true"
		md[MetaLeaving] = &yes
	}
}

// ShardMetadata is the record of a shard's term t, written by a holder whose
// LeaseDuration is d, for session: gen is the term of the claiming session
// that the lease ID derives from (ClaimLeaseID), 0 for a transfer
// (HandoffLeaseID).
func ShardMetadata(t Term, d time.Duration, session string, gen int64) map[string]*string {
	md := RecordMetadata(t, d, RoleShard)
	md[MetaSession] = &session
	if gen > 0 {
		g := strconv.FormatInt(gen, 10)
		md[MetaClaimGen] = &g
	}
	return md
}

// Listed is what a listing reads of a session's or a shard's record beyond
// its term record (ParseListed).
type Listed struct {
	// SessionFields is a session's: Owned and Size -1 if it does not say
	// (or it does not read), Seen and Longest 0 if it does not say or
	// does not read (then SeenBad, LongestBad).
	SessionFields
	// SeenBad is, in a session's record, the highest term seen as stored,
	// if it does not read or no claim reaches it (MaxSpreadTerm): not
	// trusted, and reported (the library redacts what looks like a
	// secret).
	SeenBad string
	// LongestBad is the longest lease duration known as stored, if it
	// does not read: not trusted, and reported.
	LongestBad string
	Session    string // a shard's record: the session that wrote it ("" if none)
	Gen        int64  // a shard's record: its claiming session's term (0 if none: handed to it)
}

// ParseListed reads what md, a listed blob's metadata, says beyond its term
// record: a session's fields, a shard's session and claim.
func ParseListed(md map[string]*string) Listed {
	l := Listed{SessionFields: SessionFields{Owned: -1, Size: -1}}
	l.Session = Value(md, MetaSession)
	if n, err := strconv.Atoi(Value(md, MetaOwned)); err == nil && n >= 0 {
		l.Owned = n
	}
	l.Set = Value(md, MetaSet)
	if n, err := strconv.ParseInt(Value(md, MetaClaimGen), 10, 64); err == nil && n > 0 {
		l.Gen = n
	}
	l.Leaving = Value(md, MetaLeaving) == "true"
	if n, err := strconv.Atoi(Value(md, MetaHanding)); err == nil && n > 0 {
		l.Handing = n
	}
	if n, err := strconv.Atoi(Value(md, MetaSetCount)); err == nil && n >= 0 {
		l.Size = n
	}
	if v := Value(md, MetaSeen); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n <= MaxSpreadTerm {
			l.Seen = n
		} else {
			l.SeenBad = v
		}
	}
	l.Longest, l.LongestBad = readDeclarable(md, MetaLongest)
	return l
}

// HandoffLeaseID is the lease ID a giver hands the shard's lease over with:
// the receiver derives the same from its session, the shard and the term the
// giver recorded for it. Each term of a shard gets its own, so a release of
// the receiver's sent for an earlier term ends nothing later.
func HandoffLeaseID(session, shard string, term int64) string {
	return derivedLeaseID("leaderelection handoff", session, shard, strconv.FormatInt(term, 10))
}

// ClaimLeaseID is the lease ID a claim of session (whose term is gen)
// proposes for shard at term: a process that resumes the session derives it
// from the shard's record, which names all three (see the library's
// claimOne).
func ClaimLeaseID(session string, gen int64, shard string, term int64) string {
	return derivedLeaseID("leaderelection claim", session, strconv.FormatInt(gen, 10), shard, strconv.FormatInt(term, 10))
}

// derivedLeaseID is a GUID derived from parts, which must not contain NUL:
// the first 16 bytes of their SHA-256, in the GUID's text form, as they are
// (no version or variant bits set), which is how every version so far
// derived it.
func derivedLeaseID(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	var b [36]byte
	hex.Encode(b[0:8], sum[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], sum[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], sum[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], sum[8:10])
	b[23] = '-'
	hex.Encode(b[24:], sum[10:16])
	return string(b[:])
}
