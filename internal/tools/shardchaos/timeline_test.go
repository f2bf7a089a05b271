package shardchaos

import (
	"encoding/xml"
	"strings"
	"testing"

	"github.com/blobelect/leaderelection/internal/tools/chaos"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The picture is well-formed SVG with a band per instance.
func TestOwnershipSVGDrawsEachInstancesCount(t *testing.T) {
	s := int64(1_000_000_000)
	recs := []Record{
		{Mono: 1 * s, Who: "i01", Kind: chaos.KindSpawn},
		{Mono: 1 * s, Who: "i02", Kind: chaos.KindSpawn},
		{Mono: 2 * s, Who: "i01", Kind: chaos.KindStart, Shard: "a"},
		{Mono: 2 * s, Who: "i01", Kind: chaos.KindStart, Shard: "b"},
		{Mono: 3 * s, Who: "i02", Kind: chaos.KindStart, Shard: "c"},
		{Mono: 4 * s, Who: "i01", Kind: chaos.KindEnd, Shard: "b"},
		{Mono: 4 * s, Who: "i02", Kind: chaos.KindStart, Shard: "b"},
		{Mono: 5 * s, Who: "i02", Kind: chaos.KindExit},
		{Mono: 6 * s, Who: "harness", Kind: chaos.KindShutdown},
	}
	svg := OwnershipSVG(recs, "test <run>", []Marker{{Mono: 5 * s, Label: "kill i02"}})
	require.NoError(t, xml.Unmarshal(svg, new(struct{})), "well-formed")
	out := string(svg)
	assert.Equal(t, 2, strings.Count(out, "<polygon"))
	assert.Contains(t, out, "kill i02")
	assert.Contains(t, out, "test &lt;run&gt;")
	assert.Contains(t, out, "<title>i01</title>")
}
