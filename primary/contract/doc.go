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
// Plan.Events validates one command's JSON input strictly and returns one
// Draft per emitted event type. The input is read under internal/hygiene/strictjson's
// rules, the same ones the HTTP envelope is read with: one JSON object and
// nothing after it, every string valid UTF-8 with no unpaired surrogate
// escape, no repeated key at any depth. Unknown, missing, repeated and
// mistyped fields are refused too. Every refusal is an *InputError whose
// Detail is one sentence that names the field but never echoes its value.
// So the payload is exactly what the client sent, read one way only: no
// two different strings ever map to the same payload. Every draft's payload is the canonical JSON of the validated input:
// keys sorted, no whitespace, integers in plain decimal, bytes as standard
// padded base64, absent optional fields omitted, and strings encoded by
// encoding/json without HTML escaping. The same logical input therefore
// always produces identical payload bytes, which is what lets the archive
// accept a redelivered event as equal to the one it already holds.
package contract
