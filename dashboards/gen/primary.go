//lint:file-ignore SA1019 The SDK deprecates the v1 dashboard schema in favour of dashboardv2, but v1 (schemaVersion 42) is the JSON every Grafana imports; v2 needs Grafana 12 and its v2 API.

package gen

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// byStore groups Pebble series per instance, database and store.
const byStore = "instance, riffdb_database, riffdb_store"

// Primary is the primary and its storage: commands, HTTP, Pebble and the
// process.
func Primary() (dashboard.Dashboard, error) {
	return finish(newDashboard("riffdb-primary", "riffdb / primary & storage",
		"Is the primary healthy? Commands by name and result, HTTP status codes, Pebble fsync, compaction and read amplification of the primary and archive stores, process memory and goroutines.").
		WithRow(dashboard.NewRowBuilder("Commands")).
		WithPanel(graph(panel{
			title: "Commands per second by command and result", unit: "ops", w: 12, h: 8,
			description: "What are clients running, and how does it end? Commands per second by name and result (committed, replayed, client errors, server errors). " +
				"Related alert: RiffdbCommandStoreFailed (any result failed: the store failed and the server stops). Client errors are for this panel only.",
			targets: []target{q(`sum by (riffdb_command, result) (rate(riffdb_command_duration_seconds_count{`+sel+`}[$__rate_interval]))`, "{{riffdb_command}} {{result}}")},
		})).
		WithPanel(graph(panel{
			title: "Command latency by command", unit: "s", w: 12, h: 8,
			description: "Are commands fast, request to durable commit? p50 and p99 by command name; exemplars open the command trace (HTTP server span and riffdb.command). " +
				"Related alert: RiffdbCommandSlow (p99 of all commands above 250 ms for 10 m).",
			targets: quantiles("riffdb_command_duration_seconds", sel, "riffdb_command"),
		})).
		WithPanel(graph(panel{
			title: "Command latency by result", unit: "s", w: 12, h: 8,
			description: "Do failing commands take longer than successful ones? p99 of command execution time by result; exemplars open the command trace. " +
				"Related alert: RiffdbCommandSlow.",
			targets: quantiles("riffdb_command_duration_seconds", sel, "result")[1:],
		})).
		WithPanel(graph(panel{
			title: "Server-side command error share", unit: "percentunit", w: 12, h: 8,
			description: "Is the primary failing commands itself? Share of commands ending in failed, error or closed (0 normally; worth attention above 1 %). " +
				"Related alert: RiffdbCommandStoreFailed.",
			targets: []target{q(`(sum by (instance, riffdb_database) (rate(riffdb_command_duration_seconds_count{`+sel+`, result=~"failed|error|closed"}[$__rate_interval])) or sum by (instance, riffdb_database) (rate(riffdb_command_duration_seconds_count{`+sel+`}[$__rate_interval])) * 0) / sum by (instance, riffdb_database) (rate(riffdb_command_duration_seconds_count{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}}")},
		})).
		WithPanel(graph(panel{
			title: "Commit group size", unit: "short", w: 12, h: 8,
			description: "How many commits share one batch and one WAL sync? Mean commits per group (group commit; the distribution is in riffdb_commit_group_size_bucket). Groups near 1 under heavy load mean commits wait on fsync one after another. " +
				"No alert: see the fsync time panel and RiffdbCommandSlow.",
			targets: []target{
				q(`sum by (instance, riffdb_database) (rate(riffdb_commit_group_size_sum{`+sel+`}[$__rate_interval])) / sum by (instance, riffdb_database) (rate(riffdb_commit_group_size_count{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} mean"),
			},
		})).
		WithRow(dashboard.NewRowBuilder("HTTP")).
		WithPanel(graph(panel{
			title: "HTTP requests by status code", unit: "ops", w: 12, h: 8,
			description: "What does the API answer? Requests per second on the API listener by route and status code. " +
				"No alert in riffdb-rules.yml: a rising 5xx share is worth one.",
			targets: []target{q(`sum by (http_route, http_response_status_code) (rate(http_server_request_duration_seconds_count{`+inst+`}[$__rate_interval]))`, "{{http_route}} {{http_response_status_code}}")},
		})).
		WithPanel(graph(panel{
			title: "HTTP request latency p99 by route", unit: "s", w: 12, h: 8,
			description: "Which API route is slow? p99 of request duration by route; exemplars open the request's trace. " +
				"Related alert: RiffdbCommandSlow (for the commands route).",
			targets: quantiles("http_server_request_duration_seconds", inst, "http_route")[1:],
		})).
		WithPanel(graph(panel{
			title: "Connections and limit", unit: "short", w: 12, h: 8,
			description: "Is a listener running out of connections? Open connections of the API and metrics listeners next to their cap. " +
				"No alert in riffdb-rules.yml: open connections near the limit for 10 m deserve one.",
			targets: []target{
				q(`max by (instance, riffdb_listener) (riffdb_server_connections{`+inst+`})`, "{{instance}} {{riffdb_listener}} open"),
				q(`max by (instance, riffdb_listener) (riffdb_server_connections_limit{`+inst+`})`, "{{instance}} {{riffdb_listener}} limit"),
			},
		})).
		WithPanel(graph(panel{
			title: "Rejected connections per second", unit: "ops", w: 12, h: 8,
			description: "Are clients being refused? Connections closed on arrival because the listener was at its cap. " +
				"No alert in riffdb-rules.yml: any sustained rate means clients are refused.",
			targets: []target{q(`sum by (instance, riffdb_listener) (rate(riffdb_server_connections_rejected_total{`+inst+`}[$__rate_interval]))`, "{{instance}} {{riffdb_listener}}")},
		})).
		WithRow(dashboard.NewRowBuilder("Storage (Pebble)")).
		WithPanel(graph(panel{
			title: "Mean WAL fsync time", unit: "s", w: 12, h: 8,
			description: "Is the disk slow to sync? Mean WAL fsync duration of the primary and archive stores (fsync time over fsyncs). " +
				"No fsync alert in riffdb-rules.yml; RiffdbArchiveTxnSlow and RiffdbCommandSlow fire when slow fsyncs reach transactions.",
			targets: []target{q(`sum by (`+byStore+`) (rate(riffdb_pebble_wal_fsync_time_seconds_total{`+sel+`}[$__rate_interval])) / sum by (`+byStore+`) (rate(riffdb_pebble_wal_fsyncs_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}}")},
		})).
		WithPanel(graph(panel{
			title: "Writes held back (write stalls)", unit: "percentunit", w: 12, h: 8,
			description: "Is Pebble holding writes back? Share of the time each store stalled every write (all memtables full while the oldest flushes, or too many L0 files); " +
				"every primary commit or archive transaction waits that long. Stalls of a second or more are also logged. " +
				"RiffdbStoreWritesHeldBack fires above 10 % for 10 m.",
			targets: []target{q(`sum by (`+byStore+`) (rate(riffdb_pebble_write_stall_time_seconds_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}}")},
		})).
		WithPanel(graph(panel{
			title: "Compaction debt", unit: "bytes", w: 12, h: 8,
			description: "Are compactions keeping up with writes? Estimated bytes still to compact per store; debt growing for hours means write stalls ahead. " +
				"No alert in riffdb-rules.yml.",
			targets: []target{q(`max by (`+byStore+`) (max_over_time(riffdb_pebble_compaction_debt_bytes{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}}")},
		})).
		WithPanel(graph(panel{
			title: "Read amplification", unit: "short", w: 12, h: 8,
			description: "How many sorted runs may a read consult? Pebble read amplification per store; above 20 for 30 m means compactions are falling behind. " +
				"No alert in riffdb-rules.yml.",
			targets: []target{q(`max by (`+byStore+`) (max_over_time(riffdb_pebble_read_amplification{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}}")},
		})).
		WithPanel(graph(panel{
			title: "Compactions and flushes per second", unit: "ops", w: 12, h: 8,
			description: "How busy is Pebble in the background? Compactions and memtable flushes completed per second, per store. " +
				"No alert.",
			targets: []target{
				q(`sum by (`+byStore+`) (rate(riffdb_pebble_compactions_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}} compactions"),
				q(`sum by (`+byStore+`) (rate(riffdb_pebble_flushes_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}} flushes"),
			},
		})).
		WithPanel(graph(panel{
			title: "Time compacting", unit: "percentunit", w: 12, h: 8,
			description: "How much of a CPU do compactions take? Compactions running on average per store (1 = one compaction all the time); " +
				"each keeps a CPU busy for most of its run, so on few cores this is CPU taken from commits and deliveries. " +
				"A share that keeps rising at a steady write rate: each compaction rewrites more as the store grows. No alert.",
			targets: []target{q(`sum by (`+byStore+`) (rate(riffdb_pebble_compaction_time_seconds_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}}")},
		})).
		WithPanel(graph(panel{
			title: "Store size on disk", unit: "bytes", w: 12, h: 8,
			description: "How much disk does each store use? Logical size of live and obsolete Pebble files per store (WAL preallocation excluded). " +
				"No alert: watch filesystem free space with a node exporter; for the archive quota see RiffdbArchiveQuotaHigh.",
			targets: []target{q(`max by (`+byStore+`) (max_over_time(riffdb_pebble_disk_usage_bytes{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}}")},
		})).
		WithPanel(graph(panel{
			title: "Pebble memory", unit: "bytes", w: 12, h: 8,
			description: "How much memory do Pebble's caches hold outside the Go heap? Memtable and block cache bytes per store (invisible to go_memstats). " +
				"No alert.",
			targets: []target{
				q(`max by (`+byStore+`) (max_over_time(riffdb_pebble_memtable_size_bytes{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}} memtables"),
				q(`max by (`+byStore+`) (max_over_time(riffdb_pebble_block_cache_size_bytes{`+sel+`}[$__rate_interval]))`, "{{instance}} {{riffdb_database}} {{riffdb_store}} block cache"),
			},
		})).
		WithRow(dashboard.NewRowBuilder("Process")).
		WithPanel(graph(panel{
			title: "Process memory", unit: "bytes", w: 12, h: 8,
			description: "Is the server's memory growing? Resident memory (Pebble caches included) next to the Go heap in use. " +
				"No alert.",
			targets: []target{
				q(`max by (instance) (process_resident_memory_bytes{`+inst+`})`, "{{instance}} resident"),
				q(`max by (instance) (go_memstats_heap_inuse_bytes{`+inst+`})`, "{{instance}} Go heap in use"),
			},
		})).
		WithPanel(graph(panel{
			title: "Goroutines", unit: "short", w: 12, h: 8,
			description: "Are goroutines leaking or piling up? Live goroutines per instance. " +
				"No alert.",
			targets: []target{q(`max by (instance) (go_goroutines{`+inst+`})`, "{{instance}}")},
		})).
		WithPanel(graph(panel{
			title: "CPU", unit: "percentunit", w: 12, h: 8,
			description: "How much CPU does the server use? CPU seconds per second (1 = one core). " +
				"No alert.",
			targets: []target{q(`sum by (instance) (rate(process_cpu_seconds_total{`+inst+`}[$__rate_interval]))`, "{{instance}}")},
		})).
		WithPanel(graph(panel{
			title: "Goroutines waiting for a CPU", unit: "short", w: 12, h: 8,
			description: "Is the server short of CPU? Goroutines waiting, runnable, for a CPU on average (go_sched_latencies_seconds). " +
				"Deliveries and commits are chains of steps that each wait here: waits grow, and the commit→archived p99 with them, " +
				"while a compaction or a burst of commands holds the CPUs, before the CPU panel looks busy. No alert.",
			targets: []target{q(`sum by (instance) (rate(go_sched_latencies_seconds_sum{`+inst+`}[$__rate_interval]))`, "{{instance}}")},
		})).
		WithPanel(graph(panel{
			title: "Open file descriptors", unit: "short", w: 12, h: 8,
			description: "Is the server running out of file descriptors? Open descriptors next to the limit. " +
				"No alert.",
			targets: []target{
				q(`max by (instance) (process_open_fds{`+inst+`})`, "{{instance}} open"),
				q(`max by (instance) (process_max_fds{`+inst+`})`, "{{instance}} limit"),
			},
		})))
}
