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
// global requirement (statistics, health, managing capabilities), which only
// a global capability satisfies. A database requirement is satisfied by a
// global capability or by one scoped to that database. Revoked capabilities
// satisfy nothing.
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
package capability
