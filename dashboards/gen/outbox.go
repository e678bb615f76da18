//lint:file-ignore SA1019 The SDK deprecates the v1 dashboard schema in favour of dashboardv2, but v1 (schemaVersion 42) is the JSON every Grafana imports; v2 needs Grafana 12 and its v2 API.

package gen

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// byDB groups outbox and archive series per instance and database.
const byDB = "instance, riffdb_database"

// Outbox is one database's outbox and archive in depth: backlog and rates,
// quota and its forecast, health and failures, and where the time goes.
func Outbox() (dashboard.Dashboard, error) {
	return finish(newDashboard("riffdb-outbox", "riffdb / outbox",
		"One database's outbox and archive in depth: is delivery keeping up, will the archive fill, is anything stuck, where does the time go.").
		WithRow(dashboard.NewRowBuilder("Is delivery keeping up?")).
		WithPanel(graph(panel{
			title: "Backlog", unit: "short", w: 12, h: 8,
			description: "Is delivery keeping up? Undelivered events: initial pending events, scheduled retries, deliveries in progress and dead letters. " +
				"A gap means the count is unknown (index unbuilt or degraded), never zero. Related alerts: RiffdbOutboxBacklogGrowing, RiffdbOutboxPendingUnknown.",
			targets: []target{q(`sum by (`+byDB+`) (riffdb_outbox_pending{`+sel+`})`, "{{instance}} {{riffdb_database}}")},
		})).
		WithPanel(graph(panel{
			title: "Delivery rate next to commit rate", unit: "ops", w: 12, h: 8,
			description: "Is the worker delivering as fast as commands commit? Events delivered (completed) and events stored in the archive per second, next to committed commands per second. " +
				"Related alert: RiffdbOutboxDeliveryStalled (commands committed for 10 m but nothing completed).",
			targets: []target{
				q(`sum by (`+byDB+`) (rate(riffdb_command_duration_seconds_count{`+sel+`, result="committed"}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} committed commands"),
				q(`sum by (`+byDB+`) (rate(riffdb_outbox_completion_flush_batch_size_sum{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} delivered events"),
				q(`sum by (`+byDB+`) (rate(riffdb_archive_accepted_events_total{`+sel+`, result="stored"}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} archived events"),
			},
		})).
		WithPanel(graph(panel{
			title: "Commit to archived lag", unit: "s", w: 12, h: 8,
			description: "How long after its commit does an event reach the archive? p50 and p99 of the time from commit to archive acceptance; exemplars open the claim trace. " +
				"Related alert: RiffdbOutboxDeliveryLagHigh (p99 above 60 s for 15 m).",
			targets: quantiles("riffdb_outbox_delivery_lag_seconds", sel, byDB),
		})).
		WithPanel(graph(panel{
			title: "Events per claim run", unit: "short", w: 12, h: 8,
			description: "Are claim runs full? Mean members per successful claim run (1 to 16). A mean near 1 while the backlog is large means runs keep breaking (events not yet due, quota). " +
				"No alert.",
			targets: []target{q(`sum by (`+byDB+`) (rate(riffdb_outbox_claim_batch_size_sum{`+sel+`}[$__rate_interval])) / sum by (`+byDB+`) (rate(riffdb_outbox_claim_batch_size_count{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}}")},
		})).
		WithRow(dashboard.NewRowBuilder("Will the archive fill, and when?")).
		WithPanel(graph(panel{
			title: "Quota used and limit", unit: "bytes", w: 8, h: 8,
			description: "How full is the archive? Encoded bytes charged to the quota next to the configured quota_encoded_bytes. " +
				"Related alerts: RiffdbArchiveQuotaHigh (above 80 %), RiffdbArchiveQuotaCritical (above 95 %).",
			targets: []target{
				q(`max by (`+byDB+`) (riffdb_archive_quota_used_bytes{`+sel+`})`, "{{instance}} {{riffdb_database}} used"),
				q(`max by (`+byDB+`) (riffdb_archive_quota_limit_bytes{`+sel+`})`, "{{instance}} {{riffdb_database}} limit"),
			},
		})).
		WithPanel(single(panel{
			title: "Predicted time to full", unit: "s", w: 8, h: 8,
			description: "When will the archive be full at the last hour's growth rate? Remaining quota divided by the growth per second (linear fit over 1 h); infinite when the archive is not growing. " +
				"Related alerts: RiffdbArchiveQuotaHigh, RiffdbArchiveQuotaCritical.",
			targets: []target{q(`(max by (`+byDB+`) (riffdb_archive_quota_limit_bytes{`+sel+`}) - max by (`+byDB+`) (riffdb_archive_quota_used_bytes{`+sel+`})) / clamp_min(max by (`+byDB+`) (deriv(riffdb_archive_quota_used_bytes{`+sel+`}[1h])), 0)`, "{{instance}} {{riffdb_database}}")},
		}, 86400).Thresholds(dashboard.NewThresholdsConfigBuilder().
			Mode(dashboard.ThresholdsModeAbsolute).
			Steps([]dashboard.Threshold{{Value: nil, Color: "red"}, {Value: cog.ToPtr(86400.0), Color: "orange"}, {Value: cog.ToPtr(7 * 86400.0), Color: "green"}}))).
		WithPanel(graph(panel{
			title: "Quota use predicted in 24 h", unit: "bytes", w: 8, h: 8,
			description: "Will the quota be exceeded within a day? predict_linear of the used bytes 24 h ahead (fit over 1 h) next to the limit. " +
				"Related alerts: RiffdbArchiveQuotaHigh, RiffdbArchiveQuotaCritical.",
			targets: []target{
				q(`max by (`+byDB+`) (predict_linear(riffdb_archive_quota_used_bytes{`+sel+`}[1h], 86400))`, "{{instance}} {{riffdb_database}} predicted"),
				q(`max by (`+byDB+`) (riffdb_archive_quota_limit_bytes{`+sel+`})`, "{{instance}} {{riffdb_database}} limit"),
			},
		})).
		WithPanel(graph(panel{
			title: "Allocated versus encoded bytes", unit: "bytes", w: 12, h: 8,
			description: "How much disk does the archive take beyond what the quota charges? The archive store's file size (live and obsolete Pebble files, WAL preallocation excluded) next to the encoded bytes charged to the quota. " +
				"No alert: watch filesystem free space with a node exporter.",
			targets: []target{
				q(`max by (`+byDB+`) (max_over_time(riffdb_pebble_disk_usage_bytes{`+sel+`, riffdb_store="archive"}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} allocated"),
				q(`max by (`+byDB+`) (riffdb_archive_quota_used_bytes{`+sel+`})`, "{{instance}} {{riffdb_database}} encoded"),
			},
		})).
		WithPanel(graph(panel{
			title: "Quota decisions per second", unit: "ops", w: 12, h: 8,
			description: "Is delivery being cut by the quota? Group quota checks that fit, and that were cut at the first member exceeding the quota or the free-space guard. " +
				"A run cut to zero members pauses delivery (degraded, capacity_exhausted). Related alert: RiffdbOutboxUnhealthy.",
			targets: []target{q(`sum by (`+byDB+`, result) (rate(riffdb_archive_quota_decisions_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{result}}")},
		})).
		WithRow(dashboard.NewRowBuilder("Is anything stuck or wrong?")).
		WithPanel(states(panel{
			title: "Health state over time", w: 24, h: 6,
			description: "Was the outbox healthy, degraded, paused or stopped, and when? One row per state; the current state has value 1. " +
				"The next panel says why. " +
				"Related alerts: RiffdbOutboxStopped (stopped for 2 m), RiffdbOutboxUnhealthy (degraded or paused for 15 m).",
			targets: []target{q(`max by (`+byDB+`, riffdb_outbox_state) (riffdb_outbox_health{`+sel+`})`, "{{instance}} {{riffdb_database}} {{riffdb_outbox_state}}")},
		})).
		WithPanel(states(panel{
			title: "Health reason over time", w: 24, h: 6,
			description: "Why was the outbox not healthy, and since when? The current reason has value 1 (starting, destination_unavailable, capacity_exhausted, destination_refused, identity_conflict, corrupt_content, archive_lost_records, …; none while healthy). README's Outbox health table says what to do for each. " +
				"Related alerts: RiffdbOutboxStopped, RiffdbOutboxUnhealthy.",
			targets: []target{q(`max by (`+byDB+`, riffdb_reason) (riffdb_outbox_health_reason{`+sel+`}) == 1 or max by (`+byDB+`) (riffdb_outbox_health{`+sel+`}) * 0`, "{{instance}} {{riffdb_database}} {{riffdb_reason}}")},
		})).
		WithPanel(graph(panel{
			title: "Retries per second", unit: "ops", w: 8, h: 8,
			description: "Are deliveries failing and being retried? Claimed members whose delivery failed and were scheduled for another attempt. " +
				"Related alert: RiffdbOutboxRetrying (retries in every 10 m window for 30 m).",
			targets: []target{q(`sum by (`+byDB+`) (rate(riffdb_outbox_retries_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}}")},
		})).
		WithPanel(graph(panel{
			title: "Dead letters by reason", unit: "short", w: 8, h: 8,
			description: "Has an event been given up on, and why? Dead letters since the process started, by reason (attempts_exhausted, identity_conflict), " +
				"next to those an operator redrove back to pending. Dead letters stay pending and fence history retention: list them with " +
				"`riffdb outbox deliveries list --state dead_letter`, repair the cause, then `riffdb outbox dead-letters retry --reason exhausted`. " +
				"Related alert: RiffdbOutboxDeadLetters.",
			targets: []target{
				q(`sum by (`+byDB+`, riffdb_reason) (riffdb_outbox_dead_letters_total{`+sel+`})`, "{{instance}} {{riffdb_database}} {{riffdb_reason}}"),
				q(`sum by (`+byDB+`, riffdb_reason) (riffdb_outbox_dead_letters_redriven_total{`+sel+`})`, "{{instance}} {{riffdb_database}} {{riffdb_reason}} redriven"),
			},
		})).
		WithPanel(graph(panel{
			title: "Archive acceptance by result", unit: "ops", w: 8, h: 8,
			description: "Is the archive refusing conflicting events? Events stored, replayed as duplicates, and refused (different bytes under an archived identity) per second. " +
				"Related alert: RiffdbArchiveRefused (any refusal).",
			targets: []target{q(`sum by (`+byDB+`, result) (rate(riffdb_archive_accepted_events_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{result}}")},
		})).
		WithPanel(graph(panel{
			title: "Failed claims per second", unit: "ops", w: 12, h: 8,
			description: "Are claim transactions on the primary failing? Failed claims per second (0 while claims succeed). " +
				"Related alert: RiffdbOutboxClaimsFailing.",
			targets: []target{q(`sum by (`+byDB+`) (rate(riffdb_outbox_claim_duration_seconds_count{`+sel+`, error_type="claim_failed"}[$__rate_interval])) or sum by (`+byDB+`) (rate(riffdb_outbox_claim_duration_seconds_count{`+sel+`}[$__rate_interval])) * 0`, "{{instance}} {{riffdb_database}}")},
		})).
		WithPanel(graph(panel{
			title: "Archive records missing", unit: "short", w: 12, h: 8,
			description: "Has the archive lost delivered events? At least this many completed events are missing from the archive (0 normally). " +
				"Related alert: RiffdbOutboxStopped (stopped with archive_lost_records: restore the archive, do not restart blindly).",
			targets: []target{q(`max by (`+byDB+`) (riffdb_outbox_archive_missing_records{`+sel+`})`, "{{instance}} {{riffdb_database}}")},
		})).
		WithPanel(graph(panel{
			title: "Time since the last full validation", unit: "s", w: 24, h: 8,
			description: "How long has the archive trusted old records without reading them? Time since the whole archive was last validated (a start's validation of every record, or a complete background scrub pass), next to full_validation_interval. " +
				"A saw-tooth whose teeth stay below the interval is the scrub completing passes; a line that keeps rising means the scrub is off or does not complete a pass, and the next start validates every record. " +
				"Related alert: RiffdbArchiveValidationStale (above the interval for 30 m).",
			targets: []target{
				q(`time() - max by (`+byDB+`) (riffdb_archive_last_full_validation_timestamp_seconds{`+sel+`})`, "{{instance}} {{riffdb_database}} since the last full validation"),
				q(`max by (`+byDB+`) (riffdb_archive_full_validation_interval_seconds{`+sel+`})`, "{{instance}} {{riffdb_database}} full_validation_interval"),
			},
		})).
		WithRow(dashboard.NewRowBuilder("Where does the time go?")).
		WithPanel(graph(panel{
			title: "Claim transaction latency", unit: "s", w: 12, h: 8,
			description: "How long do claim transactions on the primary take? p50 and p99; exemplars open the claim trace. " +
				"Related alert: RiffdbOutboxClaimSlow (p99 above 1 s for 10 m).",
			targets: quantiles("riffdb_outbox_claim_duration_seconds", sel, byDB),
		})).
		WithPanel(graph(panel{
			title: "Archive transaction latency", unit: "s", w: 12, h: 8,
			description: "How long does one archive transaction take, read phase to synced commit? p50 and p99; exemplars open the claim trace holding it. " +
				"Related alert: RiffdbArchiveTxnSlow (p99 above 0.5 s for 10 m: slow disk or fsync).",
			targets: quantiles("riffdb_archive_txn_duration_seconds", sel, byDB),
		})).
		WithPanel(graph(panel{
			title: "Quota check latency", unit: "s", w: 12, h: 8,
			description: "How long does the group quota check take before each archive transaction? p50 and p99; exemplars open the claim trace holding it. It reads the archive only when a group might not fit. " +
				"Related alert: RiffdbOutboxClaimSlow (the check is part of each claim run's work).",
			targets: quantiles("riffdb_archive_quota_check_duration_seconds", sel, byDB),
		})).
		WithPanel(graph(panel{
			title: "Completion flush latency", unit: "s", w: 12, h: 8,
			description: "How long do completion transactions on the primary take? p50 and p99; exemplars open the flush trace. " +
				"Related alert: RiffdbOutboxCompletionSlow (p99 above 1 s for 10 m).",
			targets: quantiles("riffdb_outbox_completion_flush_duration_seconds", sel, byDB),
		})).
		WithPanel(graph(panel{
			title: "Completion flushes by reason", unit: "ops", w: 12, h: 8,
			description: "Why are completion groups flushed? Flushes per second by reason: bound (16 events), page_end, failure. A growing share of failure means deliveries fail between groups. " +
				"Related alert: RiffdbOutboxDeliveryStalled.",
			targets: []target{q(`sum by (`+byDB+`, riffdb_reason) (rate(riffdb_outbox_completion_flush_batch_size_count{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_reason}}")},
		})))
}
