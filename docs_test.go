package leaderelection

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of the documentation: README.md, BENCHMARKS.md, CONTRIBUTING.md
// and docs/*.md. They need no Azurite.

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// Every instrument the package creates is in the Metrics table of
// docs/operations.md, with the unit it is created with ("s", or none: "—").
func TestDocsListEveryInstrumentWithItsUnit(t *testing.T) {
	_, section, ok := strings.Cut(readDoc(t, "docs/operations.md"), "\n## Metrics\n")
	require.True(t, ok)
	section, _, _ = strings.Cut(section, "\n## ")
	create := regexp.MustCompile(`meter\.\w+\("(leaderelection\.[a-z_.]+)"(.*)`)
	found := 0
	for _, file := range []string{"metrics.go", "shards.go"} {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range create.FindAllStringSubmatch(string(src), -1) {
			found++
			unit := "—"
			if strings.Contains(m[2], `metric.WithUnit("s")`) {
				unit = "s"
			}
			row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(m[1]) + "` \\| \\w+ \\| " + unit + " \\|")
			assert.Regexp(t, row, section, "%s, unit %s", m[1], unit)
		}
	}
	assert.Equal(t, 15, found, "instruments found in the source")
}
