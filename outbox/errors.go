package outbox

import (
	"errors"

	"github.com/riffdb/riffdb/deliverytype"
)

// MissingRecords returns how many records err says the archive lost at
// least: the MissingRecords() of the first error in its chain that has one.
func MissingRecords(err error) (int64, bool) {
	var m interface{ MissingRecords() int64 }
	if errors.As(err, &m) {
		return m.MissingRecords(), true
	}
	return 0, false
}

// marked returns err as the worker acts on it: an error that carries no
// delivery class (a destination that did not mark a timeout, say) is an
// unavailability.
func marked(err error) error {
	if err != nil && deliverytype.ClassOf(err) == deliverytype.Unmarked {
		return deliverytype.Mark(err, deliverytype.Unavailable, deliverytype.ReasonNone)
	}
	return err
}
