//go:build unix

package capability

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/riffdb/riffdb/internal/hygiene/alias"
)

// Store file versions. This build writes storeVersion, whose files carry an
// integrity tag. Earlier builds wrote legacyVersion files, without one: they
// are read as they are and sealed by the next write (Create or Revoke).
const (
	storeVersion  = 2
	legacyVersion = 1
)

// integrityDomain starts the input of the store file's integrity tag. The
// key also hashes tokens; no token contains a NUL byte, so no token hash can
// be taken for a tag, nor a tag for a token hash.
const integrityDomain = "riffdb credential store integrity\x00version "

// restoreAdvice ends every ErrCorrupt message. A damaged store is never
// repaired in place: guessing would grant or deny the wrong tokens.
const restoreAdvice = "restore the credential directory (the key file and the store file together) from a backup, " +
	"or move it aside and create new capabilities"

// record is one capability as stored: its description (whose fields
// encoding/json flattens into the record) plus what only the store keeps.
type record struct {
	Capability
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	TokenHash string     `json:"token_hash"` // hex HMAC-SHA-256(key, token)

	hash []byte
}

// document is the content of the store file, as held in memory.
type document struct {
	// Generation counts the writes of the store: every write stores one
	// more than the file it replaces (see anchor.go). 0 is a file written
	// before generations existed.
	Generation   uint64
	Capabilities []record
}

// storeFileJSON is the store file as stored. Capabilities stays raw
// because the integrity tag covers its bytes as they are in the file
// (compacted), not a re-encoding of what was decoded: a damaged byte is
// noticed even where decoding would hide it (invalid UTF-8 in a name decodes
// as U+FFFD). decodeTop reads it; the tags serve encoding.
type storeFileJSON struct {
	Version int `json:"version"`
	// Generation is absent (0) in files written before generations
	// existed; this build always writes one, at least 1.
	Generation   uint64          `json:"generation,omitempty"`
	Capabilities json.RawMessage `json:"capabilities"`
	// Integrity is hex HMAC-SHA-256(key, integrityDomain ‖ version ‖ NUL ‖
	// [generation ‖ NUL ‖] compacted capabilities); absent in legacyVersion
	// files.
	Integrity string `json:"integrity,omitempty"`
	// hasGeneration records that the file names a generation, even 0.
	hasGeneration bool
}

// decode parses and checks a store file. A storeVersion file must carry an
// integrity tag, which is verified against key; key is nil only when the key
// file is missing, and the result then cannot be trusted beyond its length.
// A legacyVersion file has no tag and is accepted as it is.
func decode(data, key []byte) (document, error) {
	f, err := decodeTop(data)
	if err != nil {
		return document{}, err
	}
	switch f.Version {
	case storeVersion:
		if err := verify(f, key); err != nil {
			return document{}, err
		}
	case legacyVersion:
		// A legacy file has no tag: a single damaged byte cannot add one,
		// so a legacy file with a tag is damaged too.
		if f.Integrity != "" {
			return document{}, corrupt("the store file has version %d, which has no integrity tag, but carries one", legacyVersion)
		}
		if f.hasGeneration {
			return document{}, corrupt("the store file has version %d, which has no generation, but carries one", legacyVersion)
		}
	default:
		return document{}, corrupt("the store file has version %d, want %d", f.Version, storeVersion)
	}
	if f.hasGeneration && f.Generation == 0 {
		return document{}, corrupt("the store file's generation is 0; written generations start at 1")
	}
	doc := document{Generation: f.Generation}
	if len(f.Capabilities) > 0 {
		dec := json.NewDecoder(bytes.NewReader(f.Capabilities))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc.Capabilities); err != nil {
			return document{}, corrupt("the store file is not valid: %v", err)
		}
	}
	if doc.Capabilities == nil {
		return document{}, corrupt("the store file has no capabilities list")
	}
	ids := make(map[string]bool, len(doc.Capabilities))
	for i := range doc.Capabilities {
		r := &doc.Capabilities[i]
		if !validID(r.ID) || ids[r.ID] {
			return document{}, corrupt("record %d of the store file has a missing, malformed or duplicate id", i)
		}
		ids[r.ID] = true
		h, err := hex.DecodeString(r.TokenHash)
		if err != nil || len(h) != sha256.Size {
			return document{}, corrupt("capability %s has a malformed token hash", r.ID)
		}
		r.hash = h
		if len(r.Permissions) == 0 {
			return document{}, corrupt("capability %s has no permissions", r.ID)
		}
		for _, p := range r.Permissions {
			if _, err := ParsePermission(string(p)); err != nil {
				return document{}, corrupt("capability %s has an unknown permission", r.ID)
			}
		}
		if r.Database != "" && !alias.Valid(r.Database) {
			return document{}, corrupt("capability %s has a malformed database alias", r.ID)
		}
		if !r.ExpiresAt.IsZero() && !r.ExpiresAt.After(r.CreatedAt) {
			return document{}, corrupt("capability %s expires before it was created", r.ID)
		}
	}
	return doc, nil
}

// decodeTop decodes the top level of a store file. Its field names must be
// spelled exactly: encoding/json would match "Version" to "version", hiding
// a damaged byte outside the part the integrity tag covers.
func decodeTop(data []byte) (storeFileJSON, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fields); err != nil {
		return storeFileJSON{}, corrupt("the store file is not valid: %v", err)
	}
	if dec.More() {
		return storeFileJSON{}, corrupt("the store file has trailing data")
	}
	var f storeFileJSON
	for name, raw := range fields {
		var err error
		switch name {
		case "version":
			err = json.Unmarshal(raw, &f.Version)
		case "capabilities":
			f.Capabilities = raw
		case "generation":
			err = json.Unmarshal(raw, &f.Generation)
			f.hasGeneration = true
		case "integrity":
			err = json.Unmarshal(raw, &f.Integrity)
		default:
			return storeFileJSON{}, corrupt("the store file has an unknown field %q", truncate(name, 64))
		}
		if err != nil {
			return storeFileJSON{}, corrupt("the store file's %s is not valid: %v", name, err)
		}
	}
	return f, nil
}

// verify checks the integrity tag of a storeVersion file against key (only
// the tag's form when key is nil). A mismatch cannot tell which file is
// damaged: the key file, the store file, or both, or they come from
// different copies of the directory.
func verify(f storeFileJSON, key []byte) error {
	tag, err := hex.DecodeString(f.Integrity)
	if err != nil || len(tag) != sha256.Size || strings.ToLower(f.Integrity) != f.Integrity {
		return corrupt("the store file's integrity tag is missing or malformed")
	}
	if key == nil {
		return nil
	}
	var caps bytes.Buffer
	if err := json.Compact(&caps, f.Capabilities); err != nil {
		return corrupt("the store file is not valid: %v", err)
	}
	if !hmac.Equal(seal(key, f.Version, f.Generation, caps.Bytes()), tag) {
		return corrupt("the store file's integrity check fails against the key file: " +
			"one of them is damaged, or they are not from the same copy of the credential directory")
	}
	return nil
}

// seal returns the integrity tag of a store file's version, generation (0:
// none, as in files written before generations existed) and compacted
// capabilities. A generation is written as its decimal digits and a NUL;
// the capabilities start with '[', so no input without a generation is
// also one with a generation.
func seal(key []byte, version int, generation uint64, capabilities []byte) []byte {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "%s%d\x00", integrityDomain, version)
	if generation != 0 {
		fmt.Fprintf(h, "%d\x00", generation)
	}
	h.Write(capabilities)
	return h.Sum(nil)
}

// encode returns the store file for doc, sealed with the store's key. A
// document at generation 0 is written without one, as it was read; writers
// always write a generation of at least 1. It
// reads the result back before returning it, so that a store this build
// cannot verify is never written.
func (s *Store) encode(doc document) ([]byte, error) {
	if doc.Capabilities == nil {
		doc.Capabilities = []record{}
	}
	caps, err := json.Marshal(doc.Capabilities)
	if err != nil {
		return nil, fmt.Errorf("capability: encoding the store: %w", err)
	}
	data, err := json.MarshalIndent(storeFileJSON{
		Version:      storeVersion,
		Generation:   doc.Generation,
		Capabilities: caps,
		Integrity:    hex.EncodeToString(seal(s.key, storeVersion, doc.Generation, caps)),
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("capability: encoding the store: %w", err)
	}
	data = append(data, '\n')
	if _, err := decode(data, s.key); err != nil {
		// Not ErrCorrupt: nothing on disk is damaged.
		return nil, fmt.Errorf("capability: encoding the store: the encoding does not read back: %v", err)
	}
	return data, nil
}

// corrupt returns an error wrapping ErrCorrupt that says what is wrong and
// what the operator can do.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s; %s", ErrCorrupt, fmt.Sprintf(format, args...), restoreAdvice)
}
