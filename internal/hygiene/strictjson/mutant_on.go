//go:build riffdb_mutant_duplicatekeys

package strictjson

// allowDuplicates, built with the tag riffdb_mutant_duplicatekeys, lets a
// repeated key through: see mutant_off.go.
const allowDuplicates = true
