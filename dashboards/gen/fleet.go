//lint:file-ignore SA1019 The SDK deprecates the v1 dashboard schema in favour of dashboardv2, but v1 (schemaVersion 42) is the JSON every Grafana imports; v2 needs Grafana 12 and its v2 API.

package gen

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// Fleet is the overview of every instance and database: is each outbox
// healthy, is delivery keeping up, will an archive fill.
func Fleet() (dashboard.Dashboard, error) {
	by := "instance, riffdb_database"
	return finish(newDashboard("riffdb-fleet", "riffdb / fleet",
		"Every riffdb instance and database at a glance: outbox health, backlog, commit and delivery rates, archive quota and latencies.").
		WithRow(dashboard.NewRowBuilder("Fleet")).
		WithPanel(single(panel{
			title: "Outboxes not healthy", unit: "short", w: 6, h: 4,
			description: "Is any outbox degraded, paused or stopped right now? Counts database outboxes whose health is not healthy (0 when all are). " +
				"Related alerts: RiffdbOutboxStopped (stopped for 2 m), RiffdbOutboxUnhealthy (degraded or paused for 15 m).",
			targets: []target{q(`count(riffdb_outbox_health{`+sel+`, riffdb_outbox_state!="healthy"} == 1) or vector(0)`, "not healthy")},
		}, 1)).
		WithPanel(single(panel{
			title: "Pending events", unit: "short", w: 6, h: 4,
			description: "How many committed events are not yet delivered to an archive, over the whole selection? " +
				"Includes scheduled retries, deliveries in progress and dead letters. No value means unknown (index unbuilt or degraded), never zero. " +
				"Related alerts: RiffdbOutboxBacklogGrowing, RiffdbOutboxPendingUnknown.",
			targets: []target{q(`sum(riffdb_outbox_pending{`+sel+`})`, "pending")},
		}, 1000)).
		WithPanel(single(panel{
			title: "Dead letters since start", unit: "short", w: 6, h: 4,
			description: "Has any event been given up on since the servers started? Dead letters stay undelivered and fence history retention: " +
				"list them (`riffdb outbox deliveries list --state dead_letter`), repair the cause, then redrive them (`riffdb outbox dead-letters retry`). " +
				"Related alert: RiffdbOutboxDeadLetters.",
			targets: []target{q(`sum(riffdb_outbox_dead_letters_total{`+sel+`})`, "dead letters")},
		}, 1)).
		WithPanel(single(panel{
			title: "Refused events since start", unit: "short", w: 6, h: 4,
			description: "Has an archive refused an event because it holds different bytes under the same identity? Any value above 0 is an identity conflict to investigate. " +
				"Related alert: RiffdbArchiveRefused.",
			targets: []target{q(`sum(riffdb_archive_accepted_events_total{`+sel+`, result="refused"})`, "refused")},
		}, 1)).
		WithPanel(grid(panel{
			title: "Health by instance and database", w: 24, h: 8,
			description: "Which database on which instance needs attention? One row per instance and database: the outbox state, pending events, " +
				"delivered events per second, committed commands per second, archive quota used and dead letters. " +
				"Related alerts: RiffdbOutboxStopped, RiffdbOutboxUnhealthy, RiffdbOutboxBacklogGrowing, RiffdbOutboxDeliveryStalled, RiffdbArchiveQuotaHigh, RiffdbOutboxDeadLetters.",
			targets: []target{
				q(`max by (`+by+`, riffdb_outbox_state) (riffdb_outbox_health{`+sel+`} == 1)`, ""),
				q(`sum by (`+by+`) (riffdb_outbox_pending{`+sel+`})`, ""),
				q(`sum by (`+by+`) (rate(riffdb_outbox_completion_flush_batch_size_sum{`+sel+`}[$__rate_interval]))`, ""),
				q(`sum by (`+by+`) (rate(riffdb_command_duration_seconds_count{`+sel+`, result="committed"}[$__rate_interval]))`, ""),
				q(`max by (`+by+`) (riffdb_archive_quota_used_bytes{`+sel+`}) / max by (`+by+`) (riffdb_archive_quota_limit_bytes{`+sel+`} > 0)`, ""),
				q(`sum by (`+by+`) (riffdb_outbox_dead_letters_total{`+sel+`})`, ""),
			},
		}, map[string]string{
			"riffdb_database":     "database",
			"riffdb_outbox_state": "outbox state",
			"Value #B":            "pending events",
			"Value #C":            "delivered events/s",
			"Value #D":            "committed commands/s",
			"Value #E":            "archive quota used (ratio)",
			"Value #F":            "dead letters",
		}, "Value #A")).
		WithRow(dashboard.NewRowBuilder("Delivery")).
		WithPanel(graph(panel{
			title: "Backlog by database", unit: "short", w: 12, h: 8,
			description: "Is delivery keeping up? Undelivered events of each database over time: a line that keeps rising means the worker falls behind. " +
				"A gap means the count was unknown. Related alerts: RiffdbOutboxBacklogGrowing, RiffdbOutboxPendingUnknown.",
			targets: []target{q(`sum by (`+by+`) (riffdb_outbox_pending{`+sel+`})`, "{{instance}} {{riffdb_database}}")},
		})).
		WithPanel(graph(panel{
			title: "Commits and deliveries per second", unit: "ops", w: 12, h: 8,
			description: "Does delivery keep pace with commits? Committed commands per second next to events delivered (completed) per second, by database. " +
				"Commands can commit several events each, so compare the shapes, not the heights. Related alert: RiffdbOutboxDeliveryStalled.",
			targets: []target{
				q(`sum by (`+by+`) (rate(riffdb_command_duration_seconds_count{`+sel+`, result="committed"}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} committed commands"),
				q(`sum by (`+by+`) (rate(riffdb_outbox_completion_flush_batch_size_sum{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} delivered events"),
			},
		})).
		WithPanel(graph(panel{
			title: "Archive quota used", unit: "percentunit", w: 12, h: 8,
			description: "Will an archive fill? Encoded bytes charged to each archive's quota as a share of quota_encoded_bytes. The archive is never pruned: raise the quota and restart before it reaches 1. " +
				"Related alerts: RiffdbArchiveQuotaHigh (above 0.8), RiffdbArchiveQuotaCritical (above 0.95).",
			targets: []target{q(`max by (`+by+`) (riffdb_archive_quota_used_bytes{`+sel+`}) / max by (`+by+`) (riffdb_archive_quota_limit_bytes{`+sel+`} > 0)`, "{{instance}} {{riffdb_database}}")},
		})).
		WithPanel(graph(panel{
			title: "Commit to archived lag p99", unit: "s", w: 12, h: 8,
			description: "How long after its commit does an event reach the archive, at worst? p99 of the delivery lag by database; exemplars open the claim trace. " +
				"Related alert: RiffdbOutboxDeliveryLagHigh (p99 above 60 s for 15 m).",
			targets: quantiles("riffdb_outbox_delivery_lag_seconds", sel, by)[1:],
		})).
		WithRow(dashboard.NewRowBuilder("Primary")).
		WithPanel(graph(panel{
			title: "Command latency p99", unit: "s", w: 12, h: 8,
			description: "Are commands fast on every instance? p99 of command execution time, from the request to its durable commit, by database; exemplars open the command trace. " +
				"Related alert: RiffdbCommandSlow (p99 above 250 ms for 10 m).",
			targets: quantiles("riffdb_command_duration_seconds", sel, by)[1:],
		})).
		WithPanel(graph(panel{
			title: "Server-side command errors per second", unit: "ops", w: 12, h: 8,
			description: "Is any primary failing commands itself (not the client's fault)? Commands that ended in failed, error or closed, by database. " +
				"Related alert: RiffdbCommandStoreFailed (any failed: the store failed and the server stops).",
			targets: []target{q(`sum by (`+by+`, result) (rate(riffdb_command_duration_seconds_count{`+sel+`, result=~"failed|error|closed"}[$__rate_interval])) or sum by (`+by+`) (rate(riffdb_command_duration_seconds_count{`+sel+`}[$__rate_interval])) * 0`, "{{instance}} {{riffdb_database}} {{result}}")},
		})))
}
