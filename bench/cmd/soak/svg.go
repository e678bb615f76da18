package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// line is one polyline of a panel.
type line struct {
	label string
	color string
	value func(Sample) float64
	// perSecond plots, at each sample, the change of value per second of
	// the interval that ends there (value is then a cumulative counter);
	// the first sample has no interval, and a counter that went down (a
	// restart) gives no point.
	perSecond bool
}

// series returns the values the line plots at each sample.
func (l line) series(samples []Sample) []float64 {
	out := make([]float64, len(samples))
	for i, s := range samples {
		v := l.value(s)
		if l.perSecond {
			v = math.NaN()
			if i > 0 {
				dt := (s.Elapsed - samples[i-1].Elapsed).Seconds()
				if d := l.value(s) - l.value(samples[i-1]); dt > 0 && d >= 0 {
					v = d / dt
				}
			}
		}
		out[i] = v
	}
	return out
}

// panel is one chart of the plot: one or more series over elapsed time.
type panel struct {
	title string
	unit  string
	lines []line
}

// panels are the plot's charts, one per recorded series.
var panels = []panel{
	{title: "RSS", unit: "MiB", lines: []line{
		{"VmRSS", "#1f77b4", func(s Sample) float64 { return s.RSSBytes / (1 << 20) }, false},
		{"Go heap in use", "#ff9896", func(s Sample) float64 { return s.HeapInUse / (1 << 20) }, false},
		{"block cache", "#c49c94", func(s Sample) float64 { return s.BlockCache / (1 << 20) }, false},
		{"memtables allocated", "#aec7e8", func(s Sample) float64 { return s.Memtables / (1 << 20) }, false},
		{"C heap resident", "#bcbd22", func(s Sample) float64 { return s.CHeapRSS / (1 << 20) }, false},
		{"C heap free", "#dbdb8d", func(s Sample) float64 { return s.CHeapFree / (1 << 20) }, false}}},
	{title: "goroutines", unit: "", lines: []line{
		{"go_goroutines", "#2ca02c", func(s Sample) float64 { return s.Goroutines }, false},
		{"minus sockets", "#98df8a", func(s Sample) float64 { return s.Goroutines - s.Sockets }, false}}},
	{title: "open file descriptors", unit: "", lines: []line{
		{"/proc/pid/fd", "#9467bd", func(s Sample) float64 { return s.OpenFDs }, false},
		{"not sockets", "#c5b0d5", func(s Sample) float64 { return s.OpenFDs - s.Sockets }, false},
		{"tables", "#8c564b", func(s Sample) float64 { return s.Tables }, false}}},
	{title: "Pebble compaction debt", unit: "MiB", lines: []line{
		{"primary", "#ff7f0e", func(s Sample) float64 { return s.DebtPrimary / (1 << 20) }, false},
		{"archive", "#8c564b", func(s Sample) float64 { return s.DebtArchive / (1 << 20) }, false}}},
	{title: "commit→archived lag per interval", unit: "ms", lines: []line{
		{"p50", "#17becf", func(s Sample) float64 { return s.LagP(0.5) }, false},
		{"p99", "#d62728", func(s Sample) float64 { return s.LagP(0.99) }, false}}},
	{title: "pending deliveries", unit: "events", lines: []line{{"pending", "#7f7f7f", func(s Sample) float64 { return s.Pending }, false}}},
	// Where the stores' time went in each interval: what explained the
	// intervals of high p99 (docs/benchmarks.md, "The soak").
	{title: "share of each interval in WAL syncs and write stalls", unit: "seconds per second", lines: []line{
		{"archive WAL syncs", "#8c564b", func(s Sample) float64 { return s.FsyncSecondsArchive }, true},
		{"primary WAL syncs", "#ff7f0e", func(s Sample) float64 { return s.FsyncSecondsPrimary }, true},
		{"archive stalls", "#e377c2", func(s Sample) float64 { return s.StallSecondsArchive }, true},
		{"primary stalls", "#d62728", func(s Sample) float64 { return s.StallSecondsPrimary }, true}}},
	// What the server, the machine and the data's disk were busy with:
	// whether the server's cost or the machine around it changed.
	{title: "CPU and the data's disk", unit: "seconds per second", lines: []line{
		{"server CPU", "#1f77b4", func(s Sample) float64 { return s.ServerCPUSeconds }, true},
		{"machine CPUs busy", "#aec7e8", func(s Sample) float64 { return s.MachineBusySeconds }, true},
		{"disk flushing", "#2ca02c", func(s Sample) float64 { return s.DiskFlushSeconds }, true},
		{"disk writing", "#98df8a", func(s Sample) float64 { return s.DiskWriteSeconds }, true}}},
}

// Plot geometry, in SVG user units.
const (
	plotWidth   = 900
	panelHeight = 170
	marginLeft  = 70
	marginRight = 20
	panelTop    = 28 // room for the title above each chart
	panelBottom = 30 // room for the time axis below each chart
	headerH     = 40
)

// titleOpen and titleClose surround the title writeSVG draws.
const (
	titleOpen  = `font-size="14" font-weight="bold">`
	titleClose = `</text>`
)

// svgTitle returns the title of a plot writeSVG drew, if it has one.
func svgTitle(svg []byte) (string, bool) {
	_, rest, ok := strings.Cut(string(svg), titleOpen)
	if !ok {
		return "", false
	}
	t, _, ok := strings.Cut(rest, titleClose)
	if !ok {
		return "", false
	}
	return html.UnescapeString(t), true
}

// writeSVG draws one panel per series over elapsed time, with the warm-up
// marked and the baseline and last windows shaded, as a self-contained SVG.
func writeSVG(out io.Writer, title string, samples []Sample, w Windows) error {
	height := headerH + len(panels)*panelHeight
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		plotWidth, height, plotWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="18" `+titleOpen+`%s`+titleClose+"\n", marginLeft, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="33" fill="#555">shaded: baseline window %s–%s and last window %s–%s; dashed: end of the warm-up</text>`+"\n",
		marginLeft, w.BaseStart, w.BaseEnd, w.LastStart, w.Total)
	for i, p := range panels {
		drawPanel(&b, p, samples, w, headerH+i*panelHeight)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(out, b.String())
	return err
}

// scale maps data coordinates to the chart area.
type scale struct {
	x0, x1, y0, y1   float64 // chart area
	tmax, vmin, vmax float64 // data ranges
}

func (s scale) x(t float64) float64 { return s.x0 + (s.x1-s.x0)*t/s.tmax }
func (s scale) y(v float64) float64 {
	return s.y1 - (s.y1-s.y0)*(v-s.vmin)/(s.vmax-s.vmin)
}

// valueRange returns the range of the panel's values (NaN ignored), from 0
// unless a value is negative, widened so that a flat series is visible.
func valueRange(p panel, samples []Sample) (lo, hi float64) {
	lo, hi = 0, math.Inf(-1)
	for _, l := range p.lines {
		for _, v := range l.series(samples) {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if math.IsInf(hi, -1) || hi <= lo {
		hi = lo + 1
	}
	return lo, niceCeil(hi)
}

// niceCeil returns the smallest of 1, 1.2, 1.6, 2, 2.4, 3.2, 4, 6, 8 or 10
// times a power of ten that is at least v (v > 0), so that the axis
// ticks at quarters read well.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.6, 2, 2.4, 3.2, 4, 6, 8, 10} {
		if m*p >= v*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

func drawPanel(b *strings.Builder, p panel, samples []Sample, w Windows, top int) {
	tmax := w.Total.Seconds()
	for _, s := range samples {
		tmax = max(tmax, s.Elapsed.Seconds())
	}
	if tmax <= 0 {
		tmax = 1
	}
	lo, hi := valueRange(p, samples)
	sc := scale{x0: marginLeft, x1: plotWidth - marginRight, y0: float64(top + panelTop),
		y1: float64(top + panelHeight - panelBottom), tmax: tmax, vmin: lo, vmax: hi}
	unit := ""
	if p.unit != "" {
		unit = " (" + p.unit + ")"
	}
	b.WriteString(`<g class="panel">` + "\n")
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s%s</text>`+"\n", marginLeft, top+panelTop-8, html.EscapeString(p.title), html.EscapeString(unit))
	for _, win := range [][2]time.Duration{{w.BaseStart, w.BaseEnd}, {w.LastStart, w.Total}} {
		fmt.Fprintf(b, `<rect class="window" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f0f0f0"/>`+"\n",
			sc.x(win[0].Seconds()), sc.y0, sc.x(win[1].Seconds())-sc.x(win[0].Seconds()), sc.y1-sc.y0)
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`+"\n",
		sc.x(w.Warmup.Seconds()), sc.y0, sc.x(w.Warmup.Seconds()), sc.y1)
	// Axes.
	fmt.Fprintf(b, `<polyline class="axes" points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="none" stroke="black"/>`+"\n",
		sc.x0, sc.y0, sc.x0, sc.y1, sc.x1, sc.y1)
	for k := 0; k <= 4; k++ {
		v := lo + (hi-lo)*float64(k)/4
		y := sc.y(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`, sc.x0-4, y, sc.x0, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", sc.x0-6, y+4, tick(v))
	}
	step := timeStep(tmax)
	for t := 0.0; t <= tmax+1e-9; t += step {
		x := sc.x(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`, x, sc.y1, x, sc.y1+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, sc.y1+16, (time.Duration(t) * time.Second).String())
	}
	for li, l := range p.lines {
		for _, pts := range segments(samples, l.series(samples), sc) {
			fmt.Fprintf(b, `<polyline class="series" points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", pts, l.color)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="%s" text-anchor="end">%s</text>`+"\n",
			sc.x1-float64(li)*130, top+panelTop-8, l.color, html.EscapeString(l.label))
	}
	b.WriteString("</g>\n")
}

// segments returns the polyline point lists of one series (values, one per
// sample): a NaN value (nothing measured) breaks the line.
func segments(samples []Sample, values []float64, sc scale) []string {
	var out []string
	var cur []string
	for i, s := range samples {
		v := values[i]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if len(cur) > 0 {
				out = append(out, strings.Join(cur, " "))
				cur = nil
			}
			continue
		}
		cur = append(cur, fmt.Sprintf("%.1f,%.1f", sc.x(s.Elapsed.Seconds()), sc.y(v)))
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, " "))
	}
	return out
}

// timeStep returns a tick spacing in seconds giving at most about ten ticks.
func timeStep(tmax float64) float64 {
	for _, s := range []float64{10, 30, 60, 120, 300, 600, 900, 1800, 3600} {
		if tmax/s <= 10 {
			return s
		}
	}
	return math.Ceil(tmax/10/3600) * 3600
}

// tick formats an axis value compactly.
func tick(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	case a >= 10:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
