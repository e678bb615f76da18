package outbox

import "github.com/riffdb/riffdb/internal/testsupport/testsignal"

// InitTestSignals arms the worker's test signals for tb and returns them.
// Call it before Start.
func (w *Worker) InitTestSignals(tb testsignal.TB) *workerTestSignals {
	w.testSignals.PassEnded.Init(tb)
	w.testSignals.Parked.Init(tb)
	return &w.testSignals
}

// AcceptReuse is acceptReuse, for the acceptance context's test.
const AcceptReuse = acceptReuse
