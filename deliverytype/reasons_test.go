package deliverytype_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/deliverytype"
)

// TestReasonsListsEveryReason: the reason gauge reports one series per
// entry of Reasons, so a reason constant missing from it would never show
// on a dashboard. Every Reason* constant of deliverytype.go but ReasonNone
// must be listed, once.
func TestReasonsListsEveryReason(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "deliverytype.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if !strings.HasPrefix(name.Name, "Reason") || name.Name == "ReasonNone" || i >= len(vs.Values) {
				continue
			}
			if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
				v, _ := strconv.Unquote(lit.Value)
				consts = append(consts, v)
			}
		}
		return true
	})
	if len(consts) < 12 {
		t.Fatalf("found only %d reason constants in deliverytype.go", len(consts))
	}
	for _, c := range consts {
		if !slices.Contains(deliverytype.Reasons, deliverytype.Reason(c)) {
			t.Errorf("reason %q is missing from deliverytype.Reasons", c)
		}
	}
	if len(deliverytype.Reasons) != len(consts) {
		t.Errorf("deliverytype.Reasons has %d entries, deliverytype.go %d reason constants", len(deliverytype.Reasons), len(consts))
	}
}
