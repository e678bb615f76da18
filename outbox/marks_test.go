package outbox_test

import "github.com/riffdb/riffdb/deliverytype"

// Failures the tests' destinations return, marked as a real destination
// marks its errors.
var (
	errUnavailable        = deliverytype.New("test: destination unavailable", deliverytype.Unavailable, deliverytype.ReasonNone)
	errRefused            = deliverytype.New("test: destination refused", deliverytype.Refused, deliverytype.ReasonNone)
	errCapacity           = deliverytype.New("test: capacity exhausted", deliverytype.Capacity, deliverytype.ReasonNone)
	errConflict           = deliverytype.New("test: identity conflict", deliverytype.Conflict, deliverytype.ReasonNone)
	errCorrupt            = deliverytype.New("test: corrupt content", deliverytype.Stop, deliverytype.ReasonCorruptContent)
	errBindingChanged     = deliverytype.New("test: binding changed", deliverytype.Stop, deliverytype.ReasonBindingChanged)
	errIncompatibleFormat = deliverytype.New("test: incompatible format", deliverytype.Stop, deliverytype.ReasonIncompatibleFormat)
	errArchiveLost        = deliverytype.New("test: records lost", deliverytype.Stop, deliverytype.ReasonArchiveLostRecords)
	errHistoryBehind      = deliverytype.New("test: history behind", deliverytype.Stop, deliverytype.ReasonHistoryBehindArchive)
)
