package leaderelection

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The root package is one package, for its public types, built as floors
// whose references only point down (CONTRIBUTING.md, "Layout"):
//
//  1. the vocabulary: settings and options, errors, events, the term;
//  2. the blob lease and its record: the lease manager, the record and
//     what does not read in it, the ETag lease and the followers' rule, a
//     blob created again, the lease ID file;
//  3. the term engine: the safety fuse, the renewal loop, one term's run
//     from its grant to its release, what its func's context carries, its
//     health and metrics;
//  4. the elections, side by side and apart: the mutex (with its preferred
//     leader), and the ShardOwner (sessions, shards, claims, handoffs,
//     held lists). Neither uses the other.
//
// Under them, the leaf packages of internal/ import nothing of the root
// (TestLeafPackagesImportNothingOfTheRoot). This test reads the package with
// go/types and fails when a file uses an identifier declared in a file of a
// higher floor, or of the other election.
var tiers = map[string]string{
	"doc.go":      "1-vocabulary",
	"errors.go":   "1-vocabulary",
	"events.go":   "1-vocabulary",
	"options.go":  "1-vocabulary",
	"settings.go": "1-vocabulary",
	"term.go":     "1-vocabulary",

	"etaglease.go":      "2-lease",
	"lease.go":          "2-lease",
	"leaseterm.go":      "2-lease",
	"quorum.go":         "2-lease",
	"quorumterm.go":     "2-lease",
	"record.go":         "2-lease",
	"recreated.go":      "2-lease",
	"resume.go":         "2-lease",
	"resume_flock.go":   "2-lease",
	"resume_noflock.go": "2-lease",
	"silence.go":        "2-lease",

	"health.go":    "3-term",
	"metrics.go":   "3-term",
	"renew.go":     "3-term",
	"termrun.go":   "3-term",
	"termstate.go": "3-term",

	"mutex.go":       "4-mutex",
	"prefer.go":      "4-mutex",
	"quorummutex.go": "4-mutex",

	"membership.go":   "4-shards/1-state",
	"ownership.go":    "4-shards/1-state",
	"ownerstate.go":   "4-shards/1-state",
	"sessionproof.go": "4-shards/1-state",
	"sessionstate.go": "4-shards/1-state",
	"shardstate.go":   "4-shards/1-state",
	"termmemory.go":   "4-shards/1-state",

	"shardstore.go": "4-shards/2-store",

	"handoff.go":      "4-shards/3-parts",
	"handoffnotes.go": "4-shards/3-parts",
	"heldlist.go":     "4-shards/3-parts",
	"sessionjudge.go": "4-shards/3-parts",
	"shardfloors.go":  "4-shards/3-parts",
	"shardlog.go":     "4-shards/3-parts",
	"shardmetrics.go": "4-shards/3-parts",
	"shardrun.go":     "4-shards/3-parts",

	"shardtake.go": "4-shards/4-take",

	"handoffin.go":    "4-shards/5-pass",
	"shardbalance.go": "4-shards/5-pass",
	"shardclaim.go":   "4-shards/5-pass",
	"shardlist.go":    "4-shards/5-pass",

	"session.go":      "4-shards/6-session",
	"sessionfile.go":  "4-shards/6-session",
	"shardmanager.go": "4-shards/6-session",

	"shardinspect.go": "4-shards/7-owner",
	"shards.go":       "4-shards/7-owner",
}

// floor is a tier's height; the elections share the top floor.
func floor(tier string) int { return int(tier[0] - '0') }

// mayUse reports whether a file of tier from may use what a file of tier to
// declares: a lower floor's, or its own election's at its own sub-tier or
// below. The ShardOwner's files come in sub-tiers ("4-shards/3-parts"),
// lowest first: the shared state (the owner's and a session's, with the
// locks that guard it), the storage plumbing, the parts of a pass (judging
// sessions, term floors, runs, handovers given, held lists, logs and
// metrics), the one path to take a shard, a pass's steps (adopt, claim,
// list, balance), a session's loop, and the owner.
func mayUse(from, to string) bool {
	if floor(to) != floor(from) {
		return floor(to) < floor(from)
	}
	fromElection, fromSub, _ := strings.Cut(from, "/")
	toElection, toSub, _ := strings.Cut(to, "/")
	return fromElection == toElection && toSub <= fromSub
}

// rootFiles parses the root package's non-test files: all of them, or only
// those this platform builds.
func rootFiles(t *testing.T, fset *token.FileSet, built bool) []*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if ok, err := build.Default.MatchFile(".", name); built && (err != nil || !ok) {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		files = append(files, f)
	}
	return files
}

func TestEveryRootFileHasATier(t *testing.T) {
	fset := token.NewFileSet()
	for _, f := range rootFiles(t, fset, false) {
		name := fset.File(f.Pos()).Name()
		assert.Contains(t, tiers, name, "give %s a tier in tiers_test.go", name)
	}
	for name := range tiers {
		_, err := os.Stat(name)
		assert.NoError(t, err, "tiers_test.go names %s, which is gone", name)
	}
}

func TestRootFilesOnlyUseLowerTiers(t *testing.T) {
	fset := token.NewFileSet()
	files := rootFiles(t, fset, true)
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: exportImporter(t, fset)}
	pkg, err := conf.Check("github.com/blobelect/leaderelection", fset, files, info)
	require.NoError(t, err)
	fileOf := func(pos token.Pos) string { return filepath.Base(fset.Position(pos).Filename) }
	type arrow struct{ from, to, name string }
	bad := map[arrow][]string{}
	note := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return
		}
		from, to := fileOf(at), fileOf(obj.Pos())
		if from == to || mayUse(tiers[from], tiers[to]) {
			return
		}
		a := arrow{from, to, obj.Name()}
		bad[a] = append(bad[a], fset.Position(at).String())
	}
	for id, obj := range info.Uses {
		note(id.Pos(), obj)
	}
	for sel, s := range info.Selections {
		note(sel.Sel.Pos(), s.Obj())
	}
	var lines []string
	for a, at := range bad {
		sort.Strings(at)
		lines = append(lines, fmt.Sprintf("%s (%s) uses %s (%s) %s, at %s", a.from, tiers[a.from], a.to, tiers[a.to], a.name, at[0]))
	}
	slices.Sort(lines)
	assert.Empty(t, lines, "references that point up a floor, or across to the other election:\n%s", strings.Join(lines, "\n"))
}

// exportImporter imports the root package's dependencies from the export
// data the go command keeps in its build cache (go list -export), which is
// much faster than type-checking them from source.
func exportImporter(t *testing.T, fset *token.FileSet) types.Importer {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".").Output()
	require.NoError(t, err)
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "=")
		exports[path] = file
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}

// The leaf packages under internal/ that the library itself uses (the
// storage boundary, the wire format, the balancing arithmetic, a session's
// plan, the clocks, and the test twins) import nothing of the root: the
// compiler keeps the floors apart, as Go's import cycle rule forbids the
// other way.
func TestLeafPackagesImportNothingOfTheRoot(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./internal/...").Output()
	require.NoError(t, err)
	assert.NotContains(t, strings.Fields(string(out)), "github.com/blobelect/leaderelection",
		"a package under internal/ imports the root package")
	imports, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", ".").Output()
	require.NoError(t, err)
	require.Equal(t, "github.com/blobelect/leaderelection", strings.TrimSpace(string(imports)))
}
