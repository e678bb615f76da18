package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/loadtest"
)

func newLoadtestCommand() *cobra.Command {
	var (
		cfg                loadtest.Config
		address, tokenFile string
	)
	cmd := &cobra.Command{
		Use:   "loadtest",
		Short: "Drive traced load against a local riffdb primary and report latency percentiles",
		Long: `Send commands to a riffdb server on this machine and report throughput, latency
percentiles (p50, p90, p99, p99.9, max) and the slowest requests with their trace ids.

Closed loop (-c workers, the default) or open loop (--rate requests per second,
latency measured from the intended send time so that queueing is not omitted;
-c then caps the requests in flight). The run stops after -n requests or
--duration, whichever comes first. Each request has a unique input (the
--input-template with {{n}} replaced by its sequence number and {{run}} by the
run id) and a unique idempotency key, a root span "loadgen.request" and a W3C
traceparent header, so the server's spans join its trace. --retry-ratio sends
that fraction of the requests a second time with the same idempotency key; each
retry must come back as a replay of the same commit (retries and retry_errors in
the report). With --otlp-endpoint
the spans are exported via OTLP/gRPC (e.g. to Jaeger).

In text mode on a terminal a progress line is rewritten every second: elapsed
time, requests, rate, errors, the p99 latency so far and, when the token has
read_statistics, the server's pending outbox deliveries of the database. It is
erased before the report, and never printed with --output json or when stdout
is not a terminal.

--wait-delivered waits after the last request until the database's backlog
(GET /v1/stats pending_outbox_deliveries; the token needs the global
read_statistics permission) is 0, at most --wait-timeout, and reports the
delivery: events delivered (completed_deliveries since before the first
request), the time from the start and after the last request, and the delivery
throughput. With --metrics-address (the server's Prometheus listener) it also
reports the commit→archived lag p50/p99 of the run's deliveries, from the change
of the server's riffdb_outbox_delivery_lag_seconds histogram over the run,
next to the command latency. A backlog left at the timeout exits 1.

Only loopback targets are allowed (127.0.0.0/8, ::1, localhost). The exit code
is 1 when every request failed.`,
		Example: `  riffdb server run --dev &
  riffdb loadtest --token-file riffdb-dev/dev-token -n 5000 -c 16
  riffdb loadtest --token-file riffdb-dev/dev-token --rate 500 --duration 10s --otlp-endpoint 127.0.0.1:4317
  riffdb loadtest --token-file riffdb-dev/dev-token --rate 500 --duration 10s --wait-delivered --metrics-address 127.0.0.1:9464`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Address = address
			if cfg.Address == "" {
				cfg.Address = getenv("RIFFDB_ADDRESS")
			}
			if cfg.Address == "" {
				cfg.Address = DefaultAddress
			}
			if cmd.Flags().Changed("rate") && cfg.Rate <= 0 {
				return Local("usage", "--rate must be a positive number of requests per second")
			}
			if cfg.Requests <= 0 || cfg.Concurrency <= 0 || cfg.Duration <= 0 || cfg.RequestTimeout <= 0 {
				return Local("usage", "-n, -c, --duration and --timeout must be positive")
			}
			if cfg.SampleRatio <= 0 || cfg.SampleRatio > 1 {
				return Local("usage", "--sample-ratio must be in (0, 1]")
			}
			if cfg.WaitTimeout <= 0 {
				return Local("usage", "--wait-timeout must be positive")
			}
			if cfg.MetricsAddress != "" && !cfg.WaitDelivered {
				return Local("usage", "--metrics-address is used only with --wait-delivered")
			}
			token, err := bearerToken(tokenFile)
			if err != nil {
				return err
			}
			cfg.Token = token
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			shown := false
			if out := cmd.OutOrStdout(); outputMode(cmd) == "text" && isTerminal(out) {
				cfg.Progress = func(p loadtest.Progress) {
					fmt.Fprintf(out, "\r\x1b[K%s", p)
					shown = true
				}
			}
			rep, err := loadtest.Run(ctx, cfg)
			if shown { // Run made its last Progress call before it returned
				fmt.Fprint(cmd.OutOrStdout(), "\r\x1b[K")
			}
			switch {
			case errors.Is(err, loadtest.ErrNoStatistics):
				return Public("read_statistics_required", "--wait-delivered needs a token with the global read_statistics permission (GET /v1/stats was refused)")
			case errors.Is(err, loadtest.ErrNotLoopback):
				return Local("not_loopback", "%v", err)
			case errors.Is(err, loadtest.ErrInvalidConfig):
				return Local("usage", "%v", err)
			case err != nil && !rep.Interrupted:
				return Local("loadtest_failed", "%v", err)
			}
			if rep.Requests > 0 && rep.Errors == rep.Requests {
				e := Public("all_requests_failed", "all %d requests failed (%s)", rep.Requests, errorSummary(rep.ErrorsByStatus))
				e.Result = rep
				return e
			}
			if d := rep.Delivery; d != nil && !d.Drained {
				e := Public("not_delivered", "the backlog did not drain within %s after the last request: %d pending", cfg.WaitTimeout, d.Pending)
				e.Result = rep
				return e
			}
			return Emit(cmd, rep, func(w io.Writer) error {
				_, err := io.WriteString(w, rep.String())
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&address, "address", "", "server URL, loopback only (default $RIFFDB_ADDRESS or "+DefaultAddress+")")
	f.StringVar(&tokenFile, "token-file", "", "file holding a bearer token with execute_commands (default $RIFFDB_TOKEN)")
	f.StringVar(&cfg.Database, "database", loadtest.DefaultDatabase, "database alias")
	f.StringVar(&cfg.Command, "command", loadtest.DefaultCommand, "command to run")
	f.StringVar(&cfg.InputTemplate, "input-template", loadtest.DefaultInputTemplate,
		"command input as a JSON object; {{n}} becomes the request number, {{run}} the run id")
	f.IntVarP(&cfg.Requests, "requests", "n", loadtest.DefaultRequests, "maximum number of requests")
	f.IntVarP(&cfg.Concurrency, "concurrency", "c", loadtest.DefaultConcurrency,
		"closed-loop workers, or the cap on requests in flight with --rate")
	f.Float64Var(&cfg.Rate, "rate", 0, "open loop: requests per second (latency from the intended send time)")
	f.DurationVar(&cfg.Duration, "duration", loadtest.DefaultDuration, "maximum duration of the run")
	f.DurationVar(&cfg.RequestTimeout, "timeout", loadtest.DefaultRequestTimeout, "timeout of each request")
	f.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "OTLP/gRPC collector host:port on loopback to export spans to")
	f.Float64Var(&cfg.RetryRatio, "retry-ratio", 0,
		"fraction of requests, in [0, 1], sent a second time with the same idempotency key (each must come back as a replay of the same commit)")
	f.Float64Var(&cfg.SampleRatio, "sample-ratio", loadtest.DefaultSampleRatio, "fraction of requests whose traces are sampled, in (0, 1]")
	f.BoolVar(&cfg.WaitDelivered, "wait-delivered", false,
		"after the last request, wait for the outbox backlog to drain and report delivery throughput and lag (needs read_statistics)")
	f.DurationVar(&cfg.WaitTimeout, "wait-timeout", loadtest.DefaultWaitTimeout, "longest wait for the backlog to drain with --wait-delivered")
	f.StringVar(&cfg.MetricsAddress, "metrics-address", "",
		"the server's Prometheus listener on loopback (e.g. 127.0.0.1:9464), for the commit→archived lag of --wait-delivered")
	return cmd
}

func errorSummary(m map[string]int64) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
