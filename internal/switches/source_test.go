package switches

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// dflashName matches a DFLASH_* name standing alone (not FLEX_DFLASH_BLOCK).
var dflashName = regexp.MustCompile(`\bDFLASH_[A-Z0-9_]+\b`)

// TestOnlyTheRegistryReadsSwitches walks the module's non-test Go files and
// fails where one reads a DFLASH_* variable from the environment outside this
// package (os.Getenv or os.LookupEnv of a literal or of a constant holding
// the name), or a string literal names a DFLASH_* variable the table does
// not declare.
func TestOnlyTheRegistryReadsSwitches(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	self, _ := filepath.Abs(".")
	declaredNames := map[string]bool{}
	for _, s := range all {
		declaredNames[s.info().Name] = true
	}
	type file struct {
		path string
		f    *ast.File
	}
	var files []file
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "testdata-cache") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, file{path, f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d Go files under %s: not the module's tree", len(files), root)
	}
	// Constants whose value is a DFLASH_* name, by name (in any package).
	consts := map[string]string{}
	for _, f := range files {
		ast.Inspect(f.f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, v := range vs.Values {
					if s, ok := stringLit(v); ok && dflashName.MatchString(s) && i < len(vs.Names) {
						consts[vs.Names[i].Name] = s
					}
				}
			}
			return true
		})
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f.path)
		at := func(n ast.Node) string { return fmt.Sprintf("%s:%d", rel, fset.Position(n.Pos()).Line) }
		inRegistry := filepath.Dir(f.path) == self
		osName := ""
		for _, imp := range f.f.Imports {
			if imp.Path.Value == `"os"` {
				osName = "os"
				if imp.Name != nil {
					osName = imp.Name.Name
				}
			}
		}
		ast.Inspect(f.f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				s, _ := stringLit(n)
				for _, m := range dflashName.FindAllString(s, -1) {
					if !declaredNames[m] {
						t.Errorf("%s: %s is not declared in internal/switches/table.go", at(n), m)
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || len(n.Args) != 1 || inRegistry || osName == "" {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != osName || sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv" {
					return true
				}
				if name := envName(n.Args[0], consts); name != "" {
					t.Errorf("%s: os.%s(%s) reads a switch: read it through internal/switches", at(n), sel.Sel.Name, name)
				}
			}
			return true
		})
	}
}

// stringLit returns the value of a string literal.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// envName returns the DFLASH_* name that e, an argument of os.Getenv, spells
// (a literal, or a constant or pkg.Constant holding one), or "".
func envName(e ast.Expr, consts map[string]string) string {
	if s, ok := stringLit(e); ok {
		if strings.HasPrefix(s, "DFLASH_") {
			return s
		}
		return ""
	}
	switch e := e.(type) {
	case *ast.Ident:
		return consts[e.Name]
	case *ast.SelectorExpr:
		return consts[e.Sel.Name]
	}
	return ""
}
