package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNameProblem(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"shard-00001":            "",
		"tenant/a:b@c=d~e_f.g":   "",
		strings.Repeat("x", 256): "",
		"":                       "must not be empty",
		strings.Repeat("x", 257): "must be at most 256 characters long, got 257",
		"a.":                     "must not end with a dot",
		"a*b":                    "may contain only letters, digits, '/' and - _ . ~ : @ =, got '*'",
		"a b":                    "may contain only letters, digits, '/' and - _ . ~ : @ =, got ' '",
		"a//b":                   "'/' must separate non-empty segments other than . and ..",
		"a/../b":                 "'/' must separate non-empty segments other than . and ..",
		"/a":                     "'/' must separate non-empty segments other than . and ..",
		"./a":                    "'/' must separate non-empty segments other than . and ..",
	} {
		assert.Equal(t, want, NameProblem(name), "%q", name)
	}
}
