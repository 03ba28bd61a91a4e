package workflows_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The one list of version markers is workflows/versions.go
// (docs/versioning.md). These tests read the package's source.

const (
	versionsFile   = "versions.go"
	workflowImport = "go.temporal.io/sdk/workflow"
	// retiredVar names the list of change IDs never to be used again.
	retiredVar = "retiredVersionIDs"
)

// marker is one entry of the list.
type marker struct {
	name, id string
	doc      string
	pos      token.Position
}

// markerList is what versions.go declares.
type markerList struct {
	markers []marker
	retired []string
}

var (
	changeIDPattern = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	// addedPattern is an entry's "Added:" line: the date and commit of the
	// change that introduced the ID, or "pending" before it is committed.
	addedPattern = regexp.MustCompile(`Added: (?:(\d{4}-\d{2}-\d{2}) ([0-9a-f]{7,40})|pending)\b`)
)

// parseDir parses every Go file of dir, tests included.
func parseDir(t *testing.T, dir string) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		require.NoError(t, err)
		files[filepath.Base(p)] = f
	}
	return fset, files
}

// readMarkers reads the list: every constant of versions.go is a marker.
func readMarkers(fset *token.FileSet, f *ast.File) (markerList, []string) {
	var list markerList
	var problems []string
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			switch {
			case gen.Tok == token.CONST:
				for i, name := range vs.Names {
					pos := fset.Position(name.Pos())
					if i >= len(vs.Values) {
						problems = append(problems, fmt.Sprintf("%s: %s has no value of its own", pos, name.Name))
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						problems = append(problems, fmt.Sprintf("%s: %s is not a string literal", pos, name.Name))
						continue
					}
					id, _ := strconv.Unquote(lit.Value)
					doc := vs.Doc.Text()
					if doc == "" && len(gen.Specs) == 1 {
						doc = gen.Doc.Text()
					}
					list.markers = append(list.markers, marker{name: name.Name, id: id, doc: doc, pos: pos})
				}
			case gen.Tok == token.VAR && len(vs.Names) == 1 && vs.Names[0].Name == retiredVar:
				if cl, ok := vs.Values[0].(*ast.CompositeLit); ok {
					for _, e := range cl.Elts {
						if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							id, _ := strconv.Unquote(lit.Value)
							list.retired = append(list.retired, id)
						}
					}
				}
			}
		}
	}
	return list, problems
}

// versionCall is one workflow.GetVersion call and the change ID argument
// it passes, as written.
type versionCall struct {
	pos  token.Position
	arg  ast.Expr
	file string
}

// versionCalls finds every GetVersion and GetVersionWithOptions call on the
// SDK's workflow package, whatever it is imported as.
func versionCalls(fset *token.FileSet, files map[string]*ast.File) []versionCall {
	var calls []versionCall
	for name, f := range files {
		pkgNames := map[string]bool{}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == workflowImport {
				local := "workflow"
				if imp.Name != nil {
					local = imp.Name.Name
				}
				pkgNames[local] = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "GetVersion" && sel.Sel.Name != "GetVersionWithOptions") {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || !pkgNames[x.Name] {
				return true
			}
			vc := versionCall{pos: fset.Position(call.Pos()), file: name}
			if len(call.Args) > 1 {
				vc.arg = call.Args[1]
			}
			calls = append(calls, vc)
			return true
		})
	}
	slices.SortFunc(calls, func(a, b versionCall) int { return strings.Compare(a.pos.String(), b.pos.String()) })
	return calls
}

// checkMarkers reports every way the package departs from its one list:
// a GetVersion call whose change ID is not a constant of the list, a
// listed marker no workflow code calls, an entry without its why, where,
// when, histories and retire rule, a malformed or repeated ID, and an ID
// that was retired.
func checkMarkers(fset *token.FileSet, files map[string]*ast.File) (markerList, []string) {
	vf, ok := files[versionsFile]
	if !ok {
		return markerList{}, []string{versionsFile + " is missing"}
	}
	list, problems := readMarkers(fset, vf)
	byName := map[string]marker{}
	byID := map[string]string{}
	for _, m := range list.markers {
		byName[m.name] = m
		if other, dup := byID[m.id]; dup {
			problems = append(problems, fmt.Sprintf("%s: %s repeats %s's change ID %q", m.pos, m.name, other, m.id))
		}
		byID[m.id] = m.name
		if !changeIDPattern.MatchString(m.id) {
			problems = append(problems, fmt.Sprintf("%s: %s's change ID %q is not lower-case words joined by '-'", m.pos, m.name, m.id))
		}
		if slices.Contains(list.retired, m.id) {
			problems = append(problems, fmt.Sprintf("%s: %s reuses the retired change ID %q", m.pos, m.name, m.id))
		}
		for _, field := range []string{"Where:", "Histories:", "Retire:"} {
			if !strings.Contains(m.doc, field) {
				problems = append(problems, fmt.Sprintf("%s: %s's entry has no %q line", m.pos, m.name, field))
			}
		}
		if !addedPattern.MatchString(m.doc) {
			problems = append(problems, fmt.Sprintf("%s: %s's entry has no \"Added: YYYY-MM-DD commit\" line", m.pos, m.name))
		}
		if strings.TrimSpace(strings.SplitN(m.doc, "\n\n", 2)[0]) == "" || !strings.HasPrefix(m.doc, m.name+" ") {
			problems = append(problems, fmt.Sprintf("%s: %s's entry does not start by saying why %s exists", m.pos, m.name, m.name))
		}
	}
	used := map[string]bool{}
	for _, c := range versionCalls(fset, files) {
		id, ok := c.arg.(*ast.Ident)
		switch {
		case c.arg == nil:
			problems = append(problems, fmt.Sprintf("%s: GetVersion without a change ID", c.pos))
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: GetVersion's change ID must be a constant of %s, not an expression or literal", c.pos, versionsFile))
		case byName[id.Name].name == "":
			problems = append(problems, fmt.Sprintf("%s: GetVersion's change ID %s is not listed in %s", c.pos, id.Name, versionsFile))
		case !strings.HasSuffix(c.file, "_test.go"):
			used[id.Name] = true
		}
	}
	for _, m := range list.markers {
		if !used[m.name] {
			problems = append(problems, fmt.Sprintf("%s: %s (%q) is listed but no workflow calls GetVersion with it: "+
				"a retired marker keeps its call as GetVersion(ctx, id, 1, 1) (docs/versioning.md)", m.pos, m.name, m.id))
		}
	}
	return list, problems
}

// Every GetVersion call in the package names a constant of versions.go,
// and every constant there is called; each entry says why, where, when,
// which histories and how to retire it.
func TestVersionMarkers_OneList(t *testing.T) {
	fset, files := parseDir(t, ".")
	list, problems := checkMarkers(fset, files)
	assert.Empty(t, problems)
	require.NotEmpty(t, list.markers)
	for _, m := range list.markers {
		for _, f := range files {
			// The constants are declared once, in the list.
			if f == files[versionsFile] {
				continue
			}
			for _, d := range f.Decls {
				if gen, ok := d.(*ast.GenDecl); ok && gen.Tok == token.CONST {
					for _, s := range gen.Specs {
						for _, n := range s.(*ast.ValueSpec).Names {
							assert.NotEqual(t, m.name, n.Name, "%s is declared outside %s", m.name, versionsFile)
						}
					}
				}
			}
		}
	}
}

// The check catches each way a package could depart from the list.
func TestVersionMarkers_CheckCatchesDepartures(t *testing.T) {
	const entry = `
	// %[1]s exists for a reason.
	//
	// Where: W.
	// Added: 2026-12-03 abcdef1.
	// Histories: none.
	// Retire: the rule.
	%[1]s = %[2]q
`
	versions := "package workflows\n\nconst (" +
		fmt.Sprintf(entry, "versionA", "change-a") +
		fmt.Sprintf(entry, "versionB", "change-b") +
		fmt.Sprintf(entry, "versionC", "change-a") +
		fmt.Sprintf(entry, "versionD", "old-name") +
		"\n\t// versionE has no entry.\n\tversionE = \"change-e\"\n)\n\nvar retiredVersionIDs = []string{\"old-name\"}\n"
	code := `package workflows

import wf "go.temporal.io/sdk/workflow"

const versionLocal = "local"

func f(ctx wf.Context) {
	_ = wf.GetVersion(ctx, versionA, wf.DefaultVersion, 1)
	_ = wf.GetVersion(ctx, "literal-id", wf.DefaultVersion, 1)
	_ = wf.GetVersionWithOptions(ctx, versionLocal, wf.DefaultVersion, 1, wf.GetVersionOptions{})
	_ = wf.GetVersion(ctx, versionC, wf.DefaultVersion, 1)
	_ = wf.GetVersion(ctx, versionD, wf.DefaultVersion, 1)
	_ = wf.GetVersion(ctx, versionE, wf.DefaultVersion, 1)
}
`
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, versionsFile), []byte(versions), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "code.go"), []byte(code), 0o644))
	fset, files := parseDir(t, dir)
	_, problems := checkMarkers(fset, files)
	all := strings.Join(problems, "\n")
	for _, want := range []string{
		"code.go:9:6: GetVersion's change ID must be a constant of versions.go, not an expression or literal",
		"versionLocal is not listed in versions.go",
		`versionB ("change-b") is listed but no workflow calls GetVersion with it`,
		`versionC repeats versionA's change ID "change-a"`,
		`versionD reuses the retired change ID "old-name"`,
		`versionE's entry has no "Retire:" line`,
		`versionE's entry has no "Added: YYYY-MM-DD commit" line`,
	} {
		assert.Contains(t, all, want)
	}
	assert.Len(t, problems, 9, all) // versionE also lacks Where: and Histories:
}

// Each entry's "Added:" is the date and commit of the first change to
// the workflows that wrote its change ID
// (git log -S'<id>' --format='%ad %h' --date=short -- workflows | tail -1),
// or "pending" while that change is not committed yet. Skipped without
// the repository's full history.
func TestVersionMarkers_AddedMatchesHistory(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	out, err := exec.Command("git", "rev-parse", "--is-shallow-repository").Output()
	if err != nil || strings.TrimSpace(string(out)) != "false" {
		t.Skip("not a git checkout with full history")
	}
	fset, files := parseDir(t, ".")
	list, _ := checkMarkers(fset, files)
	require.NotEmpty(t, list.markers)
	for _, m := range list.markers {
		got := addedPattern.FindStringSubmatch(m.doc)
		require.NotNil(t, got, m.name)
		log, err := exec.Command("git", "log", "-S"+m.id, "--format=%ad %H", "--date=short", "--", ".").Output()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("git log: %s", exit.Stderr)
		}
		require.NoError(t, err)
		lines := strings.Fields(strings.TrimSpace(string(log)))
		if len(lines) < 2 {
			assert.Equal(t, "Added: pending", got[0], "%s: %q is in no commit yet", m.name, m.id)
			continue
		}
		date, commit := lines[len(lines)-2], lines[len(lines)-1]
		assert.Equal(t, date, got[1], "%s: the date of the commit that added %q", m.name, m.id)
		assert.True(t, strings.HasPrefix(commit, got[2]), "%s: added %q in %s, not %s", m.name, m.id, commit, got[2])
	}
}
