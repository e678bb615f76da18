package backup

// SetAfterStep installs the restore's step hook: f is called after every
// step; an error stops the restore there, as a crash would.
func SetAfterStep(req *RestoreRequest, f func(step string) error) { req.afterStep = f }

// SetFreeSpace replaces the free-space probe of a backup taken with opts.
func SetFreeSpace(opts *Options, f func(dir string) (int64, error)) { opts.freeSpace = f }
