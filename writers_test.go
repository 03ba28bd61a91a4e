package supportflow_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readOnlyTables are the tables the migrations create that no package of
// the module writes, each with the reason. (None today: every table has a
// writer.)
var readOnlyTables = map[string]string{}

// ledgerTables are the only tables package ledger writes: the ledger is
// the actions and their legs, nothing else.
var ledgerTables = []string{"action", "action_leg"}

// testInfrastructure are the module's directories of non-_test.go files
// that are test infrastructure, not the product, and are not scanned:
// their SQL (seeding a database for a test, a benchmark or a demo) is no
// writer of the product's. Directories with a go.mod of their own (other
// modules), testdata and hidden directories are not scanned either.
var testInfrastructure = map[string]string{
	"bench":           "the benchmark: a module of its own, seeding tables to measure",
	"tests":           "the end-to-end tests",
	"internal/devenv": "the development PostgreSQL and Temporal the tests and the local run start",
	"internal/standin": "the stand-ins for Zendesk, the subscription service, the model and " +
		"BigQuery that tests and the local run use",
}

// TestContract_OneWriterPerTable holds every table to one writing package,
// so who owns a table has one answer. It parses every non-test .go file of
// the module (skipping _test.go files and testInfrastructure: bench/,
// tests/, internal/devenv and internal/standin) and finds
// the SQL writes in its string literals: INSERT INTO t, UPDATE t SET,
// DELETE FROM t, TRUNCATE t, and pgx's CopyFrom(ctx, pgx.Identifier{"t"},
// ...). A write whose table is a format verb (DELETE FROM %[1]s, a prune
// helper) is resolved through the helper's `table` parameter: every call
// of the helper in its package must pass a string literal or a string
// constant there. Each table written must have exactly one writing
// package and be created by the migrations; each table the migrations
// leave must be written by some package or be listed in readOnlyTables
// with its reason; and package ledger writes ledgerTables only. Reading
// another package's table is allowed.
func TestContract_OneWriterPerTable(t *testing.T) {
	writers := sqlWriters(t, ".")
	schema := migratedTables(t, "migrations")
	require.NotEmpty(t, schema, "the migrations create tables")
	require.GreaterOrEqual(t, len(writers), len(schema)/2, "the parser found the module's writes")

	tables := slices.Sorted(maps.Keys(writers))
	var b strings.Builder
	b.WriteString("table ownership (table: writing package, where):\n")
	for _, tb := range tables {
		pkgs := slices.Sorted(maps.Keys(writers[tb]))
		for _, p := range pkgs {
			b.WriteString("  " + tb + ": " + p + " (" + strings.Join(writers[tb][p], ", ") + ")\n")
		}
		if len(pkgs) != 1 {
			t.Errorf("table %s has %d writing packages, want one: %s", tb, len(pkgs), strings.Join(pkgs, ", "))
		}
		if !schema[tb] {
			t.Errorf("table %s is written (%s) but no migration creates it (or one dropped it)", tb, strings.Join(pkgs, ", "))
		}
		if why, ok := readOnlyTables[tb]; ok {
			t.Errorf("table %s is listed read-only (%s) but %s writes it", tb, why, strings.Join(pkgs, ", "))
		}
	}
	for _, tb := range slices.Sorted(maps.Keys(schema)) {
		if _, written := writers[tb]; written {
			continue
		}
		if why, ok := readOnlyTables[tb]; ok {
			b.WriteString("  " + tb + ": read-only (" + why + ")\n")
			continue
		}
		t.Errorf("table %s is created by the migrations but no package writes it; give it a writer or list it in readOnlyTables with the reason", tb)
	}
	t.Log(b.String())

	var ledgerWrites []string
	for tb, pkgs := range writers {
		if _, ok := pkgs["ledger"]; ok {
			ledgerWrites = append(ledgerWrites, tb)
		}
	}
	sort.Strings(ledgerWrites)
	assert.Equal(t, ledgerTables, ledgerWrites, "package ledger writes the actions and their legs only")
}

// Write statements in a string literal. Keywords are matched in any case;
// a match whose "table" is not a table (prose in a message) fails the
// test as an unknown table, to be reworded.
var (
	tableName = `((?:[A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*|%(?:\[\d+\])?[sv])`
	sqlWrites = []*regexp.Regexp{
		regexp.MustCompile(`(?i)\bINSERT\s+INTO\s+` + tableName),
		regexp.MustCompile(`(?i)\bDELETE\s+FROM\s+(?:ONLY\s+)?` + tableName),
		// UPDATE t [[AS] alias] SET, so that SELECT ... FOR UPDATE and
		// ON CONFLICT ... DO UPDATE SET are not writes of their own.
		regexp.MustCompile(`(?i)\bUPDATE\s+(?:ONLY\s+)?` + tableName + `(?:\s+(?:AS\s+)?[A-Za-z_][A-Za-z0-9_]*)?\s+SET\b`),
		regexp.MustCompile(`(?i)\bTRUNCATE\s+(?:TABLE\s+)?(?:ONLY\s+)?` + tableName),
	}
	// A literal that ends where its table name should be: the name is
	// concatenated, which the test cannot follow.
	dangling = regexp.MustCompile(`(?i)\b(?:INSERT\s+INTO|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?)\s*$`)
	verb     = regexp.MustCompile(`^%(?:\[\d+\])?[sv]$`)
)

// sqlWriters returns table -> module-relative package directory -> the
// places (file:line) that write it, for the module rooted at root.
func sqlWriters(t *testing.T, root string) map[string]map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if _, ok := testInfrastructure[rel]; ok {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		pkgs[dir] = append(pkgs[dir], f)
		return nil
	})
	require.NoError(t, err)

	writers := map[string]map[string][]string{}
	add := func(table, pkg string, pos token.Pos) {
		table = strings.TrimPrefix(strings.ToLower(table), "public.")
		if writers[table] == nil {
			writers[table] = map[string][]string{}
		}
		p := fset.Position(pos)
		file, err := filepath.Rel(root, p.Filename)
		if err != nil {
			file = p.Filename
		}
		writers[table][pkg] = append(writers[table][pkg], filepath.ToSlash(file)+":"+strconv.Itoa(p.Line))
	}
	for dir, files := range pkgs {
		pkg := dir
		if pkg == "." {
			pkg = "(module root)"
		}
		consts := stringConsts(files)
		// helpers: a function whose literal writes a formatted table name
		// -> the index of its `table` parameter.
		helpers := map[string]int{}
		for _, f := range files {
			inspectLiterals(f, func(fn *ast.FuncDecl, lit *ast.BasicLit, s string) {
				if dangling.MatchString(s) {
					t.Errorf("%s: a write whose table name is concatenated to the literal; spell it out, or format it in a helper with a `table` parameter", fset.Position(lit.Pos()))
				}
				for _, re := range sqlWrites {
					for _, m := range re.FindAllStringSubmatch(s, -1) {
						name := m[1]
						switch {
						case strings.EqualFold(name, "set"):
							continue
						case verb.MatchString(name):
							idx := tableParam(fn)
							if idx < 0 {
								t.Errorf("%s: a write to a formatted table name outside a function with a `table string` parameter; the test cannot tell which table it writes", fset.Position(lit.Pos()))
								continue
							}
							helpers[fn.Name.Name] = idx
						default:
							add(name, pkg, lit.Pos())
						}
					}
				}
			})
		}
		// Every call of a helper names its table.
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				var name string
				switch fun := call.Fun.(type) {
				case *ast.Ident:
					name = fun.Name
				case *ast.SelectorExpr:
					name = fun.Sel.Name
					if name == "CopyFrom" && len(call.Args) >= 2 {
						if cl, ok := call.Args[1].(*ast.CompositeLit); ok {
							if tb, ok := identifierTable(cl, consts); ok {
								add(tb, pkg, call.Pos())
							} else {
								t.Errorf("%s: CopyFrom into a table the test cannot read; name it with a pgx.Identifier of literals", fset.Position(call.Pos()))
							}
						}
						return true
					}
				}
				idx, ok := helpers[name]
				if !ok {
					return true
				}
				if idx >= len(call.Args) {
					t.Errorf("%s: call of %s without its table", fset.Position(call.Pos()), name)
					return true
				}
				tb, ok := stringValue(call.Args[idx], consts)
				if !ok {
					t.Errorf("%s: %s is called with a table that is not a string literal or constant; the test cannot tell which table it writes", fset.Position(call.Pos()), name)
					return true
				}
				add(tb, pkg, call.Pos())
				return true
			})
		}
	}
	return writers
}

// inspectLiterals calls fn for every string literal of f with its
// enclosing function declaration (nil at package level) and its value.
func inspectLiterals(f *ast.File, fn func(*ast.FuncDecl, *ast.BasicLit, string)) {
	visit := func(decl *ast.FuncDecl, n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil {
				fn(decl, lit, s)
			}
			return true
		})
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			visit(fd, fd)
		} else {
			visit(nil, d)
		}
	}
}

// tableParam is the index of fn's parameter named table, or -1.
func tableParam(fn *ast.FuncDecl) int {
	if fn == nil {
		return -1
	}
	i := 0
	for _, field := range fn.Type.Params.List {
		if len(field.Names) == 0 {
			i++
			continue
		}
		for _, n := range field.Names {
			if n.Name == "table" {
				return i
			}
			i++
		}
	}
	return -1
}

// stringConsts are the package's string constants.
func stringConsts(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if s, err := strconv.Unquote(lit.Value); err == nil {
								out[n.Name] = s
							}
						}
					}
				}
			}
		}
	}
	return out
}

func stringValue(e ast.Expr, consts map[string]string) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(v.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[v.Name]
		return s, ok
	}
	return "", false
}

// identifierTable reads pgx.Identifier{"schema", "table"} or {"table"}.
func identifierTable(cl *ast.CompositeLit, consts map[string]string) (string, bool) {
	if len(cl.Elts) == 0 {
		return "", false
	}
	var parts []string
	for _, e := range cl.Elts {
		s, ok := stringValue(e, consts)
		if !ok {
			return "", false
		}
		parts = append(parts, s)
	}
	return parts[len(parts)-1], true
}

// migratedTables replays the up halves of the migrations in dir, in
// order (CREATE TABLE, DROP TABLE, ALTER TABLE ... RENAME TO), and returns
// the tables that are left.
func migratedTables(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	require.NoError(t, err)
	sort.Strings(files)
	stmt := regexp.MustCompile(`(?is)\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_.]*)` +
		`|\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_.,\s]*?)\s*(?:CASCADE|RESTRICT)?\s*;` +
		`|\bALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s+RENAME\s+TO\s+([A-Za-z_][A-Za-z0-9_]*)`)
	comment := regexp.MustCompile(`--[^\n]*`)
	norm := func(s string) string { return strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "public.") }
	tables := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		up, _, _ := strings.Cut(string(src), "---- create above / drop below ----")
		up = comment.ReplaceAllString(up, "")
		for _, m := range stmt.FindAllStringSubmatch(up, -1) {
			switch {
			case m[1] != "":
				tables[norm(m[1])] = true
			case m[2] != "":
				for _, name := range strings.Split(m[2], ",") {
					delete(tables, norm(name))
				}
			case m[3] != "":
				delete(tables, norm(m[3]))
				tables[norm(m[4])] = true
			}
		}
	}
	return tables
}

// The guard finds what it should and nothing else: literal writes in any
// case, a prune helper's tables through its callers (literal or constant),
// CopyFrom; not SELECT ... FOR UPDATE, ON CONFLICT ... DO UPDATE SET, prose,
// _test.go files, test infrastructure or another module.
func TestContract_OneWriterPerTable_Parser(t *testing.T) {
	root := t.TempDir()
	write := func(path, src string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, path), []byte(src), 0o644))
	}
	write("a/a.go", "package a\n\nconst q = `insert into t (x) VALUES (1) ON CONFLICT (x) DO UPDATE SET x = 2`\n"+
		"const r = `SELECT 1 FROM u WHERE id = $1 FOR UPDATE SKIP LOCKED`\n"+
		"const prose = \"update the ticket and then delete it\"\n"+
		"func f(db interface{ CopyFrom(...any) }) { db.CopyFrom(nil, pgxIdentifier{\"public\", \"c\"}, nil) }\n"+
		"type pgxIdentifier []string\n")
	write("b/b.go", "package b\n\nimport \"fmt\"\n\nconst tableU = \"u\"\n"+
		"func prune(table, where string) string { return fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid IN (SELECT ctid FROM %[1]s WHERE %[2]s)`, table, where) }\n"+
		"func g() { prune(\"t\", \"true\"); prune(tableU, \"true\") }\n"+
		"const v = `UPDATE v AS x SET y = 1`\n")
	write("b/b_test.go", "package b\n\nconst w = `INSERT INTO w VALUES (1)`\n")
	write("tests/e.go", "package tests\n\nconst w = `INSERT INTO w VALUES (1)`\n")
	write("other/go.mod", "module other\n")
	write("other/o.go", "package other\n\nconst w = `TRUNCATE w`\n")
	got := map[string][]string{}
	for tb, pkgs := range sqlWriters(t, root) {
		for p := range pkgs {
			got[tb] = append(got[tb], p)
		}
		sort.Strings(got[tb])
	}
	assert.Equal(t, map[string][]string{"t": {"a", "b"}, "u": {"b"}, "c": {"a"}, "v": {"b"}}, got)
}
