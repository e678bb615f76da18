package config_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/outbox"
)

// TestMaxDeliveryAttempts: max_delivery_attempts lowers the attempt budget
// (1 to 32); omitted, the budget is DESIGN's 32, the outbox's own; 0, a
// negative value, one above 32 or a non-integer is invalid_config naming
// the option.
func TestMaxDeliveryAttempts(t *testing.T) {
	if config.MaxDeliveryAttempts != outbox.MaxAttempts {
		t.Fatalf("config.MaxDeliveryAttempts %d, outbox.MaxAttempts %d", config.MaxDeliveryAttempts, outbox.MaxAttempts)
	}
	o := mustParse(t, singleTOML).Databases[0].Outbox
	if o.MaxDeliveryAttempts != 0 || o.EffectiveMaxDeliveryAttempts() != 32 {
		t.Fatalf("omitted: %d, effective %d; want 0 and 32", o.MaxDeliveryAttempts, o.EffectiveMaxDeliveryAttempts())
	}
	for _, n := range []string{"1", "5", "32"} {
		o := mustParse(t, singleTOML+"max_delivery_attempts = "+n+"\n").Databases[0].Outbox
		if got := o.EffectiveMaxDeliveryAttempts(); strconv.Itoa(got) != n {
			t.Fatalf("max_delivery_attempts = %s: effective %d", n, got)
		}
	}
	for _, tc := range []struct{ doc, want string }{
		{singleTOML + "max_delivery_attempts = 0\n", "maintenance.outbox.max_delivery_attempts must be between 1 and 32"},
		{singleTOML + "max_delivery_attempts = -3\n", "maintenance.outbox.max_delivery_attempts must be between 1 and 32"},
		{singleTOML + "max_delivery_attempts = 33\n", "maintenance.outbox.max_delivery_attempts must be between 1 and 32"},
		{singleTOML + "max_delivery_attempts = 9999999999999\n", "maintenance.outbox.max_delivery_attempts must be between 1 and 32"},
		{singleTOML + "max_delivery_attempts = \"3\"\n", `"maintenance.outbox.max_delivery_attempts" must be an integer`},
		{strings.Replace(namedTOML, "quota_encoded_bytes = 4096", "quota_encoded_bytes = 4096\nmax_delivery_attempts = 40", 1),
			"databases.orders.outbox.max_delivery_attempts must be between 1 and 32"},
	} {
		_, err := config.Parse([]byte(tc.doc), noEnv, config.Overrides{})
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(...%q) = %v, want ErrInvalid containing %q", tc.doc[len(tc.doc)-30:], err, tc.want)
		}
	}
}
