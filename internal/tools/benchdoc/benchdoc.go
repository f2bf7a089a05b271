// Package benchdoc writes a benchmark's section of a Markdown file
// (BENCHMARKS.md), for the bench commands that publish one section each
// (restartbench, shardbench): a run replaces its own section and keeps the
// others.
package benchdoc

import (
	"errors"
	"os"
	"strings"
)

// WriteSection replaces the section of the Markdown file at path that
// starts with the line heading (a "## " heading), up to the next "## "
// heading, with section, which starts with that line too; a file without
// it gets section appended, and a missing file is created.
func WriteSection(path, heading, section string) error {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc := string(b)
	if i := strings.Index(doc, heading+"\n"); i >= 0 {
		rest := doc[i+len(heading):]
		end := len(doc)
		if j := strings.Index(rest, "\n## "); j >= 0 {
			end = i + len(heading) + j + 1
			section += "\n"
		}
		doc = doc[:i] + section + doc[end:]
	} else {
		doc = strings.TrimRight(doc, "\n") + "\n\n" + section
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
