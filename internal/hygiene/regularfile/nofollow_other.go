//go:build !unix

package regularfile

// noFollow is 0 where open has no O_NOFOLLOW; riffdb's servers run on Linux.
const noFollow = 0
