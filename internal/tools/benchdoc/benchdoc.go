// Package benchdoc writes what a benchmark command publishes into a
// Markdown file (BENCHMARKS.md): the "## " sections it owns, whole, and its
// rows of the summary table. Everything else in the file (the other
// commands' sections, the hand-written ones, the summary's other rows) is
// kept byte for byte, so that a figure's own command can refresh it
// without a hand merge.
package benchdoc

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Publication is what one command writes.
type Publication struct {
	// Sections are "## " sections, each starting with its heading line:
	// each replaces the section of the same heading (up to the next "## "
	// heading), or is appended at the end of the file.
	Sections []string

	// Rows are rows of the table under SummaryHeading ("| figure | … |"):
	// each replaces the row whose first cell is the same, or is added at
	// the end of the table.
	Rows []string
}

// SummaryHeading starts the section whose table the summary rows are in.
const SummaryHeading = "## Summary"

// Publish applies p to the file at path; a missing file is created.
func Publish(path string, p Publication) error {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc, err := Apply(string(b), p)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// WriteSection replaces (or appends) one section of the file at path: a
// Publication of that section alone.
func WriteSection(path, heading, section string) error {
	if !strings.HasPrefix(section, heading+"\n") {
		return fmt.Errorf("the section does not start with its heading %q", heading)
	}
	return Publish(path, Publication{Sections: []string{section}})
}

// Apply returns doc with p applied.
func Apply(doc string, p Publication) (string, error) {
	for _, s := range p.Sections {
		heading, _, _ := strings.Cut(s, "\n")
		if !strings.HasPrefix(heading, "## ") {
			return "", fmt.Errorf("a section must start with a \"## \" heading, got %q", heading)
		}
		doc = replaceSection(doc, heading, strings.TrimRight(s, "\n")+"\n")
	}
	if len(p.Rows) == 0 {
		return doc, nil
	}
	return replaceRows(doc, p.Rows)
}

// sectionSpan is where the section that starts with the line heading lies
// in doc: from its heading to the next "## " heading (the blank line before
// it excluded) or the end; ok false if doc has no such heading.
func sectionSpan(doc, heading string) (start, end int, ok bool) {
	start = -1
	for i := 0; i < len(doc); {
		line, _, _ := strings.Cut(doc[i:], "\n")
		if line == heading {
			start = i
			break
		}
		i += len(line) + 1
	}
	if start < 0 {
		return 0, 0, false
	}
	end = len(doc)
	if j := strings.Index(doc[start+len(heading):], "\n## "); j >= 0 {
		end = start + len(heading) + j + 1
	}
	for end > start && end >= 2 && doc[end-1] == '\n' && doc[end-2] == '\n' {
		end-- // the blank line before the next heading stays the file's
	}
	return start, end, true
}

func replaceSection(doc, heading, section string) string {
	start, end, ok := sectionSpan(doc, heading)
	if !ok {
		if doc == "" {
			return section
		}
		return strings.TrimRight(doc, "\n") + "\n\n" + section
	}
	return doc[:start] + section + doc[end:]
}

// firstCell is a table row's first cell, trimmed.
func firstCell(row string) string {
	cells := strings.Split(strings.TrimSpace(row), "|")
	if len(cells) < 3 {
		return ""
	}
	return strings.TrimSpace(cells[1])
}

// replaceRows puts rows into the summary table, each in place of the row of
// the same first cell, or after the table's last row.
func replaceRows(doc string, rows []string) (string, error) {
	start, end, ok := sectionSpan(doc, SummaryHeading)
	if !ok {
		return "", fmt.Errorf("no %q section for the summary rows", SummaryHeading)
	}
	lines := strings.SplitAfter(doc[start:end], "\n")
	last := -1 // the table's last row
	for i, l := range lines {
		if strings.HasPrefix(l, "|") {
			last = i
		}
	}
	if last < 0 {
		return "", fmt.Errorf("the %q section has no table", SummaryHeading)
	}
	for _, row := range rows {
		name := firstCell(row)
		if name == "" {
			return "", fmt.Errorf("not a table row: %q", row)
		}
		row = strings.TrimRight(row, "\n") + "\n"
		found := false
		for i, l := range lines {
			if strings.HasPrefix(l, "|") && firstCell(l) == name {
				if found {
					return "", fmt.Errorf("the summary has two rows %q", name)
				}
				lines[i], found = row, true
			}
		}
		if !found {
			lines = append(lines[:last+1], append([]string{row}, lines[last+1:]...)...)
			last++
		}
	}
	return doc[:start] + strings.Join(lines, "") + doc[end:], nil
}

// Outside returns doc without what p writes: its sections and its summary
// rows. A command that publishes p leaves Outside unchanged, byte for byte.
func Outside(doc string, p Publication) string {
	for _, s := range p.Sections {
		heading, _, _ := strings.Cut(s, "\n")
		if start, end, ok := sectionSpan(doc, heading); ok {
			if strings.HasSuffix(doc[:start], "\n\n") {
				start-- // with the blank line before it, which an appended section brings
			}
			doc = doc[:start] + doc[end:]
		}
	}
	names := map[string]bool{}
	for _, r := range p.Rows {
		names[firstCell(r)] = true
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(doc, "\n") {
		if !(strings.HasPrefix(l, "|") && names[firstCell(l)]) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// Check reports what is wrong with publishing p on doc (the file as it is)
// for a command that measured commit: a section or a summary row that doc
// does not have already (a command refreshes its figures, in place: a new
// one is added by hand first), a first section or a row without the
// commit, or
// anything else of doc that applying p would change. Each command's test
// runs it on a copy of BENCHMARKS.md.
func Check(doc string, p Publication, commit string) error {
	var errs []error
	for i, s := range p.Sections {
		heading, _, _ := strings.Cut(s, "\n")
		if _, _, ok := sectionSpan(doc, heading); !ok {
			errs = append(errs, fmt.Errorf("the file has no section %q", heading))
		}
		if i == 0 && !strings.Contains(s, "commit "+commit) { // the first says how the figures were produced
			errs = append(errs, fmt.Errorf("the section %q does not say \"commit %s\"", heading, commit))
		}
	}
	names := map[string]bool{}
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "|") {
			names[firstCell(l)] = true
		}
	}
	for _, r := range p.Rows {
		if !names[firstCell(r)] {
			errs = append(errs, fmt.Errorf("the summary has no row %q", firstCell(r)))
		}
		if !strings.Contains(r, "| "+commit+" |") {
			errs = append(errs, fmt.Errorf("the row %q does not carry the commit %s", firstCell(r), commit))
		}
	}
	after, err := Apply(doc, p)
	switch {
	case err != nil:
		errs = append(errs, err)
	case Outside(doc, p) != Outside(after, p):
		errs = append(errs, errors.New("publishing changes the file outside the command's sections and rows"))
	}
	return errors.Join(errs...)
}
