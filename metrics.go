package leaderelection

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Metrics recorded through [WithMeterProvider], all with the attributes
// leaderelection.container and leaderelection.blob:
//
//	leaderelection.is_leader              gauge      1 while this instance's leader func runs, else 0
//	leaderelection.term                   gauge      the term number of this instance's leader func, observed only while it runs
//	leaderelection.renew.age              gauge, s   seconds since the send time of the last confirmed renewal (or acquire, or
//	                                                 ETag lease record write), observed only while this instance holds the lease
//	leaderelection.transitions            counter    terms started and stopped; attributes direction (started|stopped) and reason
//	leaderelection.acquire.attempts       counter    follower attempts; attribute outcome (acquired|held|transient|permanent)
//	leaderelection.renew.duration         histogram  seconds per renewal request; attribute outcome (ok|lost|transient|permanent)
//	leaderelection.term.stop_margin       histogram  seconds between a leader func's return and the moment its lease could expire
//	leaderelection.silent_lease.breaks    counter    a follower's breaks of an ETag lease whose ETag stood for its declared duration;
//	                                                 attribute outcome (broken|renewed: the holder wrote just in time|gone: no lease was left|failed)
//
// A ShardOwner reports its sessions' transitions, renew.duration,
// renew.age, term.stop_margin and silent_lease.breaks (leaderelection.blob
// is the prefix + "sessions/"), not is_leader or term: a session's term
// fences nothing a user sees; its shards' transitions and term.stop_margin
// (the prefix + "shards/"). Its own gauges and counters are listed at
// shardCounters. The README's Metrics section lists them all, with units.
const meterName = "github.com/blobelect/leaderelection"

type metrics struct {
	meter       metric.Meter
	attrs       attribute.Set
	transitions metric.Int64Counter
	attempts    metric.Int64Counter
	renew       metric.Float64Histogram
	margin      metric.Float64Histogram
	isLeader    metric.Int64ObservableGauge
	term        metric.Int64ObservableGauge
	renewAge    metric.Float64ObservableGauge
	silent      metric.Int64Counter

	// held is the term in progress on this lease (see holding), nil
	// between terms: the gauges read it at collection.
	held atomic.Pointer[termState]
}

func newMetrics(mp metric.MeterProvider, container, blob string) *metrics {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := &metrics{
		meter: mp.Meter(meterName),
		attrs: attribute.NewSet(attribute.String("leaderelection.container", container), attribute.String("leaderelection.blob", blob)),
	}
	// Instrument creation only fails for invalid names, which are constant
	// here; a failed instrument is a no-op one, as the API guarantees.
	m.transitions, _ = m.meter.Int64Counter("leaderelection.transitions", metric.WithDescription("Terms started and stopped by this instance."))
	m.attempts, _ = m.meter.Int64Counter("leaderelection.acquire.attempts", metric.WithDescription("Attempts to acquire the lease, by outcome."))
	m.renew, _ = m.meter.Float64Histogram("leaderelection.renew.duration", metric.WithUnit("s"), metric.WithDescription("Duration of lease renewal requests."))
	m.margin, _ = m.meter.Float64Histogram("leaderelection.term.stop_margin", metric.WithUnit("s"),
		metric.WithDescription("Time between a leader func's return and the moment its lease could expire."))
	m.isLeader, _ = m.meter.Int64ObservableGauge("leaderelection.is_leader", metric.WithDescription("1 while this instance's leader func runs."))
	m.term, _ = m.meter.Int64ObservableGauge("leaderelection.term",
		metric.WithDescription("The term number (fencing token) of this instance's leader func; observed only while it runs."))
	m.renewAge, _ = m.meter.Float64ObservableGauge("leaderelection.renew.age", metric.WithUnit("s"),
		metric.WithDescription("Time since the send time of the last confirmed renewal of the lease this instance holds; "+
			"the lease is safe until LeaseDuration - StopMargin. Observed only while it holds the lease."))
	m.silent, _ = m.meter.Int64Counter("leaderelection.silent_lease.breaks",
		metric.WithDescription("Breaks of an ETag lease whose ETag stood unchanged for its holder's declared lease duration, by outcome."))
	return m
}

// observeLeading registers the is_leader, term and renew.age gauges for the
// life of one RunTaskWhenMutexAcquired call; the returned func unregisters
// them.
func (m *metrics) observeLeading(leading func() bool) func() {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if leading() {
			v = 1
		}
		o.ObserveInt64(m.isLeader, v, metric.WithAttributeSet(m.attrs))
		if t := m.held.Load(); t != nil && v == 1 && t.started.Load() {
			o.ObserveInt64(m.term, t.term.Number, metric.WithAttributeSet(m.attrs))
		}
		m.observeRenewAge(o)
		return nil
	}, m.isLeader, m.term, m.renewAge)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// observeRenewal registers the renew.age gauge alone (a ShardOwner's
// sessions); the returned func unregisters it.
func (m *metrics) observeRenewal() func() {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.observeRenewAge(o)
		return nil
	}, m.renewAge)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// observeRenewAge is computed at collection, from the send time the fuse
// last confirmed: a value that grows toward LeaseDuration - StopMargin says
// the renewals are failing, whatever the renewal loop has logged.
func (m *metrics) observeRenewAge(o metric.Observer) {
	t := m.held.Load()
	if t == nil || t.fuse == nil {
		return
	}
	if sent := t.fuse.lastSent(); !sent.IsZero() {
		o.ObserveFloat64(m.renewAge, time.Since(sent).Seconds(), metric.WithAttributeSet(m.attrs))
	}
}

// holding makes t the term in progress on this lease, for the gauges; the
// returned func clears it. t.fuse must be set.
func (m *metrics) holding(t *termState) func() {
	m.held.Store(t)
	return func() { m.held.CompareAndSwap(t, nil) }
}

func (m *metrics) with(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append(m.attrs.ToSlice(), kv...)...)
}

func (m *metrics) transition(direction string, reason StopReason) {
	kv := []attribute.KeyValue{attribute.String("direction", direction)}
	if reason != "" {
		kv = append(kv, attribute.String("reason", string(reason)))
	}
	m.transitions.Add(context.Background(), 1, m.with(kv...))
}

func (m *metrics) attempt(outcome string) {
	m.attempts.Add(context.Background(), 1, m.with(attribute.String("outcome", outcome)))
}

func (m *metrics) renewed(d time.Duration, outcome string) {
	m.renew.Record(context.Background(), d.Seconds(), m.with(attribute.String("outcome", outcome)))
}

func (m *metrics) stopMargin(d time.Duration) {
	m.margin.Record(context.Background(), d.Seconds(), metric.WithAttributeSet(m.attrs))
}

// outcome names an error's kind for metrics.
func outcome(err error, ok string) string {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, ErrLeaseHeld):
		return "held"
	case errors.Is(err, ErrLeaseLost):
		return "lost"
	case errors.Is(err, ErrPermanent):
		return "permanent"
	}
	return "transient"
}

func (m *metrics) silentBreak(o breakOutcome) {
	name := map[breakOutcome]string{breakDone: "broken", etagChanged: "renewed", noLease: "gone", breakFailed: "failed"}[o]
	m.silent.Add(context.Background(), 1, m.with(attribute.String("outcome", name)))
}
