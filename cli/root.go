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

	server := group("server", "Run and query a riffdb server")
	config := group("config", "Validate configuration")
	capability := group("capability", "Manage capability tokens (offline, against the credential store)")
	outbox := group("outbox", "Outbox tools")
	archive := group("archive", "The durable local outbox archive")
	outbox.AddCommand(archive)
	root.AddCommand(server, config, capability, outbox)
	registerCommands(server, config, capability, archive)
	return root
}

// registerCommands attaches each leaf command to its group. Each leaf lives in
// its own file.
func registerCommands(server, config, capability, archive *cobra.Command) {
	for _, add := range commandRegistry {
		add(server, config, capability, archive)
	}
}

// commandRegistry is filled by each command file's init, so that files can be
// added without editing this one.
var commandRegistry []func(server, config, capability, archive *cobra.Command)

func register(f func(server, config, capability, archive *cobra.Command)) {
	commandRegistry = append(commandRegistry, f)
}

func group(name, short string) *cobra.Command {
	return &cobra.Command{Use: name, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
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
