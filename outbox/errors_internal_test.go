package outbox

import (
	"errors"
	"fmt"
	"testing"

	"github.com/riffdb/riffdb/deliverytype"
)

// TestHealthOfEveryClass pins the health each delivery failure moves the
// worker to: the class decides the state, the mark's reason is reported,
// and an error without a mark is an unavailability.
func TestHealthOfEveryClass(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		state  string
		reason deliverytype.Reason
	}{
		{deliverytype.New("e", deliverytype.Unavailable, ""), StateDegraded, deliverytype.ReasonDestinationUnavailable},
		{deliverytype.New("e", deliverytype.Unavailable, deliverytype.ReasonStartupValidationFailed), StateDegraded, deliverytype.ReasonStartupValidationFailed},
		{deliverytype.New("e", deliverytype.Refused, ""), StatePaused, deliverytype.ReasonDestinationRefused},
		{deliverytype.New("e", deliverytype.Capacity, ""), StateDegraded, deliverytype.ReasonCapacityExhausted},
		{deliverytype.New("e", deliverytype.Stop, deliverytype.ReasonBindingChanged), StateStopped, deliverytype.ReasonBindingChanged},
		{deliverytype.New("e", deliverytype.Stop, deliverytype.ReasonIncompatibleFormat), StateStopped, deliverytype.ReasonIncompatibleFormat},
		{deliverytype.New("e", deliverytype.Stop, ""), StateStopped, deliverytype.ReasonCorruptContent},
		{deliverytype.New("e", deliverytype.Stop, deliverytype.ReasonArchiveLostRecords), StateStopped, deliverytype.ReasonArchiveLostRecords},
		{deliverytype.New("e", deliverytype.Stop, deliverytype.ReasonHistoryBehindArchive), StateStopped, deliverytype.ReasonHistoryBehindArchive},
		{errors.New("a timeout the destination did not mark"), StateDegraded, deliverytype.ReasonDestinationUnavailable},
	} {
		state, reason := healthOf(fmt.Errorf("context: %w", tc.err))
		if state != tc.state || reason != tc.reason {
			t.Errorf("healthOf(%v, class %v) = %s/%s, want %s/%s", tc.err, deliverytype.ClassOf(tc.err), state, reason, tc.state, tc.reason)
		}
	}
	if marked(nil) != nil {
		t.Error("marked(nil) is not nil")
	}
}
