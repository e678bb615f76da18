// Package strictjson holds riffdb's one set of rules for the JSON a client
// sends: the command envelope and the command input are both read with it,
// so that the two can never disagree about what a request means.
//
// A document is accepted only when it is exactly one RFC 8259 JSON value,
// optionally surrounded by JSON whitespace, and
//
//   - every string (keys included) is valid UTF-8: encoding/json would
//     silently replace an invalid byte with U+FFFD, so that two different
//     strings would read as the same one;
//   - no \u escape leaves a UTF-16 surrogate unpaired (a high surrogate
//     must be followed at once by an escaped low one): encoding/json would
//     turn "\ud800" and "\udfff" into U+FFFD as well;
//   - no object, at any depth, has two members whose keys decode to the
//     same string (encoding/json keeps the last one);
//   - arrays and objects nest at most MaxDepth levels.
//
// Keys are compared after decoding, as JSON defines them: "\u0073" and "s"
// are the same key. Strings that pass decode to exactly the string
// encoding/json decodes (FuzzUnquoteMatchesEncodingJSON checks this).
//
// Errors are *Error values that locate the problem by the object keys
// leading to it and say what is wrong without quoting any value, so a
// caller can build a message that names the field and never echoes the
// client's data.
package strictjson
