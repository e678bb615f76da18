package gen

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// panel is what every generated panel has: a title, a description, a unit,
// a width and height on the 24-column grid, and its queries.
type panel struct {
	title, description, unit string
	w, h                     uint32
	targets                  []target
}

func legend() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().
		DisplayMode(common.LegendDisplayModeTable).
		Placement(common.LegendPlacementBottom).
		ShowLegend(true)
}

// graph is a time series panel.
func graph(p panel) *timeseries.PanelBuilder {
	b := timeseries.NewPanelBuilder().
		Title(p.title).
		Description(p.description).
		Datasource(promDS).
		Unit(p.unit).
		Min(0).
		Span(p.w).
		Height(p.h).
		FillOpacity(10).
		Legend(legend()).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)).
		Targets(queries(p.targets))
	for _, t := range p.targets {
		if t.exemplar {
			return b.DataLinks(traceLinks())
		}
	}
	return b
}

// single is a stat panel showing the last value of each series.
func single(p panel, red float64) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(p.title).
		Description(p.description).
		Datasource(promDS).
		Unit(p.unit).
		Span(p.w).
		Height(p.h).
		GraphMode(common.BigValueGraphModeArea).
		ColorMode(common.BigValueColorModeValue).
		Orientation(common.VizOrientationAuto).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Thresholds(thresholds(red)).
		Targets(queries(p.targets))
}

func thresholds(red float64) *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().
		Mode(dashboard.ThresholdsModeAbsolute).
		Steps([]dashboard.Threshold{{Value: nil, Color: "green"}, {Value: cog.ToPtr(red), Color: "red"}})
}

// states is a state timeline: one row per series, coloured by its value.
func states(p panel) *statetimeline.PanelBuilder {
	return statetimeline.NewPanelBuilder().
		Title(p.title).
		Description(p.description).
		Datasource(promDS).
		Span(p.w).
		Height(p.h).
		ShowValue(common.VisibilityModeNever).
		MergeValues(true).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(false)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)).
		Thresholds(thresholds(1)).
		Targets(queries(p.targets))
}

// grid is a table of instant queries joined on their labels: one row per
// instance and database, one column per query.
func grid(p panel, columns map[string]string, hidden ...string) *table.PanelBuilder {
	exclude := map[string]bool{"Time": true}
	for _, h := range hidden {
		exclude[h] = true
	}
	for i := range p.targets {
		p.targets[i].instant = true
	}
	return table.NewPanelBuilder().
		Title(p.title).
		Description(p.description).
		Datasource(promDS).
		Span(p.w).
		Height(p.h).
		Filterable(true).
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
			"excludeByName": exclude,
			"renameByName":  columns,
		}}).
		Targets(queries(p.targets))
}
