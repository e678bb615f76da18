// Package cli holds riffdb's command tree: one cobra command per file, all
// writing through one output envelope.
//
// In JSON mode (--output json) every invocation prints exactly one object and
// a newline, success or failure:
//
//	{"schema":"riffdb.cli.output/v1","command":"outbox.archive.inspect","ok":true,"result":{…}}
//	{"schema":"riffdb.cli.output/v1","command":"config.check","ok":false,"error":{"kind":"local","code":"…","message":"…"}}
//
// Exit codes: 0 success; 1 public or transport error; 2 local or usage error;
// 3 outcome unknown. Commands report failures by returning an *Error (see
// Local, Public, Client, Uncertain); any other error, including cobra's own
// usage errors, is reported as a local usage error.
package cli
