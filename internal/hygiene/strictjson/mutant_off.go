//go:build !riffdb_mutant_duplicatekeys

package strictjson

// allowDuplicates is false: a repeated key is refused. Built with the tag
// riffdb_mutant_duplicatekeys it is true (mutant_on.go), the counter-example
// internal/testsupport/securitydoc builds to prove that the tests SECURITY.md cites for
// strict requests and manifests fail without the check.
const allowDuplicates = false
