package telemetry

import (
	"context"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// HTTPServerMetricPrefix names the instruments that HTTP server
// instrumentation (the server's own, or otelhttp) records;
// HTTPServerAttributes is applied to each of them, except those of
// HTTPServerScope, which record no other attribute.
const HTTPServerMetricPrefix = "http.server."

// HTTPServerScope is the instrumentation scope of riffdb's own HTTP server
// instrumentation (the API's; package server). Its http.server.*
// instruments are recorded with attribute sets that hold only
// HTTPServerAttributes, built once each, so the view does not filter them
// again for every measurement.
const HTTPServerScope = "github.com/riffdb/riffdb/server/http"

// HTTPServerAttributes are the only attribute keys kept on the HTTP server
// instruments (http.server.request.duration, http.server.request.body.size,
// http.server.response.body.size). Each comes from a bounded set whatever a
// client sends: otelhttp maps every method outside the nine standard ones
// to "_OTHER"; net/http only serves HTTP/1.x and HTTP/2, so the protocol
// name and version have a handful of values; the scheme is http or https;
// the status code is the server's own; the route is a pattern registered on
// the server's mux, never the request path. Everything else is dropped —
// above all server.address and server.port, which otelhttp takes from the
// client's Host header, so that one client sending many Host values would
// otherwise create one series each until the SDK's cardinality limit folds
// new series, legitimate ones included, into otel_metric_overflow.
var HTTPServerAttributes = []attribute.Key{
	semconv.HTTPRequestMethodKey,
	semconv.HTTPResponseStatusCodeKey,
	semconv.URLSchemeKey,
	semconv.NetworkProtocolNameKey,
	semconv.NetworkProtocolVersionKey,
	semconv.HTTPRouteKey,
}

// view is the meter provider's single View. It is one function rather than
// one sdkmetric.NewView per concern because every matching view creates its
// own stream: an HTTP duration histogram matched by two views would be
// exported twice under one name.
//
//   - Histograms named "*.duration" get DurationBuckets, except those of
//     LongDurations, which get LongDurationBuckets.
//   - Instruments named "http.server.*" keep only HTTPServerAttributes
//     (those of HTTPServerScope record nothing else, and are not filtered).
//
// Exemplars of every instrument carry no filtered attributes (see
// withoutFilteredAttributes), whatever the stream.
func view() sdkmetric.View {
	durations := sdkmetric.NewView(
		sdkmetric.Instrument{Name: "*.duration", Kind: sdkmetric.InstrumentKindHistogram},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: DurationBuckets}})
	keep := attribute.NewAllowKeysFilter(HTTPServerAttributes...)
	return func(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
		s, ok := durations(i)
		if ok && i.Kind == sdkmetric.InstrumentKindHistogram && slices.Contains(LongDurations, i.Name) {
			s.Aggregation = sdkmetric.AggregationExplicitBucketHistogram{Boundaries: LongDurationBuckets}
		}
		if !ok {
			s = sdkmetric.Stream{Name: i.Name, Description: i.Description, Unit: i.Unit}
		}
		if strings.HasPrefix(i.Name, HTTPServerMetricPrefix) && i.Scope.Name != HTTPServerScope {
			s.AttributeFilter = keep
		}
		s.ExemplarReservoirProviderSelector = withoutFilteredAttributes
		return s, true
	}
}

// withoutFilteredAttributes selects the SDK's default exemplar reservoir
// but never hands it the attributes a view filtered out. The SDK keeps them
// on exemplars by default, and the Prometheus exporter writes them as
// exemplar labels, so a dropped server.address would otherwise reappear on
// /metrics (and a long one would exceed the OpenMetrics exemplar label
// limit, losing the exemplar altogether).
func withoutFilteredAttributes(agg sdkmetric.Aggregation) exemplar.ReservoirProvider {
	provider := sdkmetric.DefaultExemplarReservoirProviderSelector(agg)
	return func(attrs attribute.Set) exemplar.Reservoir {
		return unfilteredReservoir{provider(attrs)}
	}
}

// unfilteredReservoir is a reservoir whose exemplars keep only the trace
// context and value of a measurement, never its filtered attributes.
type unfilteredReservoir struct{ exemplar.Reservoir }

func (r unfilteredReservoir) Offer(ctx context.Context, t time.Time, v exemplar.Value, _ []attribute.KeyValue) {
	r.Reservoir.Offer(ctx, t, v, nil)
}
