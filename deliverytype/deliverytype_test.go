package deliverytype_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/riffdb/riffdb/deliverytype"
)

func TestMarkIsReadBackThroughWrapping(t *testing.T) {
	base := errors.New("archive: records lost")
	lost := deliverytype.Mark(base, deliverytype.Stop, deliverytype.ReasonArchiveLostRecords)
	wrapped := fmt.Errorf("open: %w", lost)
	if got := deliverytype.ClassOf(wrapped); got != deliverytype.Stop {
		t.Fatalf("ClassOf = %v, want stop", got)
	}
	if got := deliverytype.ReasonOf(wrapped); got != deliverytype.ReasonArchiveLostRecords {
		t.Fatalf("ReasonOf = %q", got)
	}
	if !errors.Is(wrapped, lost) || !errors.Is(wrapped, base) {
		t.Fatal("a mark hides the marked error from errors.Is")
	}
	if wrapped.Error() != "open: archive: records lost" {
		t.Fatalf("a mark changed the message: %q", wrapped.Error())
	}
	// A later mark wins: the caller that knows more re-marks.
	again := deliverytype.Mark(wrapped, deliverytype.Unavailable, deliverytype.ReasonStartupValidationFailed)
	if deliverytype.ClassOf(again) != deliverytype.Unavailable || deliverytype.ReasonOf(again) != deliverytype.ReasonStartupValidationFailed {
		t.Fatalf("re-marked: %v %q", deliverytype.ClassOf(again), deliverytype.ReasonOf(again))
	}
	if !errors.Is(again, lost) {
		t.Fatal("re-marking hides the first mark's error")
	}
}

func TestUnmarkedAndDefaults(t *testing.T) {
	if deliverytype.ClassOf(errors.New("x")) != deliverytype.Unmarked || deliverytype.ReasonOf(errors.New("x")) != deliverytype.ReasonNone {
		t.Fatal("an unmarked error has a class or a reason")
	}
	if deliverytype.Mark(nil, deliverytype.Stop, "") != nil {
		t.Fatal("Mark(nil) is not nil")
	}
	for c, want := range map[deliverytype.Class]deliverytype.Reason{
		deliverytype.Unavailable: deliverytype.ReasonDestinationUnavailable,
		deliverytype.Refused:     deliverytype.ReasonDestinationRefused,
		deliverytype.Capacity:    deliverytype.ReasonCapacityExhausted,
		deliverytype.Conflict:    deliverytype.ReasonIdentityConflict,
		deliverytype.Stop:        deliverytype.ReasonCorruptContent,
	} {
		if got := deliverytype.ReasonOf(deliverytype.New("e", c, deliverytype.ReasonNone)); got != want {
			t.Errorf("default reason of %v = %q, want %q", c, got, want)
		}
	}
}
