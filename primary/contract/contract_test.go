package contract_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/primary/contract"
)

const orders = `
[commands.place_order]
input = { order_id = "string", amount_cents = "int", note = "string?" }
emits = ["order_placed"]

[commands.cancel_order]
input = { order_id = "string", refund = "bool", receipt = "bytes?" }
emits = ["order_cancelled", "refund.requested"]
`

func mustCompile(t testing.TB, src string) *contract.Contract {
	t.Helper()
	c, err := contract.Compile([]byte(src))
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return c
}

func TestCompile(t *testing.T) {
	c := mustCompile(t, orders)
	plans := c.Commands()
	if len(plans) != 2 || plans[0].Name != "cancel_order" || plans[1].Name != "place_order" {
		t.Fatalf("Commands() not sorted by name: %+v", plans)
	}
	p, ok := c.Command("place_order")
	if !ok {
		t.Fatal("place_order not found")
	}
	want := []contract.Field{
		{Name: "amount_cents", Type: "int"},
		{Name: "note", Type: "string", Optional: true},
		{Name: "order_id", Type: "string"},
	}
	if fmt.Sprint(p.Fields) != fmt.Sprint(want) {
		t.Fatalf("Fields = %+v, want %+v", p.Fields, want)
	}
	if fmt.Sprint(p.Emits) != "[order_placed]" {
		t.Fatalf("Emits = %v", p.Emits)
	}
	q, _ := c.Command("cancel_order")
	if fmt.Sprint(q.Emits) != "[order_cancelled refund.requested]" {
		t.Fatalf("Emits = %v, want contract order", q.Emits)
	}
	if _, ok := c.Command("nope"); ok {
		t.Fatal("unknown command found")
	}
	// Commands returns a copy.
	plans[0] = nil
	if c.Commands()[0] == nil {
		t.Fatal("Commands exposes its internal slice")
	}
}

func TestCompileErrors(t *testing.T) {
	long := strings.Repeat("a", 65)
	cases := []struct {
		name, src, mention string
	}{
		{"empty", ``, "no commands"},
		{"unknown top-level key", "version = 1\n[commands.a]\ninput = { x = \"int\" }\nemits = [\"e\"]", `"version"`},
		{"unknown command key", "[commands.a]\ninput = { x = \"int\" }\nemits = [\"e\"]\nretries = 3", `"commands.a.retries"`},
		{"bad type", "[commands.a]\ninput = { x = \"float\" }\nemits = [\"e\"]", `field "x" has unknown type "float"`},
		{"double optional", "[commands.a]\ninput = { x = \"int??\" }\nemits = [\"e\"]", `field "x"`},
		{"non-string type", "[commands.a]\ninput = { x = 1 }\nemits = [\"e\"]", `key "commands.a.input": unexpected TOML integer`},
		{"bad command name", "[commands.Place]\ninput = { x = \"int\" }\nemits = [\"e\"]", `command name "Place"`},
		{"command name with dash", "[commands.place-order]\ninput = { x = \"int\" }\nemits = [\"e\"]", `command name "place-order"`},
		{"long command name", "[commands." + long + "]\ninput = { x = \"int\" }\nemits = [\"e\"]", `command name`},
		{"bad field name", "[commands.a]\ninput = { X = \"int\" }\nemits = [\"e\"]", `command "a": field name "X"`},
		{"field name leading digit", "[commands.a]\ninput = { 1x = \"int\" }\nemits = [\"e\"]", `field name "1x"`},
		{"long field name", "[commands.a]\ninput = { " + long + " = \"int\" }\nemits = [\"e\"]", `field name`},
		{"no fields", "[commands.a]\ninput = {}\nemits = [\"e\"]", `command "a": input must declare`},
		{"missing input", "[commands.a]\nemits = [\"e\"]", `command "a": input must declare`},
		{"too many fields", "[commands.a]\ninput = { " + manyFields(65) + " }\nemits = [\"e\"]", `65 fields`},
		{"empty emits", "[commands.a]\ninput = { x = \"int\" }\nemits = []", `command "a": emits must list`},
		{"missing emits", "[commands.a]\ninput = { x = \"int\" }", `command "a": emits must list`},
		{"too many emits", "[commands.a]\ninput = { x = \"int\" }\nemits = [" + manyEmits(17) + "]", `17 event types`},
		{"bad event type", "[commands.a]\ninput = { x = \"int\" }\nemits = [\"Order\"]", `event type "Order"`},
		{"event type leading dot", "[commands.a]\ninput = { x = \"int\" }\nemits = [\".e\"]", `event type ".e"`},
		{"long event type", "[commands.a]\ninput = { x = \"int\" }\nemits = [\"" + strings.Repeat("e", 129) + "\"]", `event type`},
		{"duplicate event type", "[commands.a]\ninput = { x = \"int\" }\nemits = [\"e\", \"e\"]", `"e" is listed twice`},
		{"duplicate tables", "[commands.a]\ninput = { x = \"int\" }\nemits = [\"e\"]\n[commands.a]\ninput = { y = \"int\" }\nemits = [\"f\"]", `line 4`},
		{"duplicate keys", "[commands.a]\ninput = { x = \"int\", x = \"bool\" }\nemits = [\"e\"]", `line 2`},
		{"not toml", "[commands.a\n", `line 1`},
		{"commands not a table", "commands = 3", `key "commands": unexpected TOML integer`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := contract.Compile([]byte(tc.src))
			if !errors.Is(err, contract.ErrInvalidContract) {
				t.Fatalf("err = %v, want ErrInvalidContract", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err = %q, want it to mention %q", err, tc.mention)
			}
		})
	}
}

func TestCompileLimitsAccepted(t *testing.T) {
	long := "a" + strings.Repeat("b", 63)
	src := "[commands." + long + "]\ninput = { " + manyFields(64) + " }\nemits = [" + manyEmits(16) + "]\n" +
		"[commands.b]\ninput = { " + long + " = \"bytes?\" }\nemits = [\"e" + strings.Repeat(".", 127) + "\"]\n"
	c := mustCompile(t, src)
	p, _ := c.Command(long)
	if len(p.Fields) != 64 || len(p.Emits) != 16 {
		t.Fatalf("got %d fields, %d emits", len(p.Fields), len(p.Emits))
	}
}

func manyFields(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("f%d = \"int\"", i)
	}
	return strings.Join(parts, ", ")
}

func manyEmits(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("\"e%d\"", i)
	}
	return strings.Join(parts, ", ")
}

func TestPlanIDStable(t *testing.T) {
	a := mustCompile(t, orders)
	// Same plans written differently: other key order, other table order,
	// other formatting.
	b := mustCompile(t, `
[commands.cancel_order]
emits = [ "order_cancelled" , "refund.requested" ]
input.receipt = "bytes?"
input.refund = "bool"
input.order_id = "string"

[commands.place_order]
emits = ['order_placed']
[commands.place_order.input]
note = "string?"
order_id = "string"
amount_cents = "int"
`)
	for _, name := range []string{"place_order", "cancel_order"} {
		pa, _ := a.Command(name)
		pb, _ := b.Command(name)
		if pa.ID != pb.ID {
			t.Fatalf("%s: ids differ: %s vs %s", name, pa.ID, pb.ID)
		}
		if len(pa.ID) != 32 || strings.Trim(pa.ID, "0123456789abcdef") != "" {
			t.Fatalf("%s: id %q is not 32 lowercase hex characters", name, pa.ID)
		}
	}
	// The id is a published, persistent identity: pin its derivation so a
	// change to the canonical description cannot slip in unnoticed.
	p, _ := a.Command("place_order")
	if want := goldenPlaceOrderID; p.ID != want {
		t.Fatalf("place_order id = %s, want %s (the id derivation changed)", p.ID, want)
	}

	// Any semantic change changes the id.
	base, _ := a.Command("place_order")
	variants := []string{
		"[commands.place_order2]\ninput = { order_id = \"string\", amount_cents = \"int\", note = \"string?\" }\nemits = [\"order_placed\"]",
		"[commands.place_order]\ninput = { order_id = \"string\", amount_cents = \"int\", note = \"string\" }\nemits = [\"order_placed\"]",
		"[commands.place_order]\ninput = { order_id = \"string\", amount_cents = \"bool\", note = \"string?\" }\nemits = [\"order_placed\"]",
		"[commands.place_order]\ninput = { order_id = \"string\", amount = \"int\", note = \"string?\" }\nemits = [\"order_placed\"]",
		"[commands.place_order]\ninput = { order_id = \"string\", amount_cents = \"int\", note = \"string?\" }\nemits = [\"order_placed\", \"x\"]",
		"[commands.place_order]\ninput = { order_id = \"string\", amount_cents = \"int\", note = \"string?\" }\nemits = [\"order_placed.v2\"]",
	}
	seen := map[string]bool{base.ID: true}
	for _, v := range variants {
		c := mustCompile(t, v)
		p := c.Commands()[0]
		if seen[p.ID] {
			t.Fatalf("variant %q reuses an id", v)
		}
		seen[p.ID] = true
	}
	// Emit order matters.
	x := mustCompile(t, "[commands.a]\ninput = { x = \"int\" }\nemits = [\"e\", \"f\"]").Commands()[0]
	y := mustCompile(t, "[commands.a]\ninput = { x = \"int\" }\nemits = [\"f\", \"e\"]").Commands()[0]
	if x.ID == y.ID {
		t.Fatal("emit order does not change the id")
	}
}

const goldenPlaceOrderID = "321f9956d1848bd16f9e102fc5d8b734"
