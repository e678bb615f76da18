// Command riffdb is the riffdb server and its operator tools.
package main

import (
	"os"

	"github.com/riffdb/riffdb/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
