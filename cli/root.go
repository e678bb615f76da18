package cli

import (
	"errors"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
				return Local("usage", "--output must be text or json")
			}
		},
	}
	root.PersistentFlags().String("output", "text", "output format: text or json")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return flagError(err) })

	root.AddCommand(
		group("server", "Run and query a riffdb server",
			newServerStatsCommand(),
			newServerHealthCommand(),
			newServerRunCommand(),
		),
		group("database", "Back up and restore databases",
			newDatabaseBackupCommand(),
			newDatabaseRestoreCommand(),
		),
		group("config", "Validate configuration",
			newConfigCheckCommand(),
		),
		group("capability", "Manage capability tokens (offline, against the credential store)",
			newCapabilityCreateCommand(),
			newCapabilityListCommand(),
			newCapabilityRevokeCommand(),
			newCapabilityAcceptRestoredCommand(),
		),
		group("outbox", "Outbox tools",
			group("archive", "The durable local outbox archive",
				newOutboxArchiveInspectCommand(),
			),
			group("deliveries", "List and look up a database's undelivered events (through the server; needs read_outbox)",
				newOutboxDeliveriesListCommand(),
				newOutboxDeliveriesShowCommand(),
			),
			group("dead-letters", "Redrive a database's dead letters (through the server; needs manage_outbox)",
				newOutboxDeadLettersRetryCommand(),
			),
		),
		newLoadtestCommand(),
	)
	quietArgs(root)
	return root
}

// quietArgs wraps the argument check of cmd and of every command below it
// so that a refusal never repeats the argument given (cobra's "unknown
// command" quotes it, and it may be a path or a secret).
func quietArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			switch {
			case err == nil:
				return nil
			case strings.HasPrefix(err.Error(), "unknown command"):
				return Local("usage", "%s takes no such argument; see --help", c.CommandPath())
			}
			return Local("usage", "%s: wrong number of arguments (%v); see --help", c.CommandPath(), err)
		}
	}
	for _, sub := range cmd.Commands() {
		quietArgs(sub)
	}
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

// flagError turns a flag-parsing error into a usage error that names the
// flag but never repeats the value given: pflag's own messages quote it,
// and a value may be a path or a secret. An unknown flag is named only when
// its name looks like one.
func flagError(err error) error {
	var (
		invalid  *pflag.InvalidValueError
		required *pflag.ValueRequiredError
		notExist *pflag.NotExistError
		syntax   *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		name := "--" + f.Name
		if f.Shorthand != "" {
			name = "-" + f.Shorthand + ", " + name
		}
		return Local("usage", "%s must be %s; see --help", name, flagValueKind(f.Value.Type()))
	case errors.As(err, &required):
		return Local("usage", "--%s needs a value", required.GetFlag().Name)
	case errors.As(err, &notExist):
		if name := notExist.GetSpecifiedName(); plainFlagName.MatchString(name) {
			if notExist.GetSpecifiedShortnames() != "" {
				return Local("usage", "unknown flag -%s; see --help", name[:1])
			}
			return Local("usage", "unknown flag --%s; see --help", name)
		}
		return Local("usage", "unknown flag; see --help")
	case errors.As(err, &syntax):
		return Local("usage", "bad flag syntax; see --help")
	}
	return Local("usage", "the flags could not be parsed; see --help")
}

// plainFlagName matches what a flag name could be, so that repeating it
// cannot leak a value typed in its place.
var plainFlagName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// flagValueKind describes what a flag of pflag type typ accepts.
func flagValueKind(typ string) string {
	switch typ {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration such as 30s or 5m"
	}
	return "a valid " + typ
}
