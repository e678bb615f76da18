// Package attrkey is the one home of the OpenTelemetry attribute keys that
// more than one riffdb package puts on spans and metrics. The names are a
// contract (DESIGN §6 and docs/metrics.md: Prometheus labels follow from
// them), so they are spelled once. It imports only the OTel attribute API,
// which every core package may use.
package attrkey

import "go.opentelemetry.io/otel/attribute"

// Keys shared by spans and metrics. Ids (event, database id, sequence) go
// on spans only, never on metric labels.
const (
	// Database is the database alias: a label on every riffdb metric.
	Database = attribute.Key("riffdb.database")
	// DatabaseID is the database identity (spans only).
	DatabaseID = attribute.Key("riffdb.database.id")
	// Command is the compiled command's name.
	Command = attribute.Key("riffdb.command")
	// Store names a storage engine instance: primary or archive.
	Store = attribute.Key("riffdb.store")
	// EventID is an event identity (spans only).
	EventID = attribute.Key("riffdb.event.id")
	// Listener names one of the server's listeners: api or metrics.
	Listener = attribute.Key("riffdb.listener")
	// CAllocatorState is the state of the C allocator's memory:
	// heap_in_use, heap_free or mapped.
	CAllocatorState = attribute.Key("riffdb.c_allocator.state")
	// Reason is why something happened, from a bounded set: an outbox
	// health reason, why a connection was refused.
	Reason = attribute.Key("riffdb.reason")
)
