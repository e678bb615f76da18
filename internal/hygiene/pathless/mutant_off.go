//go:build !riffdb_mutant_keeppaths

package pathless

// keepPaths is false: Error and Text remove paths and stacks. Built with the tag
// riffdb_mutant_keeppaths it is true (mutant_on.go), the counter-example
// internal/testsupport/securitydoc builds to prove that the tests SECURITY.md cites for
// path-free messages fail without them.
const keepPaths = false
