package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/riffdb/riffdb/config"
)

// configCheckResult is the JSON result of `riffdb config check`.
type configCheckResult struct {
	Mode      string                `json:"mode"`
	Databases []configCheckDatabase `json:"databases"`
}

type configCheckDatabase struct {
	Alias  string `json:"alias"`
	Outbox bool   `json:"outbox"`
}

func newConfigCheckCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate a configuration file without starting anything",
		Long: `Validate a configuration file exactly as "server run" would, with the
RIFFDB_* environment variables applied, without opening or creating anything.
Problems are reported by option or role name; paths are never printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := config.Load(path, getenv, config.Overrides{})
			switch {
			case errors.Is(err, config.ErrUnreadable):
				// The error carries the operating system's reason without
				// the path; drop the package prefix for the CLI message.
				return Local("config_unreadable", "%s", strings.TrimPrefix(err.Error(), "config: "))
			case err != nil:
				return Local("invalid_config", "%s", err.Error())
			}
			res := configCheckResult{Mode: c.Server.Mode, Databases: make([]configCheckDatabase, 0, len(c.Databases))}
			for _, d := range c.Databases {
				res.Databases = append(res.Databases, configCheckDatabase{Alias: d.Alias, Outbox: d.Outbox != nil})
			}
			return Emit(cmd, res, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "configuration is valid: %d database(s), mode %s\n", len(res.Databases), res.Mode)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the configuration file to check (required)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
