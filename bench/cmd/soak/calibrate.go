package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/riffdb/riffdb/loadtest"
)

// calibration is the measured drain rate.
type calibration struct {
	// Alone is the drain rate of a backlog with no command load; Loaded is
	// the delivery rate while the command mix is offered at Alone (the
	// worker then shares the machine with the commands, as in the soak).
	Alone, Loaded float64
	// Rate is the drain rate the soak is offered half of: Loaded, or Alone
	// when the worker kept up with the mix offered at Alone.
	Rate  float64
	Notes []string
}

// calibrate measures the server's drain rate in two steps. First a
// closed-loop burst of ship_order commands from 64 clients builds a backlog,
// and the drain rate alone is the deliveries per second from the burst's end
// until the backlog is 0. Then the soak's command mix is offered open-loop
// at that rate for loadedFor, and the drain rate under load is the
// deliveries per second over its last two thirds, while the backlog grows:
// the worker is then the bottleneck and shares the machine with the
// commands as it does in the soak. The soak runs at half the smaller of the
// two.
func calibrate(ctx context.Context, srv *process, commands int, loadedFor time.Duration) (calibration, error) {
	var c calibration
	st0, err := srv.stats(ctx)
	if err != nil {
		return c, err
	}
	t0 := time.Now()
	rep, err := loadtest.Run(ctx, loadtest.Config{Address: srv.api, Token: srv.token, Command: "ship_order",
		InputTemplate: `{"order_id":"cal-{{run}}-{{n}}","carrier":"calibration"}`, Requests: commands, Concurrency: 64,
		Duration: 5 * time.Minute})
	if err != nil {
		return c, fmt.Errorf("soak: calibration load: %w", err)
	}
	if rep.Errors > 0 {
		return c, fmt.Errorf("soak: calibration load: %d of %d requests failed (%v)", rep.Errors, rep.Requests, rep.ErrorsByStatus)
	}
	st1, err := srv.stats(ctx)
	if err != nil {
		return c, err
	}
	t1 := time.Now()
	if err := waitDrained(ctx, srv, 5*time.Minute); err != nil {
		return c, fmt.Errorf("soak: calibration: %w", err)
	}
	st2, err := srv.stats(ctx)
	if err != nil {
		return c, err
	}
	t2 := time.Now()
	if st1.Pending >= 1000 {
		c.Alone = (st2.Completed - st1.Completed) / t2.Sub(t1).Seconds()
		c.Notes = append(c.Notes, fmt.Sprintf("alone: %d ship_order commands from 64 clients in %.1f s, then %.0f pending events drained in %.1f s: %.0f events/s",
			commands, t1.Sub(t0).Seconds(), st1.Pending, t2.Sub(t1).Seconds(), c.Alone))
	} else {
		c.Alone = (st2.Completed - st0.Completed) / t2.Sub(t0).Seconds()
		c.Notes = append(c.Notes, fmt.Sprintf("alone: %.0f events/s, a lower bound: the worker kept up with the burst of %d ship_order commands (%.0f pending at its end)",
			c.Alone, commands, st1.Pending))
	}

	// Under load: the mix at the drain rate alone; measure over the last
	// two thirds, once the worker has fallen behind.
	var reps []loadtest.Report
	var errs []error
	mixed := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(mixed)
		reps, errs = runMix(ctx, srv, c.Alone/float64(mixEvents()), loadedFor, 0, nil)
	}()
	read := func(at time.Duration) (dbStats, time.Time, error) {
		select {
		case <-ctx.Done():
			return dbStats{}, time.Time{}, context.Cause(ctx)
		case <-time.After(time.Until(start.Add(at))):
		}
		st, err := srv.stats(ctx)
		return st, time.Now(), err
	}
	a, ta, aerr := read(loadedFor / 3)
	b, tb, berr := read(loadedFor - time.Second)
	<-mixed
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("soak: calibration under load: %w", err)
	}
	for i, r := range reps {
		if r.Errors > 0 {
			return c, fmt.Errorf("soak: calibration under load: %d of %d %s requests failed (%v)", r.Errors, r.Requests,
				commandMix[i].name, r.ErrorsByStatus)
		}
	}
	if err := errors.Join(aerr, berr); err != nil {
		return c, fmt.Errorf("soak: calibration under load: %w", err)
	}
	c.Loaded = (b.Completed - a.Completed) / tb.Sub(ta).Seconds()
	if err := waitDrained(ctx, srv, 5*time.Minute); err != nil {
		return c, fmt.Errorf("soak: calibration: %w", err)
	}
	if b.Pending > a.Pending {
		c.Rate = min(c.Loaded, c.Alone)
		c.Notes = append(c.Notes, fmt.Sprintf("under load: the mix offered at %.0f events/s for %s; %.0f events/s delivered while the backlog grew from %.0f to %.0f",
			c.Alone, loadedFor, c.Loaded, a.Pending, b.Pending))
	} else {
		c.Rate = c.Alone
		c.Notes = append(c.Notes, fmt.Sprintf("under load: the worker kept up with the mix offered at %.0f events/s (backlog %.0f, then %.0f): the rate alone is used",
			c.Alone, a.Pending, b.Pending))
	}
	return c, nil
}

// mixEvents is the number of events of one request of each command.
func mixEvents() int {
	n := 0
	for _, c := range commandMix {
		n += c.events
	}
	return n
}

// runMix offers the command mix open-loop, perCommand requests per second
// of each command, for d, with retryRatio of the requests retried; tick is
// progress, when set, is called about every second with a command's index
// and its requests completed so far. It returns each command's report and
// error.
func runMix(ctx context.Context, srv *process, perCommand float64, d time.Duration, retryRatio float64,
	progress func(command int, requests int64)) ([]loadtest.Report, []error) {
	reports := make([]loadtest.Report, len(commandMix))
	errs := make([]error, len(commandMix))
	var wg sync.WaitGroup
	for i, c := range commandMix {
		wg.Go(func() {
			cfg := loadtest.Config{Address: srv.api, Token: srv.token, Command: c.name, InputTemplate: c.template,
				Rate: perCommand, Concurrency: 64, Requests: int(perCommand*d.Seconds()) + 1, Duration: d,
				RetryRatio: retryRatio}
			if progress != nil {
				cfg.Progress = func(p loadtest.Progress) { progress(i, p.Requests) }
			}
			reports[i], errs[i] = loadtest.Run(ctx, cfg)
		})
	}
	wg.Wait()
	return reports, errs
}

// waitDrained polls the stats until the backlog is 0, at most limit.
func waitDrained(ctx context.Context, srv *process, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		st, err := srv.stats(ctx)
		if err == nil && st.Pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return err
			}
			return fmt.Errorf("%.0f events still pending after %s", st.Pending, limit)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
