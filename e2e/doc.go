// Package e2e holds end-to-end tests that build the real riffdb binary and
// drive it as an operator would: write a configuration, create capabilities
// with the CLI, start the server, send commands over HTTP, SIGKILL it,
// restart it, and inspect the archive offline.
package e2e
