// Package backup takes online backups of a primary database and restores
// one offline, destructively, under a new history incarnation.
package backup
