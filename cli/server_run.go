package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/server"
	"github.com/riffdb/riffdb/telemetry"
)

func newServerRunCommand() *cobra.Command {
	var (
		configPath, devDir string
		dev                bool
		o                  config.Overrides
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a riffdb server (--config FILE, or --dev for the embedded default configuration)",
		Long: `Run a riffdb server until SIGINT or SIGTERM.

Signals:
  SIGINT, SIGTERM  The first starts a graceful stop (logged once, "shutting
                   down", with the grace): the listeners close, requests in
                   flight get server.shutdown_grace (default 10s) to finish,
                   the connections still open are then closed, the outbox
                   workers stop and every store is closed. Exit 0.
                   Before the server is ready (a start waiting on a full
                   filesystem, a long log replay), the first one ends the
                   start at once: exit 2, error code startup_interrupted.
                   A second one forces the exit at once, logged once ("forced
                   exit"): exit 1, error code forced_exit. Nothing
                   acknowledged is lost: every command is synced to disk
                   before its response is sent. Work in flight (an
                   unanswered command, a delivery) is recovered at the next
                   start, as after a crash.
  SIGHUP           Ignored, with one log line: the configuration is read only
                   at startup, so changes apply at restart.

With --dev the embedded default configuration is used: data under ./riffdb-dev
(or --dev-dir), created with private modes, a sample contract, an outbox archive
directory, and a development token printed with a ready-to-paste curl command.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dev == (configPath != "") {
				return Local("usage", "give exactly one of --config FILE or --dev")
			}
			var (
				cfg   *config.Config
				token string
				err   error
			)
			if dev {
				cfg, token, err = server.DevSetup(devDir, getenv, o)
			} else {
				cfg, err = config.Load(configPath, getenv, o)
			}
			if errors.Is(err, config.ErrUnreadable) {
				return Local("config_unreadable", "%v", err)
			}
			if err != nil {
				return Local("invalid_config", "%v", err)
			}
			err = runUntilSignalled(cmd, cfg, func(s *server.Server) {
				if dev {
					printDevBanner(cmd.ErrOrStderr(), s, devDir, token)
				}
			})
			if errors.Is(err, errForcedExit) {
				return Public("forced_exit", "a second signal forced the exit before the graceful stop ended; "+
					"every acknowledged command was already durable")
			}
			var startup *server.StartupError
			if errors.As(err, &startup) {
				return Local(startupCode(err), "%s", startup.Error())
			}
			if errors.Is(err, primary.ErrCorrupt) {
				// The storage engine found damage only when it read it
				// (block checksums are verified on read): the store failed
				// and the server stopped. Same class as at startup.
				return Local("database_corrupt", "%v", err)
			}
			if err != nil {
				return Public("server_failed", "%v", err)
			}
			return Emit(cmd, map[string]any{"stopped": true}, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, "riffdb stopped")
				return err
			})
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "configuration file (TOML)")
	cmd.Flags().BoolVar(&dev, "dev", false, "run with the embedded default configuration")
	cmd.Flags().StringVar(&devDir, "dev-dir", "riffdb-dev", "data folder for --dev")
	cmd.Flags().StringVar(&o.Listen, "listen", "", "API listen address (overrides server.listen)")
	cmd.Flags().StringVar(&o.MetricsListen, "metrics-listen", "", "metrics listen address (overrides server.metrics_listen)")
	cmd.Flags().StringVar(&o.LogLevel, "log-level", "", "log level: debug, info, warn, error")
	cmd.Flags().StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "OTLP/gRPC collector host:port for traces")
	return cmd
}

// errForcedExit is returned by runUntilSignalled when a second SIGINT or
// SIGTERM arrived before the graceful stop ended.
var errForcedExit = errors.New("cli: forced exit")

// runUntilSignalled runs the server until it fails or a signal stops it.
//
// The first SIGINT or SIGTERM cancels the server's context: server.Run then
// stops it gracefully (in-flight requests get server.shutdown_grace), and
// runUntilSignalled returns what Run returns. A second SIGINT or SIGTERM
// returns errForcedExit at once, leaving the stop running: the process is
// about to exit, and nothing acknowledged depends on the stop finishing
// (every command is synced before its response is sent; the rest is
// recovered at the next start, as after a crash). SIGHUP is ignored: the
// configuration is read only at startup.
//
// Signals are handled from here on; during configuration loading they keep
// their default action, since nothing is open yet.
func runUntilSignalled(cmd *cobra.Command, cfg *config.Config, ready func(*server.Server)) error {
	// The server's logger and this one share standard error.
	out := &lockedWriter{w: cmd.ErrOrStderr()}
	log, err := telemetry.NewLogger(cfg.Telemetry.LogLevel, out)
	if err != nil {
		return fmt.Errorf("%w: telemetry.log_level: %w", config.ErrInvalid, err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, server.Options{Config: cfg, LogOutput: out}, ready) }()
	stopping := false
	for {
		select {
		case err := <-done:
			return err
		case sig := <-sigs:
			switch {
			case sig == syscall.SIGHUP:
				log.Info("SIGHUP ignored: configuration changes apply at restart")
			case !stopping:
				stopping = true
				log.Info("shutting down", zap.Stringer("signal", sig), zap.Stringer("grace", cfg.Server.ShutdownGrace))
				cancel()
			default:
				log.Warn("forced exit", zap.Stringer("signal", sig),
					zap.String("detail", "a second signal ended the graceful stop; every acknowledged command was already durable"))
				_ = log.Sync()
				return errForcedExit
			}
		}
	}
}

// lockedWriter serializes the writes of several loggers to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// startupCode is the envelope code of a server that could not start
// (always kind local, exit 2).
func startupCode(err error) string {
	switch {
	case errors.Is(err, server.ErrListen):
		return "listen_unavailable"
	case errors.Is(err, server.ErrContract):
		return "contract_invalid"
	case errors.Is(err, server.ErrCredentials):
		return "credentials_refused"
	case errors.Is(err, server.ErrDatabase) && errors.Is(err, primary.ErrBusy):
		return "database_busy"
	case errors.Is(err, server.ErrDatabase) && errors.Is(err, primary.ErrCorrupt):
		return "database_corrupt"
	case errors.Is(err, server.ErrDatabase) && errors.Is(err, primary.ErrIncompatible):
		return "database_incompatible"
	case errors.Is(err, server.ErrDatabase) && errors.Is(err, primary.ErrUnprotected):
		return "database_unprotected"
	case errors.Is(err, server.ErrDatabase) && errors.Is(err, primary.ErrStorageFull):
		return "storage_full"
	case errors.Is(err, server.ErrInterrupted):
		return "startup_interrupted"
	case errors.Is(err, server.ErrTLS):
		return "tls_refused"
	case errors.Is(err, server.ErrDatabase):
		return "database_unavailable"
	case errors.Is(err, config.ErrInvalid):
		return "invalid_config"
	case errors.Is(err, server.ErrUnsupportedPlatform):
		return "unsupported_platform"
	default:
		return "startup_failed"
	}
}

func printDevBanner(w io.Writer, s *server.Server, devDir, token string) {
	tokenFile := filepath.Join(devDir, "dev-token")
	fmt.Fprintf(w, `
riffdb is running with the embedded default configuration (data in %[1]s).
  API:      http://%[2]s
  metrics:  http://%[3]s/metrics
  token:    %[4]s   (saved in %[5]s)

Try it:
  curl -s -H "Authorization: Bearer $(cat %[5]s)" -H 'Content-Type: application/json' \
    -d '{"input":{"order_id":"A-1","amount_cents":1250},"idempotency_key":"A-1"}' \
    http://%[2]s/v1/databases/default/commands/place_order
  curl -s -H "Authorization: Bearer $(cat %[5]s)" http://%[2]s/v1/stats

Stop with Ctrl-C.
`, devDir, s.APIAddr(), s.MetricsAddr(), token, tokenFile)
}
