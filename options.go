package leaderelection

import (
	"log/slog"
	"time"

	"github.com/blobelect/leaderelection/internal/clock"
	"go.opentelemetry.io/otel/metric"
)

// Option configures a [BlobDistributedMutex] or a [BlobLeaseManager].
type Option func(*options)

type options struct {
	logger        *slog.Logger
	identity      string
	stallTimeout  time.Duration
	onEvent       func(Event)
	meterProvider metric.MeterProvider

	leaseIDFile    string // see WithLeaseIDFile, in resume.go
	leaseIDFileSet bool

	priority    int // see WithPriority, in prefer.go
	prioritySet bool

	seams seams
}

// seams are what a test may replace, as client-go's election takes a clock:
// the clock that counts a suspended host's time (a testing/synctest bubble
// fakes time.Now, not the host's boot clock), how long a ShardOwner waits
// before it looks for strays (shardbalance.go), and how often it reads its notes
// while it expects shards (handoff.go; the simulator reads them less often,
// to run more fleets in its time), and a wait before the lock every claim
// and adoption of a shard is reserved under (reserve: the simulator draws
// one, so that what a caller decided before the lock meets what others did
// meanwhile, as on a slow or busy host; a decision that must be made under
// the lock then shows it). The wait is told which path reserves, so that
// one path may be slowed and not another, as a scheduler's priorities
// would: a race between two paths needs one to wait while the other goes
// on. Zero values are the real ones.
type seams struct {
	boot          clock.Boot
	strayAfter    time.Duration
	handoffPoll   time.Duration
	beforeReserve func(reservation)
}

// reservation is the path that reserves a shard (reserve), for the seam
// beforeReserve.
type reservation int

const (
	takingBack   reservation = iota // a shard this session's previous process held (sessionfile.go)
	adoptingSeen                    // a shard handed to this session, on a condition (a listing's, or a note it cannot vouch for)
	adoptingNote                    // a shard a live session's note handed to this session (adoptOne)
)

// WithLogger sets where the library logs, through log/slog with key-value
// attributes. It is quiet while all is well: leadership changes at Info,
// failing storage at Warn (rate-limited), a leader func that ignores its
// cancelled context at Error. Default: slog.Default(). Nil discards logs.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		o.logger = l
	}
}

// WithIdentity names this contender in the lease blob's metadata, in events
// and in logs: a pod name, say. Printable ASCII, at most 256 characters, not
// beginning or ending with a space (HTTP would trim it from the metadata).
// Default: host name, process ID and a random suffix, e.g. "web-7-4242-a1b2c3".
func WithIdentity(id string) Option {
	return func(o *options) { o.identity = id }
}

// WithStallTimeout turns on stalled-leader detection: a leader func that has
// not called [Heartbeat] for longer than d (counted from its start) is
// considered stalled. The leader stops renewing, its context is cancelled
// with [ErrStalled], the lease is released once the func returns (or expires
// if it never does), and another instance takes over. Detection happens at
// the next renewal tick, so within d + RenewInterval. Off (0) by default; d
// must be at least the RenewInterval.
func WithStallTimeout(d time.Duration) Option {
	return func(o *options) { o.stallTimeout = d }
}

// WithEvents calls fn for every leadership event: [StartedLeading] and
// [StoppedLeading] for this instance, [NewLeaderObserved] for a leader seen
// while following, [SilentLeaseBroken] for a silent leader's ETag lease this
// instance broke. Calls are made one at a time, in order, from the
// goroutine running RunTaskWhenMutexAcquired; fn must not block for long
// (StartedLeading delays the leader func's start, the others delay
// contention). StoppedLeading always follows a StartedLeading.
func WithEvents(fn func(Event)) Option {
	return func(o *options) { o.onEvent = fn }
}

// WithMeterProvider records OpenTelemetry metrics (see metrics.go for the
// list) through mp. Default: none (a no-op provider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meterProvider = mp }
}

func buildOptions(opts []Option) options {
	o := options{logger: slog.Default()}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.seams.boot == nil {
		o.seams.boot = clock.SinceBoot
	}
	if o.identity == "" {
		o.identity = defaultIdentity()
	}
	return o
}
