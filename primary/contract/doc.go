// Package contract compiles a database's contract file into validated command
// plans and turns command input into the events a commit emits.
//
// A contract is a strict TOML document with one table per command:
//
//	[commands.place_order]
//	input = { order_id = "string", amount_cents = "int", note = "string?" }
//	emits = ["order_placed"]
//
// Input field types are string, int (a JSON integer within int64), bool and
// bytes (standard base64 in JSON); a "?" suffix makes a field optional.
// Command and field names match [a-z][a-z0-9_]{0,63}; event types match
// [a-z][a-z0-9_.]{0,127}. A command has 1 to 64 fields and emits 1 to 16
// distinct event types. Unknown keys anywhere in the file are rejected.
//
// Compilation happens once, at startup; an invalid contract is an error that
// names the command and field at fault and stops the server. Each compiled
// Plan has a stable ID derived from a canonical description of the plan, so
// the same contract yields the same ids across restarts and machines.
//
// Plan.Events validates one command's JSON input strictly (unknown, missing,
// duplicate and mistyped fields are refused, with messages that name the
// field but never echo its value) and returns one Draft per emitted event
// type. Every draft's payload is the canonical JSON of the validated input:
// keys sorted, no whitespace, integers in plain decimal, bytes as standard
// padded base64, absent optional fields omitted, and strings encoded by
// encoding/json without HTML escaping. The same logical input therefore
// always produces identical payload bytes, which is what lets the archive
// accept a redelivered event as equal to the one it already holds.
package contract
