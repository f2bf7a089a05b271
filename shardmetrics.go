package leaderelection

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The metrics of ownership as a whole (shardCounters), and the shards that no
// live session holds, as this instance last saw them (ownerless).

func newShardCounters(m *metrics) shardCounters {
	c := shardCounters{m: m, seen: &ownerless{names: map[string]bool{}}}
	c.owned, _ = m.meter.Int64ObservableGauge("leaderelection.shards.owned",
		metric.WithDescription("Shards this instance holds and keeps: their func runs, and they are not being handed over or removed."))
	c.target, _ = m.meter.Int64ObservableGauge("leaderelection.shards.target", metric.WithDescription("This instance's fair share of the shards."))
	c.live, _ = m.meter.Int64ObservableGauge("leaderelection.sessions.live", metric.WithDescription("Live sessions, this instance's included."))
	c.unowned, _ = m.meter.Int64ObservableGauge("leaderelection.shards.unowned",
		metric.WithDescription("Shards of this instance's set that no live session holds, by its last listing of the shards "+
			"(see leaderelection.shards.listing.age) and its own claims since; 0 once the sessions' records, settled, count every shard."))
	c.listAge, _ = m.meter.Float64ObservableGauge("leaderelection.shards.listing.age", metric.WithUnit("s"),
		metric.WithDescription("Time since this instance's last listing of the shards started, or since the sessions' records, settled, "+
			"counted every shard: the age of leaderelection.shards.unowned."))
	c.claims, _ = m.meter.Int64Counter("leaderelection.shards.claims", metric.WithDescription("Shard claims, by outcome."))
	c.handovers, _ = m.meter.Int64Counter("leaderelection.shards.handovers", metric.WithDescription("Shards handed over to balance the load."))
	return c
}

// observe registers the gauges for one Run, the sessions' renew.age among
// them; the returned func unregisters them.
func (c shardCounters) observe(o *ShardOwner) func() {
	reg, err := c.m.meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		owned := int64(o.state.ownedCount())
		target, live, unowned, listed := o.state.gauges(c.seen)
		ob.ObserveInt64(c.owned, owned, metric.WithAttributeSet(c.m.attrs))
		ob.ObserveInt64(c.target, int64(target), metric.WithAttributeSet(c.m.attrs))
		ob.ObserveInt64(c.live, int64(live), metric.WithAttributeSet(c.m.attrs))
		if !listed.IsZero() {
			ob.ObserveInt64(c.unowned, int64(unowned), metric.WithAttributeSet(c.m.attrs))
			ob.ObserveFloat64(c.listAge, time.Since(listed).Seconds(), metric.WithAttributeSet(c.m.attrs))
		}
		return nil
	}, c.owned, c.target, c.live, c.unowned, c.listAge)
	if err != nil {
		return o.sessionMetrics.observeRenewal()
	}
	unobserveSession := o.sessionMetrics.observeRenewal()
	return func() {
		_ = reg.Unregister()
		unobserveSession()
	}
}

// sawListing replaces the ownerless shards with a listing's, started at
// start: its candidates (free, of dead sessions, never recorded and broken
// once stood a lease duration), the leases with no live holder's record
// standing shorter, and the shards with a bad record.
func (c shardCounters) sawListing(start time.Time, cands map[string]candidate, anomalies map[string]unleasedSince, bad map[string]*RecordError) {
	names := make(map[string]bool, len(cands)+len(anomalies)+len(bad))
	for n := range cands {
		names[n] = true
	}
	for n := range anomalies {
		names[n] = true
	}
	for n := range bad {
		names[n] = true
	}
	c.seen.mu.Lock()
	defer c.seen.mu.Unlock()
	c.seen.names, c.seen.listed = names, start
}

// sawAllHeld empties the ownerless shards as of now, without a listing: the
// records of the sessions of this instance's group count every shard of its
// set, and have stood still since they last changed (see balance).
func (c shardCounters) sawAllHeld(now time.Time) {
	c.seen.mu.Lock()
	defer c.seen.mu.Unlock()
	c.seen.names, c.seen.listed = map[string]bool{}, now
}

// sawFree adds shards found free without a listing: a dead session's.
func (c shardCounters) sawFree(names []string) {
	c.seen.mu.Lock()
	defer c.seen.mu.Unlock()
	for _, n := range names {
		c.seen.names[n] = true
	}
}

// claim counts a claim of shard name; one this instance won, or lost to
// another claimer, is no longer ownerless.
func (c shardCounters) claim(name, outcome string) {
	c.claims.Add(context.Background(), 1, c.m.with(attribute.String("outcome", outcome)))
	if outcome == "claimed" || outcome == "taken" || outcome == "held" {
		c.seen.mu.Lock()
		delete(c.seen.names, name)
		c.seen.mu.Unlock()
	}
}
