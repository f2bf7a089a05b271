package main

import (
	"testing"
	"time"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/blobelect/leaderelection/internal/tools/shardchaos"
)

func TestMovedAfterFollowsOnlyTheStoppedInstancesShards(t *testing.T) {
	s := int64(time.Second)
	recs := []shardchaos.Record{
		{Mono: 1 * s, Who: "a", Kind: chaos.KindEnd, Shard: "x"}, // before the mark
		{Mono: 10 * s, Who: "a", Kind: chaos.KindEnd, Shard: "x"},
		{Mono: 11 * s, Who: "b", Kind: chaos.KindEnd, Shard: "y"}, // another instance's
		{Mono: 12 * s, Who: "c", Kind: chaos.KindStart, Shard: "y"},
		{Mono: 13 * s, Who: "b", Kind: chaos.KindStart, Shard: "x"},
		{Mono: 14 * s, Who: "a", Kind: chaos.KindEnd, Shard: "z"},
		{Mono: 14*s + s/2, Who: "c", Kind: chaos.KindStart, Shard: "z"},
	}
	all, idle := movedAfter(recs, 5*s, "a")
	if all != 9500*time.Millisecond {
		t.Errorf("all ran elsewhere after %v, want 9.5s", all)
	}
	if len(idle) != 2 || idle[0] != 3*time.Second || idle[1] != 500*time.Millisecond {
		t.Errorf("idle times %v, want [3s 500ms]", idle)
	}
}
