// Package capability holds riffdb's capabilities: opaque bearer tokens that
// grant permissions, either globally or for one database, and the credential
// store that keeps them.
//
// # Tokens
//
// A token is "riffdb_" followed by 32 random bytes in unpadded base64url. It
// is returned once, by Store.Create, and never stored: the store keeps only
// HMAC-SHA-256(key, token), where key is 32 random bytes held in a private
// key file next to the store. A stolen store file alone therefore neither
// reveals tokens nor allows offline guessing of them. Authenticate compares
// the keyed hash against every stored hash with hmac.Equal, in constant time
// and without stopping at the first match.
//
// # Scopes
//
// A capability is global (Database == "") or scoped to one database alias. A
// requirement names a permission and a database; the empty database is a
// global requirement (statistics, managing capabilities), which only a
// global capability satisfies. A database requirement is satisfied by a
// global capability or by one scoped to that database. Health is in
// between: the health endpoint accepts read_health from a global capability,
// which sees every database, or from a scoped one, which sees its own
// database only. Taking and listing a database's backups (manage_backups) is
// a database requirement, like executing commands, and so is listing and
// looking up a database's undelivered events (read_outbox) and redriving its
// dead letters (manage_outbox). Revoked capabilities satisfy nothing.
//
// # Expiry
//
// A capability may expire (Store.CreateExpiring): its record then holds
// "expires_at", and from that time on, by the store's clock, Authenticate
// refuses its token with ErrUnauthenticated, exactly as it refuses an
// unknown one. A record without "expires_at" (every record written before
// expiry existed) never expires, so older store files read as they are; the
// store file's version is unchanged. An earlier build refuses a store file
// holding an expiring record ("expires_at" is an unknown field to it) as
// ErrCorrupt, so a downgrade fails closed instead of honouring an expired
// token.
//
// # The credential store
//
// The store is a directory (mode 0700, owned by the effective uid) holding:
//
//	key                 the 32-byte HMAC key, created on the first Open
//	capabilities.json   the capability records (ids, names, permissions, scopes, hashes)
//	lock                the lock file serializing writers
//
// Every file is a private (0600) regular file owned by the effective uid.
// Writers (the offline CLI and a running server alike) take an exclusive
// flock on the lock file, re-read the store, change it, and replace it
// atomically (temporary file, fsync, rename, fsync of the directory). Readers
// never lock: they see either the old or the new file. A running server picks
// up changes made by the CLI because Authenticate re-checks the store file's
// identity (device, inode, size, modification and change times) at most once
// per RefreshInterval and re-reads it only when that identity changed.
//
// A store file that cannot be parsed, or a store without its key, is
// reported as ErrCorrupt: the store never silently becomes empty, since that
// would quietly invalidate (or, after a reset, re-key) every token.
//
// # Integrity
//
// Damage that keeps a file readable would otherwise go unnoticed: a key file
// zero-filled or with one byte flipped still holds 32 bytes, and every token
// would just be refused; a flipped byte inside a name, a time or a token
// hash still parses, and a capability would silently change or stop
// working. So the store file (version 2) carries an integrity tag,
//
//	"integrity": hex HMAC-SHA-256(key, domain ‖ version ‖ NUL ‖ capabilities)
//
// where capabilities is the "capabilities" value exactly as it is in the
// file, with the whitespace between tokens removed (json.Compact). The tag
// covers the bytes, not a re-encoding of what was decoded, so a damaged byte
// that decoding would hide (invalid UTF-8 turned into U+FFFD, an upper-case
// hex digit) is still noticed, and a later Go release that encoded JSON
// differently could not invalidate stored files. The top level's field
// names must be spelled exactly, and the tag must be lower-case hex, so that
// no byte of the file is left unchecked except whitespace outside strings,
// which means nothing. The domain string contains a NUL byte, which no
// token does, so the one key serves both purposes without a tag ever being
// a token hash.
//
// Every write seals the file; every read, at Open and at every reload by a
// running store, checks it in constant time (hmac.Equal). A mismatch is
// ErrCorrupt: the key file or the store file is damaged, or the two come
// from different copies of the directory; a tag cannot tell which. The
// error says to restore the directory (both files together) from a backup,
// or to move it aside and create new capabilities. A zero-filled key is
// named as such. The key is read once, at Open: a process keeps using its
// intact copy if the key file is damaged while it runs, and the damage is
// found by the next Open (the next CLI command, or a restart).
//
// A store file written by an earlier build (version 1, no tag) is read as
// it is, and sealed by the next Create or Revoke; reading never rewrites it.
// Until then it is not protected, and a key damaged before that write is
// sealed in; a version 1 file that carries a tag is damaged. Earlier builds
// refuse a sealed store file (its tag is an unknown field to them), so a
// downgrade after a write fails closed with ErrCorrupt.
//
// The tag proves that the store file was written with this key, not that it
// is the newest such file: a store file replaced by an older copy of itself
// (from a backup or a snapshot) is authentic. Nor is the tag a defence
// against someone who can write the directory: they can read the key.
//
// # Generations and the anchor
//
// Freshness comes from a counter kept outside the directory. Every write
// stores a generation one higher than the file it replaces ("generation",
// covered by the tag; a file written before generations existed reads as
// generation 0). Open with an Anchor (Options.Anchor; riffdb keeps it in
// each database's directory, see primary.ReadCredentialAnchor) compares the
// store with the highest generation the anchor recorded: a store below it is
// refused with ErrRolledBack, one above it raises it. Every write raises it
// too, under the store's lock, so the offline CLI and a running server keep
// it alike. A running store also keeps its own floor, the highest
// generation it has read or written: a store file put back below the floor
// or the anchor fails every Authenticate with ErrRolledBack (fail closed,
// as for a damaged store) instead of being read. AcceptRestored is the
// operator's explicit way back: it lowers the anchor to the store's
// generation and records from which generation it was lowered, which
// Accepted reports (the server logs it) until the next write.
//
// The anchor is only as fresh as its last write: a place it gained after
// the last write (a new database, one restored from a backup) holds nothing
// until the next write or RecordGeneration. A write whose anchor could not
// be raised is saved and reported (ErrNotAnchored).
package capability
