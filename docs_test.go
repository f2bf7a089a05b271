package leaderelection

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of the documentation: README.md, BENCHMARKS.md, CONTRIBUTING.md
// and docs/*.md. They need no Azurite.

// citedPaths is every repository path the documents cite (in a link, in
// inline code or in a command), in one place: a change that moves or
// renames one of these must update the documents that cite it, which
// TestDocsCitePathsThatExist lists.
var citedPaths = []string{
	".ci/run",
	"BENCHMARKS.md",
	"doc.go",
	"docs/chaos-timeline.svg",
	"docs/shards-timeline.svg",
	"docs_test.go",
	"errors.go",
	"etag_test.go",
	"etaglease.go",
	"events.go",
	"example_quickstart_test.go",
	"example_shardowner_test.go",
	"example_test.go",
	"examples/coordinator",
	"examples/failover",
	"examples/leaderctl",
	"go.work",
	"handoff.go",
	"handoffin.go",
	"handoffnotes.go",
	"health.go",
	"heldlist.go",
	"internal/azurite",
	"internal/azurite/cmd/azurite",
	"internal/azuritetest",
	"internal/balance",
	"internal/blobstore",
	"internal/blobstore/transport.go",
	"internal/clock",
	"internal/faults",
	"internal/memblob",
	"internal/sim",
	"internal/shardplan",
	"internal/tools",
	"internal/tools/baseline",
	"internal/tools/bench/cmd/bench",
	"internal/tools/benchdoc",
	"internal/tools/chaos",
	"internal/tools/chaos/cmd/chaos",
	"internal/tools/etcdpeer",
	"internal/tools/listprobe",
	"internal/tools/quorumbench",
	"internal/tools/restartbench",
	"internal/tools/rollbench",
	"internal/tools/shardbench",
	"internal/tools/shardchaos",
	"internal/tools/shardchaos/cmd/shardchaos",
	"internal/tools/shardrestart",
	"internal/tools/tamper",
	"internal/wire",
	"lease.go",
	"leaseterm.go",
	"membership.go",
	"memory_test.go",
	"metrics.go",
	"mutex.go",
	"mutex_test.go",
	"options.go",
	"ownership.go",
	"ownerstate.go",
	"prefer.go",
	"quorum.go",
	"quorummutex.go",
	"quorumterm.go",
	"record.go",
	"recreated.go",
	"renew.go",
	"renew_test.go",
	"resume.go",
	"session.go",
	"sessionfile.go",
	"sessionjudge.go",
	"sessionstate.go",
	"settings.go",
	"shardbalance.go",
	"shardclaim.go",
	"shardfloors.go",
	"shardinspect.go",
	"shardlist.go",
	"shardlog.go",
	"shardmanager.go",
	"shardmetrics.go",
	"shardrun.go",
	"shardstate.go",
	"shardstore.go",
	"shardtake.go",
	"shards.go",
	"shutdown_bench_test.go",
	"silence.go",
	"sim_test.go",
	"sim_fleet_test.go",
	"sim_faultmodel_test.go",
	"sim_config_test.go",
	"sim_limits_test.go",
	"sim_writers_test.go",
	"sim_writers_trigger_test.go",
	"sim_points_test.go",
	"term.go",
	"termmemory.go",
	"termrun.go",
	"termstate.go",
	"tiers_test.go",
}

// plannedPaths are paths of the target layout that CONTRIBUTING.md
// describes before the code has moved there (its names marked as still to
// be confirmed). They may not exist yet; once one does, move it to
// citedPaths.
var plannedPaths = []string{}

// docFiles returns the documents these tests cover.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages, "docs/ holds the topic pages")
	return append([]string{"README.md", "BENCHMARKS.md", "CONTRIBUTING.md"}, pages...)
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// prose returns doc's lines outside fenced code blocks, as "" inside them,
// so that line numbers stay those of the file.
func prose(doc string) []string {
	lines := strings.Split(doc, "\n")
	out := make([]string, len(lines))
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out[i] = l
		}
	}
	return out
}

// fencedCode returns the text of doc's fenced code blocks.
func fencedCode(doc string) string {
	var b strings.Builder
	fenced := false
	for l := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

var (
	codeSpan = regexp.MustCompile("`[^`]*`")
	mdLink   = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// slug is GitHub's anchor for a heading: its text as rendered (no code
// marks, link text only), lowercased, every character but letters, digits,
// marks, spaces, hyphens and underscores dropped, spaces made hyphens.
func slug(text string) string {
	text = mdLink.ReplaceAllString(text, "$1")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r), r == '-', r == '_':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of doc's headings, with GitHub's -1, -2...
// for repeated ones.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(doc) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// links returns the targets of doc's Markdown links and images, outside
// code.
func links(doc string) []string {
	var out []string
	for _, l := range prose(doc) {
		for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(l, ""), -1) {
			out = append(out, m[2])
		}
	}
	return out
}

// Every link between the documents resolves: the file (or directory) it
// names exists, and an anchor is a heading of the page it points into.
func TestDocsLinksAndAnchorsResolve(t *testing.T) {
	for _, file := range docFiles(t) {
		doc := readDoc(t, file)
		for _, target := range links(doc) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link to %s: no such file", file, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link to %s: an anchor into a file that is not Markdown", file, target)
				continue
			}
			if !anchors(readDoc(t, dest))[anchor] {
				t.Errorf("%s: link to %s: %s has no heading with that anchor", file, target, dest)
			}
		}
	}
}

// The anchors are computed as GitHub computes them.
func TestDocsSlugIsGitHubs(t *testing.T) {
	for text, want := range map[string]string{
		"Many elections: `ShardOwner`":                         "many-elections-shardowner",
		"A service on Kubernetes: `examples/coordinator`":      "a-service-on-kubernetes-examplescoordinator",
		"Limits: what you must do, and what no library can":    "limits-what-you-must-do-and-what-no-library-can",
		"Measured at 10,000 shards":                            "measured-at-10000-shards",
		"An ETag lease trusts the followers' clocks":           "an-etag-lease-trusts-the-followers-clocks",
		"From `RunTaskWhenMutexAcquired` and `Run`":            "from-runtaskwhenmutexacquired-and-run",
		"Quick start: [shards](docs/shardowner.md) in a fleet": "quick-start-shards-in-a-fleet",
	} {
		assert.Equal(t, want, slug(text), text)
	}
	assert.True(t, anchors("# A\n## B\n```\n## C\n```\n## B\n")["b-1"])
	assert.False(t, anchors("# A\n```\n## C\n```\n")["c"], "a heading in a code block is none")
}

var (
	// pathToken finds a repository path in code: a file of the root
	// package, or a path under one of the repository's directories.
	pathToken = regexp.MustCompile(`(?:^|[\s(=\x60"'])(?:\./)?((?:internal|examples|docs|\.ci)/[\w./-]*[\w-]|[\w-]+(?:_test)?\.go|go\.work|[A-Z]+\.md)\b`)
)

// citedIn returns the repository paths doc cites: relative link targets,
// and paths in inline code and code blocks.
func citedIn(file, doc string) []string {
	var out []string
	add := func(p string) {
		p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/")
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, target := range links(doc) {
		path, _, _ := strings.Cut(target, "#")
		if path == "" || strings.Contains(target, "://") {
			continue
		}
		rel, err := filepath.Rel(".", filepath.Join(filepath.Dir(file), path))
		if err == nil && !strings.HasSuffix(rel, ".md") {
			add(rel)
		}
	}
	var code strings.Builder
	for _, l := range prose(doc) {
		for _, span := range codeSpan.FindAllString(l, -1) {
			code.WriteString(span + "\n")
		}
	}
	code.WriteString(fencedCode(doc))
	for _, m := range pathToken.FindAllStringSubmatch(code.String(), -1) {
		add(m[1])
	}
	return out
}

// Every path the documents cite exists (or is a planned one), and is
// listed in citedPaths, so that whoever moves a file finds what cites it.
func TestDocsCitePathsThatExist(t *testing.T) {
	cited := map[string][]string{}
	for _, file := range docFiles(t) {
		for _, p := range citedIn(file, readDoc(t, file)) {
			if strings.HasPrefix(p, "docs/") && strings.HasSuffix(p, ".md") {
				continue // the pages themselves: the link test covers them
			}
			cited[p] = append(cited[p], file)
		}
	}
	for p, files := range cited {
		switch {
		case slices.Contains(plannedPaths, p):
		case !slices.Contains(citedPaths, p):
			t.Errorf("%s cite %s, which citedPaths does not list", strings.Join(files, ", "), p)
		default:
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s cite %s, which does not exist", strings.Join(files, ", "), p)
			}
		}
	}
	for _, p := range append(slices.Clone(citedPaths), plannedPaths...) {
		if _, ok := cited[p]; !ok {
			t.Errorf("citedPaths lists %s, which no document cites any more", p)
		}
	}
}

// testNames returns the names of every Test, Benchmark and Example func in
// the repository's test files, every module's.
func testNames(t *testing.T) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example)\w*)\(`)
	names := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
				names[m[1]] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	return names
}

// testRef finds a test the documents name: TestX, BenchmarkX, ExampleX, or
// a prefix TestX* for several.
var testRef = regexp.MustCompile(`\b((?:Test|Benchmark|Example)[A-Z]\w*)(\*?)`)

// Every test a document names exists: a claim's evidence must not vanish
// silently when a test is renamed.
func TestDocsNameTestsThatExist(t *testing.T) {
	names := testNames(t)
	for _, file := range docFiles(t) {
		for _, m := range testRef.FindAllStringSubmatch(readDoc(t, file), -1) {
			name, prefix := m[1], m[2] == "*"
			found := names[name]
			if prefix {
				for n := range names {
					found = found || strings.HasPrefix(n, name)
				}
			}
			assert.True(t, found, "%s names %s%s, which no test file declares", file, name, m[2])
		}
	}
}

// Each topic page begins by saying what it answers.
func TestDocsPagesSayWhatTheyAnswer(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	for _, page := range pages {
		lines := strings.Split(readDoc(t, page), "\n")
		require.Greater(t, len(lines), 2, page)
		assert.True(t, strings.HasPrefix(lines[0], "# "), "%s starts with its title", page)
		assert.True(t, strings.HasPrefix(lines[2], "This page answers: "), "%s: the paragraph after the title says what the page answers", page)
	}
}

// The README stays short: what a newcomer needs, and the index.
func TestREADMEIsShort(t *testing.T) {
	lines := strings.Count(readDoc(t, "README.md"), "\n")
	assert.LessOrEqual(t, lines, 250, "README.md lines: move the detail to a page in docs/")
}

// BENCHMARKS.md stays short: the summary, how to measure, the peers and a
// short section per figure; earlier runs and investigations go to
// docs/benchmarks-history.md.
func TestBENCHMARKSIsShort(t *testing.T) {
	lines := strings.Count(readDoc(t, "BENCHMARKS.md"), "\n")
	assert.LessOrEqual(t, lines, 450, "BENCHMARKS.md lines: move the detail to docs/benchmarks-history.md")
}

// figure finds a number in prose, with its unit if one follows: 14.78 s,
// 10,000, 1.06×, 0.7 %, 16.7 ms; not one inside a word or a name (p99,
// c017f79, TestX2, 2^53). anyFigure finds every number, for the published
// side: go1.26.8 publishes 1.26.8.
var (
	figure    = regexp.MustCompile(`(?:^|[^\w.,^/#@-])` + figureBody)
	anyFigure = regexp.MustCompile(figureBody)
)

const figureBody = `(\d+(?:,\d{3})*(?:\.\d+)*)(?:\s?(ms|s|×|%|MiB|h|min)\b|\s?(×|%))?`

// normFigure returns a figure's number without thousands separators, and
// its unit.
func normFigure(num, unit string) string {
	num = strings.ReplaceAll(num, ",", "")
	if f, err := strconv.ParseFloat(num, 64); err == nil && strings.Count(num, ".") <= 1 {
		num = strconv.FormatFloat(f, 'f', -1, 64)
	}
	return num + " " + unit
}

// published returns every figure of text, normalised, each also without
// its unit (a count quoted in the README may carry a unit word there).
func published(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range anyFigure.FindAllStringSubmatch(text, -1) {
		out[normFigure(m[1], m[2]+m[3])] = true
		out[normFigure(m[1], "")] = true
	}
	return out
}

// quoted returns the figures of prose text, normalised.
func quoted(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range figure.FindAllStringSubmatch(text, -1) {
		out[normFigure(m[1], m[2]+m[3])] = true
	}
	return out
}

var numbered = regexp.MustCompile(`^\d+\. `)

// readmeBlocks splits the README's prose into the units a figure is read
// in: a paragraph, a list item, a table row, a heading.
func readmeBlocks(doc string) []string {
	var blocks []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			blocks = append(blocks, cur.String())
			cur.Reset()
		}
	}
	for _, l := range prose(doc) {
		trimmed := strings.TrimSpace(l)
		switch {
		case trimmed == "":
			flush()
		case strings.HasPrefix(trimmed, "|"), strings.HasPrefix(trimmed, "#"):
			flush()
			blocks = append(blocks, trimmed)
		case strings.HasPrefix(trimmed, "- "), numbered.MatchString(trimmed):
			flush()
			cur.WriteString(trimmed + "\n")
		default:
			cur.WriteString(trimmed + "\n")
		}
	}
	flush()
	return blocks
}

// Every figure the README quotes is traceable: it appears in BENCHMARKS.md
// (the same number with the same unit), or the paragraph, list item or
// table row that quotes it names a test that asserts it, and that test
// exists. Code (inline and in blocks) and link targets are not figures.
func TestREADMEFiguresAreTraceable(t *testing.T) {
	pub := published(readDoc(t, "BENCHMARKS.md"))
	names := testNames(t)
	checked := 0
	for _, block := range readmeBlocks(readDoc(t, "README.md")) {
		named := false
		for _, m := range testRef.FindAllStringSubmatch(block, -1) {
			named = named || names[m[1]]
		}
		text := codeSpan.ReplaceAllString(block, " ")
		text = mdLink.ReplaceAllString(text, "$1")
		for _, m := range figure.FindAllStringSubmatch(text, -1) {
			checked++
			f := normFigure(m[1], m[2]+m[3])
			if !pub[f] && !named {
				t.Errorf("README.md quotes %q, which BENCHMARKS.md does not carry, and names no test that asserts it, in:\n%s", strings.TrimSpace(m[0]), block)
			}
		}
	}
	assert.Positive(t, checked, "the README quotes figures")
}

// The check itself: a figure with a unit must be published with that unit.
func TestFigureTraceabilityReadsUnits(t *testing.T) {
	pub := published("crash 14.78 s, 2,755 requests, 1.06× [0.96–1.43], go1.26.8")
	for _, f := range []string{"14.78 s", "2755 ", "1.06 ×", "0.96 ", "1.43 ", "1.26.8 "} {
		assert.True(t, pub[f], f)
	}
	readme := quoted("took 14.78 ms, 2755 of them, p99, c017f79 and TestX2")
	assert.Equal(t, map[string]bool{"14.78 ms": true, "2755 ": true}, readme)
	assert.False(t, pub["14.78 ms"], "a figure published in seconds is not one in milliseconds")
}

// Every instrument the package creates is in the Metrics table of
// docs/operations.md, with the unit it is created with ("s", or none: "—").
func TestDocsListEveryInstrumentWithItsUnit(t *testing.T) {
	_, section, ok := strings.Cut(readDoc(t, "docs/operations.md"), "\n## Metrics\n")
	require.True(t, ok)
	section, _, _ = strings.Cut(section, "\n## ")
	create := regexp.MustCompile(`meter\.\w+\("(leaderelection\.[a-z_.]+)"(.*)`)
	found := 0
	for _, file := range []string{"metrics.go", "shardmetrics.go"} {
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

// libraryText returns the library's non-test source (the root package,
// and the storage package, the wire format and leaderctl it shares texts
// with), with string literals split across lines joined and quotes
// unescaped.
func libraryText(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, pattern := range []string{"*.go", "internal/blobstore/*.go", "internal/wire/*.go", "examples/leaderctl/*.go"} {
		files, err := filepath.Glob(pattern)
		require.NoError(t, err)
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				b.WriteString(readDoc(t, f))
			}
		}
	}
	s := regexp.MustCompile(`"\s*\+\s*\n?\s*"`).ReplaceAllString(b.String(), "")
	return strings.ReplaceAll(s, `\"`, `"`)
}

// messagePieces splits a message as a document quotes it into the literal
// pieces the source must hold: at the values the library fills in (%v, …,
// <...>, a quoted value, a number or duration) and where it joins texts
// (": ", "; ", parentheses).
var messagePieces = regexp.MustCompile(`%v|…|<[^>]*>|"[^"]*"|\d[\w.]*|: |; | \(|\)`)

// Every message troubleshooting.md quotes is the library's own text: each
// literal piece of it is in the source. A message reworded in the code
// fails here until the page follows.
func TestDocsTroubleshootingQuotesTheLibrarysOwnTexts(t *testing.T) {
	src := libraryText(t)
	checked := 0
	for _, l := range prose(readDoc(t, "docs/troubleshooting.md")) {
		for _, span := range codeSpan.FindAllString(l, -1) {
			span = strings.Trim(span, "`")
			if len(strings.Fields(span)) < 4 {
				continue // a name, a key, a command: not a message
			}
			for _, piece := range messagePieces.Split(span, -1) {
				piece = strings.TrimSpace(piece)
				if len(piece) < 15 {
					continue
				}
				checked++
				assert.True(t, strings.Contains(src, piece), "troubleshooting.md quotes %q, whose piece %q is not in the library's source", span, piece)
			}
		}
	}
	assert.Greater(t, checked, 100, "pieces of messages checked")
}

// internalTexts are the library's error texts that never reach a caller or
// a log above Debug, with the reason; TestDocsTroubleshootingCoversEveryError
// skips them.
var internalTexts = map[string]string{
	"the blob has no term recorded yet and has not stood unchanged long enough for every instance to seed its term": "errNotSettled: the mutex gives the lease back and watches the blob settle; a bare BlobLeaseManager never waits",
	"the session's blob is gone":       "errSessionGone: ends the session, logged as the container's deletion",
	"the container is gone":            "errContainerGone: likewise",
	"no list of the shards session":    "heldlist.go: a survivor that cannot read a dead session's list lists the shards instead",
	"the list of the shards session":   "heldlist.go: likewise",
	"a list of held shards whose":      "internal/wire's ParseHeld, for heldlist.go: likewise",
	"a list of held shards whose line": "internal/wire's ParseHeld, for heldlist.go: likewise",
	"a list of held shards with":       "internal/wire's ParseHeld, for heldlist.go: likewise",
	"leaderctl never runs a shard":     "a text of leaderctl's own, not an error",
	"its body was not read":            "a text of leaderctl's own, not an error",
}

// Every text the library can give a user is in troubleshooting.md: for
// each text (an error, a rule, a StorageError's detail, a line logged at
// Warn or Error: userTexts reads them from the code of the root and the
// storage package, whose texts reach the user inside the root's), its
// longest literal piece; and every exported sentinel by name. A new text
// fails here until the page says what it means and what to do.
func TestDocsTroubleshootingCoversEveryError(t *testing.T) {
	doc := readDoc(t, "docs/troubleshooting.md")
	verbs := regexp.MustCompile(`%[-+#0-9.]*[a-zA-Z]|: |; | \(|\)|"|, got`)
	checked := map[string]bool{}
	for _, text := range userTexts(t, ".", "internal/blobstore") {
		text = strings.ReplaceAll(text, "%%", "%")
		longest := ""
		for _, piece := range verbs.Split(text, -1) {
			piece = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(piece), "leaderelection:"))
			if len(piece) > len(longest) {
				longest = piece
			}
		}
		if len(longest) < 15 || internalTexts[longest] != "" || checked[longest] {
			continue
		}
		checked[longest] = true
		assert.True(t, strings.Contains(doc, longest), "the library says %q, which troubleshooting.md does not explain", text)
	}
	assert.Greater(t, len(checked), 150, "texts checked")
	var src strings.Builder
	for _, pattern := range []string{"*.go", "internal/blobstore/*.go"} {
		files, err := filepath.Glob(pattern)
		require.NoError(t, err)
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				src.WriteString(readDoc(t, f))
			}
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:var )?(Err[A-Z]\w*)\s*=`).FindAllStringSubmatch(src.String(), -1) {
		assert.True(t, strings.Contains(doc, "`"+m[1]+"`"), "troubleshooting.md does not name the sentinel %s", m[1])
	}
}

// A newcomer finds, from the README alone and before its install
// instructions, where the guarantee is argued: its guarantees link to the
// safety argument and to the code comment that holds it. (The two quick
// starts are kept by the tests above.)
func TestREADMEShowsWhereTheGuaranteeIsArgued(t *testing.T) {
	readme := readDoc(t, "README.md")
	_, section, ok := strings.Cut(readme, "\n## What it guarantees\n")
	require.True(t, ok, "README has its guarantees")
	section, rest, ok := strings.Cut(section, "\n## ")
	require.True(t, ok)
	assert.True(t, strings.HasPrefix(rest, "Install"), "the guarantees come right before Install")
	assert.Contains(t, section, "](docs/guarantees.md#the-safety-argument)")
	assert.Contains(t, section, "](renew.go)")
	assert.LessOrEqual(t, strings.Count(section, "\n- "), 7, "at most seven guarantees")
}
