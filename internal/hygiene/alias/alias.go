// Package alias defines the syntax of a database alias, the one rule that
// config applies to [databases.<alias>] and capability applies to a
// capability's database scope, so that every configurable alias can be
// scoped and no scope names an alias the configuration would refuse.
package alias

import "regexp"

// Syntax describes a valid alias in words, for error messages.
const Syntax = "a lowercase letter followed by up to 63 lowercase letters, digits, '_' or '-'"

var pattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// Valid reports whether s is a valid database alias, as Syntax describes.
func Valid(s string) bool { return pattern.MatchString(s) }
