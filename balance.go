package leaderelection

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
)

// How a ShardOwner spreads shards: every instance computes, from the same
// listing of the sessions, the same exact share for every live session.
// With n shards and L live sessions sorted by ID, the first n mod L hold
// ceil(n/L) and the rest floor(n/L): the shares add up to n, so once every
// session holds its share no shard is free and no two sessions differ by
// more than one. A session below its share claims free shards; one above it
// hands the excess over, and only while some other session is below its own
// (so that a view that lags does not set shards free for nobody). Nobody
// claims past its share, so nothing moves back: after a join the old
// sessions hand over exactly the new one's share, and after a death the
// survivors claim exactly the dead one's shards.
//
// Which shards move is chosen by rendezvous hashing, highest
// hash(session, shard) first. Free shards are assigned (assign) to the
// sessions with room by the same rule on every instance, so instances
// claiming at once (a cold start, a death) claim disjoint shards; a shard
// left free for long is anyone's. A session hands over first the shards
// another session prefers.

// fairShare is how many of n shards the session id should hold, live being
// the live sessions' IDs, sorted, id among them.
func fairShare(n int, live []string, id string) int {
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

// rendezvous is the score of shard for session: the session with the highest
// score among the live ones is the shard's preferred session.
func rendezvous(session, shard string) uint64 {
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

// preferred returns the live session with the highest score for shard.
func preferred(live []string, shard string) string {
	best, bestScore := "", uint64(0)
	for _, id := range live {
		if s := rendezvous(id, shard); best == "" || s > bestScore {
			best, bestScore = id, s
		}
	}
	return best
}

// assign shares the free shards out among the live sessions that have room
// (their share less what they hold), the same way on every instance that
// sees the same listing: each shard, in name order, goes to the session with
// the highest rendezvous score among those with room left. It returns the
// shards assigned to self, highest score first. Instances claiming at once
// (a cold start, a death) thus claim disjoint shards, and need not list
// again to find what the others left.
func assign(free []string, live []string, room map[string]int, self string) []string {
	left := make(map[string]int, len(room))
	for id, r := range room {
		left[id] = r
	}
	names := slices.Clone(free)
	slices.Sort(names)
	type mine struct {
		name  string
		score uint64
	}
	var out []mine
	for _, name := range names {
		best, bestScore := "", uint64(0)
		for _, id := range live {
			if left[id] <= 0 {
				continue
			}
			if s := rendezvous(id, name); best == "" || s > bestScore {
				best, bestScore = id, s
			}
		}
		if best == "" {
			break // no room left anywhere
		}
		left[best]--
		if best == self {
			out = append(out, mine{name, bestScore})
		}
	}
	slices.SortFunc(out, func(a, b mine) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	names = names[:0]
	for _, m := range out {
		names = append(names, m.name)
	}
	return names
}

// maxShardName is the longest shard name accepted.
const maxShardName = 256

// checkShardName keeps shard names to what a blob name carries unchanged
// through URLs and listings, and reads back the same: letters, digits and
// - _ . ~ : @ =, with / between non-empty segments other than . and ..
// (which a URL path would resolve), not ending with a dot (Azure's rule).
func checkShardName(name string) error {
	bad := func(rule string) error {
		return fmt.Errorf("leaderelection: invalid shard name %q: %s", name, rule)
	}
	switch {
	case name == "":
		return fmt.Errorf("leaderelection: invalid shard name \"\": must not be empty")
	case len(name) > maxShardName:
		return bad(fmt.Sprintf("must be at most %d characters long, got %d", maxShardName, len(name)))
	case strings.HasSuffix(name, "."):
		return bad("must not end with a dot")
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.~:@=/", r)
		if !ok {
			return bad(fmt.Sprintf("may contain only letters, digits, '/' and - _ . ~ : @ =, got %q", r))
		}
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad("'/' must separate non-empty segments other than . and ..")
		}
	}
	return nil
}

// checkShardNames checks every name and that none repeats, and returns the
// set.
func checkShardNames(names []string) (map[string]bool, error) {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		if err := checkShardName(n); err != nil {
			return nil, err
		}
		if set[n] {
			return nil, fmt.Errorf("leaderelection: shard %q is named twice", n)
		}
		set[n] = true
	}
	return set, nil
}
