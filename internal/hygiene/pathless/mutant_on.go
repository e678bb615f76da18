//go:build riffdb_mutant_keeppaths

package pathless

// keepPaths, built with the tag riffdb_mutant_keeppaths, makes Error and Text return
// its input unchanged: see mutant_off.go.
const keepPaths = true
