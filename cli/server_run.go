package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/config"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/server"
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
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			err = server.Run(ctx, server.Options{Config: cfg, LogOutput: cmd.ErrOrStderr()}, func(s *server.Server) {
				if dev {
					printDevBanner(cmd.ErrOrStderr(), s, devDir, token)
				}
			})
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
