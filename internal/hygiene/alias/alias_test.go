package alias_test

import (
	"strings"
	"testing"

	"github.com/riffdb/riffdb/internal/hygiene/alias"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"default", true},
		{"a", true},
		{"orders_2-eu", true},
		{"a" + strings.Repeat("z", 63), true},
		{"a" + strings.Repeat("z", 64), false},
		{"", false},
		{"1db", false},
		{"_db", false},
		{"Orders", false},
		{"orders.eu", false},
		{"orders\n", false},
		{"ördnung", false},
	} {
		if got := alias.Valid(tc.s); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}
