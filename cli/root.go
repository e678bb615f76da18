package cli

import (
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Main runs the riffdb command line with args (without the program name) and
// returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return ExitOK
	}
	mode, _ := root.PersistentFlags().GetString("output")
	if mode != "json" {
		mode = "text"
	}
	return report(cmd, mode, stdout, stderr, err)
}

// NewRootCommand builds the whole riffdb command tree.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "riffdb",
		Short:         "riffdb: a database server that delivers committed events into a durable local outbox archive",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch m := outputMode(cmd); m {
			case "text", "json":
				return nil
			default:
				return Local("usage", "--output must be text or json, not %q", m)
			}
		},
	}
	root.PersistentFlags().String("output", "text", "output format: text or json")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Local("usage", "%v", err) })

	root.AddCommand(
		group("server", "Run and query a riffdb server",
			newServerStatsCommand(),
			newServerHealthCommand(),
			newServerRunCommand(),
		),
		group("config", "Validate configuration",
			newConfigCheckCommand(),
		),
		group("capability", "Manage capability tokens (offline, against the credential store)",
			newCapabilityCreateCommand(),
			newCapabilityListCommand(),
			newCapabilityRevokeCommand(),
		),
		group("outbox", "Outbox tools",
			group("archive", "The durable local outbox archive",
				newOutboxArchiveInspectCommand(),
			),
		),
		newLoadtestCommand(),
	)
	return root
}

// group returns a command that only groups its subcommands: run without one,
// it prints its help.
func group(name, short string, subcommands ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: name, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	cmd.AddCommand(subcommands...)
	return cmd
}

func outputMode(cmd *cobra.Command) string {
	m, err := cmd.Flags().GetString("output")
	if err != nil {
		return "text"
	}
	return m
}

// getenv is the environment lookup used by commands; tests may replace it.
var getenv = os.Getenv
