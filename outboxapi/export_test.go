package outboxapi

// SetRedrivePaging makes a redrive by reason read pages of page intents and
// at most scan intents per request, until restore is called.
func SetRedrivePaging(page, scan int) (restore func()) {
	p, s := redrivePage, redriveScan
	redrivePage, redriveScan = page, scan
	return func() { redrivePage, redriveScan = p, s }
}
