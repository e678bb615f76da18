package server

import (
	"errors"
	"mime"
	"strings"

	"github.com/riffdb/riffdb/internal/hygiene/strictjson"
	"github.com/riffdb/riffdb/primary"
	"github.com/riffdb/riffdb/primary/contract"
)

// Messages of the envelope's refusals (HTTP 400 malformed_request). They
// name the envelope's fields and never quote the body.
const (
	msgMalformedBody = `the body must be one JSON object {"input":{…},"idempotency_key":"…"} with no other fields`
	msgEnvelopeField = `the body may hold only the fields "input" and "idempotency_key", spelled exactly so, and no other fields`
	msgNeedsInput    = `the body needs an "input" object`
)

// errEmptyIdempotencyKey is parseCommandRequest's refusal of an
// idempotency_key that is present but empty (HTTP 400
// invalid_idempotency_key). Taken as "no key", a client that meant to send
// a key but sent "" would commit its retries twice.
var errEmptyIdempotencyKey = errors.New("idempotency_key is empty: omit it (or send null) for no key, or send a key of 1 to 256 bytes")

// parseCommandRequest reads a command request body under strictjson's
// rules, the same ones the contract reads the input with: one JSON object
// and nothing after it; exactly the members "input" (required, not null)
// and "idempotency_key" (a non-empty string; null or absent means none, ""
// is refused with errEmptyIdempotencyKey), byte for
// byte in that case (encoding/json would match "INPUT" too), each at most
// once (encoding/json keeps the last of two); every string, key and value,
// at every depth, valid UTF-8 without an unpaired surrogate escape. So the
// key and the input the primary sees are exactly what the client sent.
//
// A body that is not JSON is refused as a whole. A string, key or
// repetition inside the input that breaks the rules is a
// *contract.InputError whose detail is the sentence the contract gives for
// it; any other problem is an error whose message is the client's
// sentence.
func parseCommandRequest(body []byte) (CommandRequest, error) {
	var req CommandRequest
	var input []byte
	err := strictjson.MemberBytes(body, func(key, value []byte) error {
		switch string(key) {
		case "input":
			input = value
		case "idempotency_key":
			if string(value) == "null" {
				return nil
			}
			if value[0] != '"' {
				return errors.New("idempotency_key must be a string")
			}
			k, err := strictjson.Unquote(value)
			if err != nil {
				return err
			}
			if k == "" {
				return errEmptyIdempotencyKey
			}
			req.IdempotencyKey = k
		default:
			return errors.New(msgEnvelopeField)
		}
		return nil
	})
	if err != nil {
		var se *strictjson.Error
		if !errors.As(err, &se) {
			return CommandRequest{}, err
		}
		return CommandRequest{}, envelopeError(se)
	}
	if input == nil || string(input) == "null" {
		return CommandRequest{}, errors.New(msgNeedsInput)
	}
	if len(req.IdempotencyKey) > primary.MaxIdempotencyKeyLen {
		return CommandRequest{}, errors.New("idempotency_key exceeds 256 bytes")
	}
	req.Input = input
	return req, nil
}

// envelopeError is the client's error for a strictjson problem in a body.
func envelopeError(se *strictjson.Error) error {
	if se.Problem == strictjson.Syntax {
		return errors.New(msgMalformedBody) // the body as a whole is not JSON
	}
	if rel, ok := se.In("input"); ok {
		return contract.StrictInputError(rel)
	}
	switch {
	case len(se.Path) == 0 && se.InKey:
		return errors.New("the body has a field name that " + se.Problem.String())
	case len(se.Path) == 1 && se.Problem == strictjson.DuplicateKey && validEnvelopeKey(se.Path[0]):
		return errors.New(`the body holds "` + se.Path[0] + `" more than once`)
	case len(se.Path) >= 1 && !validEnvelopeKey(se.Path[0]):
		return errors.New(msgEnvelopeField)
	case len(se.Path) >= 1 && (se.Problem == strictjson.InvalidUTF8 || se.Problem == strictjson.LoneSurrogate):
		return errors.New(se.Path[0] + " " + se.Problem.String())
	}
	return errors.New(msgMalformedBody)
}

func validEnvelopeKey(k string) bool { return k == "input" || k == "idempotency_key" }

// checkContentType accepts a command request's Content-Type: the media
// type application/json in any case, with any parameters, but a charset
// only when it is UTF-8 (RFC 8259 JSON is UTF-8; anything else would be
// read as UTF-8 all the same and refused or, worse, misread). An absent
// Content-Type is accepted: a client that sends none (Go's http.Post with an
// empty type, curl --data-binary with -H 'Content-Type:') leaves nothing to
// misread, and the body is read as JSON either way. A client that names
// another type is refused with 415 and the message returned; that includes
// curl -d without -H, which sends application/x-www-form-urlencoded, so the
// README's curl examples pass -H 'Content-Type: application/json'.
func checkContentType(ct string) (string, bool) {
	if ct == "" {
		return "", true
	}
	if ct == "application/json" { // what clients send: no parameters to parse
		return "", true
	}
	const wrongType = "the request body must be application/json"
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return wrongType, false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return wrongType + " in UTF-8 (charset=utf-8 or no charset)", false
	}
	return "", true
}
