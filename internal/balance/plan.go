package balance

// Plan says, from one view of a group's sessions (live: their IDs, sorted;
// owned: how many shards each holds; n: the group's set's size), how many
// of the k shards the session self gives go to each session below its
// FairShare. The excesses of the sessions above their share (self's being
// k, whatever owned says), in ID order, are laid end to end, and so are the
// lacks of those below, in ID order: self sends each receiver the part of
// its lack that faces self's span. Every giver that computes its part from
// the same view, with k its excess (or less: no more than the lacks add up
// to), thus sends each receiver its part, and all of them together send
// each receiver exactly its lack if the excesses cover the lacks, and no
// more in any case. A receiver absent from the result gets nothing.
func Plan(live []string, owned map[string]int, n int, self string, k int) map[string]int {
	type span struct {
		id   string
		size int
	}
	var givers, takers []span
	for _, id := range live {
		share := FairShare(n, live, id)
		has := owned[id]
		if id == self {
			givers = append(givers, span{id, k})
			continue
		}
		switch {
		case has > share:
			givers = append(givers, span{id, has - share})
		case has < share:
			takers = append(takers, span{id, share - has})
		}
	}
	from := 0
	for _, g := range givers {
		if g.id == self {
			break
		}
		from += g.size
	}
	to := from + k
	out := map[string]int{}
	at := 0
	for _, t := range takers {
		lo, hi := max(at, from), min(at+t.size, to)
		if hi > lo {
			out[t.id] = hi - lo
		}
		at += t.size
	}
	return out
}

// Givers counts the sessions of live above their FairShare of n by owned,
// self included whatever it holds: those hand shards on at once, and share
// the handovers in flight.
func Givers(live []string, owned map[string]int, n int, self string) int {
	k := 1
	for _, id := range live {
		if id != self && owned[id] > FairShare(n, live, id) {
			k++
		}
	}
	return k
}
