// Package balance holds the arithmetic by which a ShardOwner spreads shards
// over the live sessions: pure functions of the sessions' IDs, the shards'
// names and counts, which every instance computes alike from the same
// listing. It knows nothing of sessions' records, leases or claims: the
// library (shardbalance.go, handoff.go, shardclaim.go) feeds it what a listing
// showed and acts on what it returns.
//
// Shares (FairShare): with n shards and L live sessions sorted by ID, the
// first n mod L hold ceil(n/L) and the rest floor(n/L). The shares add up to
// n, so once every session holds its share no shard is free, and no two
// sessions differ by more than one.
//
// Preference (Rendezvous, Preferred): which shards move is chosen by
// rendezvous hashing, highest score Rendezvous(session, shard) first. A
// shard's preferred session is the live one with the highest score; a join
// changes the preference of about 1/(L+1) of the shards, each to the
// newcomer, and a death only that of the dead session's shards.
//
// Assignment (Assign, AssignSet): free shards go, in name order, each to the
// session with the highest score among those with room left (a share less
// what it holds). Every instance that sees the same inputs computes the same
// parts, disjoint and each within its session's room, so instances claiming
// at once (a cold start, a death) claim disjoint shards.
//
// Handover (Plan, Givers): the excesses of the sessions above their share,
// in ID order, are matched to the lacks of those below, in ID order; each
// giver computes its own part of that matching from the same view, so that
// every receiver is sent its lack and no more.
//
// Sets (SetDigest): a set of shards is named by a digest of its names, which
// the sessions that run the same set share.
package balance

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"slices"
	"strings"
)

// FairShare is how many of n shards the session id should hold, live being
// the live sessions' IDs, sorted, id among them: with L live sessions, the
// first n mod L of them hold ceil(n/L) and the others floor(n/L), so the
// shares add up to n and differ by at most one. With no live session listed
// yet, it is all n. (An id not among live counts at the rank it would sort
// at.)
func FairShare(n int, live []string, id string) int {
	if len(live) == 0 {
		return n
	}
	i, _ := slices.BinarySearch(live, id)
	share := n / len(live)
	if i < n%len(live) {
		share++
	}
	return share
}

// Rendezvous is the score of shard for session: the FNV-1a 64-bit hash of
// the session's ID, a NUL byte and the shard's name, finished with
// splitmix64's mixer. The session with the highest score among the live
// ones is the shard's preferred session (Preferred).
func Rendezvous(session, shard string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(session))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(shard))
	// FNV's low bits mix poorly for inputs that differ only at the end:
	// finish with splitmix64's mixer.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Preferred returns the live session with the highest Rendezvous score for
// shard (the first in live's order among equal scores), or "" if live is
// empty.
func Preferred(live []string, shard string) string {
	best, bestScore := "", uint64(0)
	for _, id := range live {
		if s := Rendezvous(id, shard); best == "" || s > bestScore {
			best, bestScore = id, s
		}
	}
	return best
}

// Assign shares the free shards out among the live sessions that have room
// (room: their share less what they hold; a session absent from room, or at
// 0 or below, has none), the same way on every instance that sees the same
// listing: each shard, in name order, goes to the session with the highest
// Rendezvous score among those with room left, until no session has room.
// It returns the shards assigned to self, highest score first (ties by
// name), and whom each shard assigned to anyone went to. The parts are
// disjoint, each within its session's room, and cover min(len(free), the
// live sessions' room) shards (free's names being distinct); the order of
// free does not matter.
// Instances claiming at once (a cold start, a death) thus claim disjoint
// shards, and need not list again to find what the others left.
func Assign(free []string, live []string, room map[string]int, self string) ([]string, map[string]string) {
	left := make(map[string]int, len(room))
	for id, r := range room {
		left[id] = r
	}
	names := slices.Clone(free)
	slices.Sort(names)
	var out []scored
	to := make(map[string]string, len(names))
	for _, name := range names {
		best, score := bestWithRoom(live, left, name)
		if best == "" {
			break // no room left anywhere
		}
		left[best]--
		to[name] = best
		if best == self {
			out = append(out, scored{name, score})
		}
	}
	return bestFirst(out), to
}

// scored is a shard assigned to a session, with its rendezvous score.
type scored struct {
	name  string
	score uint64
}

// bestWithRoom is the live session with the highest rendezvous score for
// shard among those with room left, and that score; "" if none has room.
func bestWithRoom(live []string, left map[string]int, shard string) (string, uint64) {
	best, bestScore := "", uint64(0)
	for _, id := range live {
		if left[id] <= 0 {
			continue
		}
		if s := Rendezvous(id, shard); best == "" || s > bestScore {
			best, bestScore = id, s
		}
	}
	return best, bestScore
}

// bestFirst names the shards, highest score first (ties by name).
func bestFirst(out []scored) []string {
	slices.SortFunc(out, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	names := make([]string, len(out))
	for i, m := range out {
		names[i] = m.name
	}
	return names
}

// AssignSet shares the whole set (sorted, no name twice) out among the live sessions of a
// group, each up to its FairShare of len(set): first each shard to the
// session of the group that holds it by holders (shard name to session ID),
// then every other, in set's order, as Assign does, to the session with the
// highest Rendezvous score that has room left, until none has. It returns,
// as Assign does, self's part of free, highest score first (ties by name),
// and whom each shard of free went to: no shard of free goes to two
// sessions, and no session past its share. A shard that a session outside
// the group holds counts for no one, and goes to no one, if skip says that
// session is live; else (a dead session's) it is anyone's.
//
// Instances that list at about the same moment compute the same parts,
// whatever claims landed between their listings: each claim follows the
// parts, so a shard one listing shows held is one the others assign to its
// holder anyway.
func AssignSet(set []string, live []string, holders map[string]string, skip func(string) bool, free []string, self string) ([]string, map[string]string) {
	left := make(map[string]int, len(live))
	for _, id := range live {
		left[id] = FairShare(len(set), live, id)
	}
	for _, name := range set {
		if h, ok := holders[name]; ok {
			if _, in := left[h]; in {
				left[h]--
			}
		}
	}
	isFree := make(map[string]bool, len(free))
	for _, name := range free {
		isFree[name] = true
	}
	var out []scored
	to := make(map[string]string, len(free))
	for _, name := range set {
		if h, ok := holders[name]; ok {
			if _, in := left[h]; in || skip(h) {
				continue
			}
		}
		best, score := bestWithRoom(live, left, name)
		if best == "" {
			break // no room left anywhere
		}
		left[best]--
		if isFree[name] {
			to[name] = best
			if best == self {
				out = append(out, scored{name, score})
			}
		}
	}
	return bestFirst(out), to
}

// SetDigest names a set of shards (set's keys, whatever their values): the
// first 16 hex digits of the SHA-256 of its names, sorted, joined by
// newlines (which no shard name contains). Sessions that run the same set
// carry the same digest.
func SetDigest(set map[string]bool) string {
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	sum := sha256.Sum256([]byte(strings.Join(names, "\n")))
	return hex.EncodeToString(sum[:8])
}
