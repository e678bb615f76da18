// Package statsapi serves the capability-gated stats and health endpoints
// that monitoring polls:
//
//	GET /v1/stats   global capability with read_statistics
//	GET /v1/health  capability with read_health (global, or scoped: then only that database is shown)
//	GET /healthz    unauthenticated liveness: {"status":"up"} and nothing else
//
// Every key of a response is always present. pending_outbox_deliveries is the
// undelivered-index count (pending, scheduled retries, active deliveries and
// dead letters) or null while the index is unbuilt or degraded: null never
// means zero, and zero is a claim about the index only — an empty source
// backlog does not prove archive custody; outbox.health classifies the
// destination on its own.
//
// Sampling: each field is read from an in-memory counter at the time of the
// request. The publication frontier and the pending count are sampled
// separately (not atomically with each other), so a count may reflect commits
// above the reported frontier. Neither authorizes reclamation. Serving a
// request never scans history or the index, rebuilds anything, drains a
// journal or changes a retention hold.
//
// The archive is intentionally retained and is reported (archive_* bytes)
// apart from reclaimable source history. There is no inspection endpoint:
// archive inspection is offline only.
package statsapi
