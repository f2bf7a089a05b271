package leaderelection

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// userTexts returns the string literals of the non-test Go files in dirs
// (each a package) that can reach a user: in an error (errors.New,
// fmt.Errorf), in a settings or record rule (a Rule field), in a
// StorageError's detail (a detail or Detail field), or in a log line at Warn
// or Error (Warn, Error, and Log at a level that can be either). A literal
// counts wherever it comes from: written in place, a constant, a local
// variable assigned it, what a function of the package returns, or an
// argument its callers pass for a parameter that flows there (a closure such
// as Validate's bad, a wrapper such as failureLog.failed). Concatenated
// literals count as one text.
func userTexts(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, dir := range dirs {
		out = append(out, packageTexts(t, dir)...)
	}
	return out
}

// textFinder resolves the expressions of one package to the literals they
// can hold.
type textFinder struct {
	info    *types.Info                 // what each name denotes
	funcs   map[string][]*ast.FuncDecl  // the package's funcs and methods, by name
	assigns map[types.Object][]ast.Expr // what each local variable is assigned
	params  map[types.Object]param      // the parameters of funcs and named closures
	callers map[string][]*ast.CallExpr  // every call, by the name called
	seen    map[ast.Node]bool           // expressions and funcs followed
	sinks   map[param]bool              // parameters that flow into a text
	texts   []string
}

// param is a func's (or named closure's) parameter, by position.
type param struct {
	fn       string
	idx      int
	variadic bool // a format's values, not a text
}

func packageTexts(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	f := &textFinder{funcs: map[string][]*ast.FuncDecl{}, assigns: map[types.Object][]ast.Expr{},
		params: map[types.Object]param{}, callers: map[string][]*ast.CallExpr{},
		seen: map[ast.Node]bool{}, sinks: map[param]bool{}}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, p, nil, 0)
		require.NoError(t, err)
		files = append(files, file)
	}
	// Only the package's own names are needed: imports are left
	// unresolved (go/types then stands in a fake package for each), and
	// the errors that leaves are ignored.
	f.info = &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}, Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: noImports{}, Error: func(error) {}}
	_, _ = conf.Check(dir, fset, files, f.info)
	for _, file := range files {
		f.index(file)
	}
	for _, file := range files {
		ast.Inspect(file, func(n ast.Node) bool {
			f.sink(n)
			return true
		})
	}
	// A parameter found to flow into a text makes its callers' arguments
	// texts, which may find more such parameters: until none is new.
	done := map[param]bool{}
	for len(done) < len(f.sinks) {
		for p := range f.sinks {
			if done[p] {
				continue
			}
			done[p] = true
			for _, call := range f.callers[p.fn] {
				if p.idx < len(call.Args) {
					f.follow(call.Args[p.idx])
				}
			}
		}
	}
	return f.texts
}

// index records file's declarations, assignments, parameters and calls.
func (f *textFinder) index(file *ast.File) {
	addParams := func(fn string, ft *ast.FuncType) {
		i := 0
		for _, field := range ft.Params.List {
			_, variadic := field.Type.(*ast.Ellipsis)
			for _, n := range field.Names {
				if obj := f.info.Defs[n]; obj != nil {
					f.params[obj] = param{fn, i, variadic}
				}
				i++
			}
		}
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			f.funcs[n.Name.Name] = append(f.funcs[n.Name.Name], n)
			addParams(n.Name.Name, n.Type)
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				id, ok := lhs.(*ast.Ident)
				obj := f.info.ObjectOf(id)
				if !ok || obj == nil {
					continue
				}
				rhs := n.Rhs[0] // a call's results: its texts are all of them
				if len(n.Rhs) == len(n.Lhs) {
					rhs = n.Rhs[i]
				}
				f.assigns[obj] = append(f.assigns[obj], rhs)
				if lit, ok := rhs.(*ast.FuncLit); ok {
					addParams(id.Name, lit.Type)
				}
			}
		case *ast.CallExpr:
			if name := calledName(n.Fun); name != "" {
				f.callers[name] = append(f.callers[name], n)
			}
		}
		return true
	})
}

// calledName is the name a call calls: a func, a closure's variable, a
// method.
func calledName(fun ast.Expr) string {
	switch fun := fun.(type) {
	case *ast.Ident:
		return fun.Name
	case *ast.SelectorExpr:
		return fun.Sel.Name
	}
	return ""
}

// textFields are the fields whose value a user reads: a rule, a
// StorageError's (or the storage package's Error's) detail.
var textFields = []string{"Rule", "detail", "Detail"}

// sink follows n's text if n puts one where a user reads it.
func (f *textFinder) sink(n ast.Node) {
	switch n := n.(type) {
	case *ast.KeyValueExpr:
		if id, ok := n.Key.(*ast.Ident); ok && slices.Contains(textFields, id.Name) {
			f.follow(n.Value)
		}
	case *ast.AssignStmt:
		for i, lhs := range n.Lhs {
			if sel, ok := lhs.(*ast.SelectorExpr); ok && slices.Contains(textFields, sel.Sel.Name) {
				rhs := n.Rhs[0]
				if len(n.Rhs) == len(n.Lhs) {
					rhs = n.Rhs[i]
				}
				f.follow(rhs)
			}
		}
	case *ast.CallExpr:
		if arg := f.messageArg(n); arg != nil {
			f.follow(arg)
		}
	}
}

// messageArg is the argument of call that is an error's or a Warn or Error
// log line's message, or nil.
func (f *textFinder) messageArg(call *ast.CallExpr) ast.Expr {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil
	}
	at := -1
	switch pkg, _ := sel.X.(*ast.Ident); {
	case pkg != nil && pkg.Name == "errors" && sel.Sel.Name == "New", pkg != nil && pkg.Name == "fmt" && sel.Sel.Name == "Errorf":
		at = 0
	case sel.Sel.Name == "Warn", sel.Sel.Name == "Error":
		at = 0
	case sel.Sel.Name == "WarnContext", sel.Sel.Name == "ErrorContext":
		at = 1
	case sel.Sel.Name == "Log" && len(call.Args) > 2 && f.mayWarn(call.Args[1]):
		at = 2
	}
	if at < 0 || at >= len(call.Args) {
		return nil
	}
	return call.Args[at]
}

// mayWarn reports whether a log level can be Warn or Error: it names one
// (slog.LevelWarn, or stopLevel(slog.LevelError)), or is a variable
// assigned one.
func (f *textFinder) mayWarn(level ast.Expr) bool {
	names := func(e ast.Expr) bool {
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && (sel.Sel.Name == "LevelWarn" || sel.Sel.Name == "LevelError") {
				found = true
			}
			return !found
		})
		return found
	}
	if id, ok := level.(*ast.Ident); ok && f.info.ObjectOf(id) != nil {
		return slices.ContainsFunc(f.assigns[f.info.ObjectOf(id)], names)
	}
	return names(level)
}

// follow collects the texts e can hold.
func (f *textFinder) follow(e ast.Expr) {
	if e == nil || f.seen[e] {
		return
	}
	f.seen[e] = true
	if s, ok := f.constant(e); ok {
		f.texts = append(f.texts, s)
		return
	}
	switch e := e.(type) {
	case *ast.BinaryExpr:
		f.follow(e.X)
		f.follow(e.Y)
	case *ast.ParenExpr:
		f.follow(e.X)
	case *ast.Ident:
		obj := f.info.ObjectOf(e)
		if p, ok := f.params[obj]; ok {
			if !p.variadic {
				f.sinks[p] = true
			}
			return
		}
		for _, rhs := range f.assigns[obj] {
			f.follow(rhs)
		}
	case *ast.CallExpr:
		name := calledName(e.Fun)
		external := false
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok {
			if pkg, ok := sel.X.(*ast.Ident); ok {
				_, external = f.info.ObjectOf(pkg).(*types.PkgName)
			}
		}
		if external || len(f.funcs[name]) == 0 {
			for _, arg := range e.Args {
				f.follow(arg)
			}
			return
		}
		for _, fd := range f.funcs[name] {
			f.followReturns(fd)
		}
	}
}

// followReturns collects the texts fd can return.
func (f *textFinder) followReturns(fd *ast.FuncDecl) {
	if fd.Body == nil || f.seen[fd] {
		return
	}
	f.seen[fd] = true
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok {
			return false
		}
		if ret, ok := n.(*ast.ReturnStmt); ok {
			for _, r := range ret.Results {
				f.follow(r)
			}
		}
		return true
	})
}

// constant is e's value if e is a constant string: a literal, a constant,
// or a sum of them.
func (f *textFinder) constant(e ast.Expr) (string, bool) {
	tv, ok := f.info.Types[e]
	if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
		return "", false
	}
	return constant.StringVal(tv.Value), true
}

// noImports leaves every import unresolved.
type noImports struct{}

func (noImports) Import(path string) (*types.Package, error) {
	return nil, fmt.Errorf("not resolved: %s", path)
}

// The collector finds each kind of text, and follows each way a text
// travels, in a package written for the purpose.
func TestUserTextsAreFoundWhereverTheyComeFrom(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import (
	"errors"
	"fmt"
	"log/slog"
)

const gone = "const: the blob does not exist"

type E struct{ Rule, detail string }

func a(l *slog.Logger, x int) error {
	l.Warn("warn: " + "joined across lines")
	l.Error("error: logged")
	l.Info("info: never a user's text")
	l.Log(nil, slog.LevelDebug, "debug: never a user's text")
	level := slog.LevelInfo
	if x > 1 {
		level = slog.LevelWarn
	}
	l.Log(nil, level, "log: at a level that may warn")
	bad := func(field, format string, args ...any) error { return &E{Rule: fmt.Sprintf(format, args...)} }
	_ = bad("F", "closure: a rule through a parameter", "variadic: a value, not a text")
	_ = E{detail: gone}
	_ = E{detail: why(x)}
	var f failures
	f.failed(l, "wrapper: a message through a method")
	rule := "local: assigned"
	rule += "local: appended"
	_ = E{Rule: rule}
	if x > 0 {
		return fmt.Errorf("errorf: %d", x)
	}
	_ = fmt.Sprintf("sprintf: nobody reads this")
	return errors.New("new: an error")
}

func why(x int) string {
	if x > 0 {
		return "returned: " + fmt.Sprint(x)
	}
	return inner()
}

func inner() string { return "returned: by a function it returns" }

type failures struct{}

func (failures) failed(l *slog.Logger, msg string) { l.Warn(msg) }
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644))
	got := userTexts(t, dir)
	slices.Sort(got)
	assert.Equal(t, []string{
		"closure: a rule through a parameter", "const: the blob does not exist", "error: logged", "errorf: %d",
		"local: appended", "local: assigned", "log: at a level that may warn", "new: an error",
		"returned: ", "returned: by a function it returns", "warn: joined across lines", "wrapper: a message through a method",
	}, got)
}
