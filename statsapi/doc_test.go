package statsapi_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestOutboxStatsDocMatchesTheServer: OutboxStats's documentation says
// what the server serves while the archive is closed for repair, the last
// committed accounting (server/TestStatsArchiveValuesNeverNegative pins the
// behaviour), and no longer that the archive fields are null then, as it
// wrongly did (issue #48, item 7).
func TestOutboxStatsDocMatchesTheServer(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "stats.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	ast.Inspect(f, func(n ast.Node) bool {
		if g, ok := n.(*ast.GenDecl); ok && len(g.Specs) == 1 {
			if ts, ok := g.Specs[0].(*ast.TypeSpec); ok && ts.Name.Name == "OutboxStats" {
				doc = g.Doc.Text()
				for _, fl := range ts.Type.(*ast.StructType).Fields.List {
					doc += fl.Doc.Text()
				}
			}
		}
		return true
	})
	doc = strings.Join(strings.Fields(doc), " ")
	if doc == "" {
		t.Fatal("no OutboxStats in stats.go")
	}
	for _, want := range []string{"the last committed accounting, also while the archive is closed", "the last committed count while it is closed"} {
		if !strings.Contains(doc, want) {
			t.Errorf("OutboxStats's doc does not say %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "null when there is no destination or the archive is not open") {
		t.Errorf("OutboxStats's doc says the archive fields are null while the archive is not open:\n%s", doc)
	}
}
