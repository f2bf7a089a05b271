package chaos

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/tools/baseline"
)

// Contender is what one lane runs: an algorithm and, for the library, its
// timings; a zero timing takes the library's default (so a LeaseDuration
// outside 15-60 s makes an ETag lease). The baseline takes no timings (the
// reference sample's are fixed), and etcd only LeaseDuration: its session
// TTL, in whole seconds (default 60 s, etcd's).
type Contender struct {
	Algo           string        `json:",omitempty"`
	LeaseDuration  time.Duration `json:",omitempty"`
	RenewInterval  time.Duration `json:",omitempty"`
	RetryInterval  time.Duration `json:",omitempty"`
	StopMargin     time.Duration `json:",omitempty"`
	RequestTimeout time.Duration `json:",omitempty"`
}

// etcdDefaultTTL is concurrency.NewSession's default TTL.
const etcdDefaultTTL = 60 * time.Second

// laneTimings are a contender's timings with defaults applied.
type laneTimings struct {
	Kind                                                                    leaderelection.LeaseKind // the library's; "" for the others
	LeaseDuration, RenewInterval, RetryInterval, StopMargin, RequestTimeout time.Duration
}

// settings are the library's BlobSettings for c's timings (no storage).
func (c Contender) settings() leaderelection.BlobSettings {
	return leaderelection.BlobSettings{LeaseDuration: c.LeaseDuration, RenewInterval: c.RenewInterval,
		RetryInterval: c.RetryInterval, StopMargin: c.StopMargin, RequestTimeout: c.RequestTimeout}
}

// timings applies c's algorithm's defaults, and checks c.
func (c Contender) timings() (laneTimings, error) {
	custom := c.RenewInterval != 0 || c.RetryInterval != 0 || c.StopMargin != 0 || c.RequestTimeout != 0
	switch c.Algo {
	case AlgoLibrary, "":
		s := c.settings()
		s.ConnectionString, s.Container, s.Blob = "UseDevelopmentStorage=true", "chaos", "chaos"
		m, err := leaderelection.NewBlobLeaseManager(s)
		if err != nil {
			return laneTimings{}, err
		}
		defer m.CloseIdleConnections()
		s = m.Settings()
		return laneTimings{Kind: m.Kind(), LeaseDuration: s.LeaseDuration, RenewInterval: s.RenewInterval,
			RetryInterval: s.RetryInterval, StopMargin: s.StopMargin, RequestTimeout: s.RequestTimeout}, nil
	case AlgoBaseline:
		if custom || c.LeaseDuration != 0 {
			return laneTimings{}, errors.New("chaos: the baseline runs the reference sample's fixed timings; give it none")
		}
		return laneTimings{LeaseDuration: baseline.LeaseDuration, RenewInterval: baseline.RenewInterval,
			RetryInterval: baseline.AcquireAttemptInterval}, nil
	case AlgoEtcd:
		if custom {
			return laneTimings{}, errors.New("chaos: etcd takes only a LeaseDuration: its session TTL")
		}
		ttl := c.LeaseDuration
		if ttl == 0 {
			ttl = etcdDefaultTTL
		}
		if ttl%time.Second != 0 || ttl < 2*time.Second {
			return laneTimings{}, fmt.Errorf("chaos: etcd's session TTL must be whole seconds, at least 2 s; got %v", ttl)
		}
		// The client sends a keepalive every TTL/3; followers are told of
		// a deletion by a watch, at once.
		return laneTimings{LeaseDuration: ttl, RenewInterval: ttl / 3}, nil
	}
	return laneTimings{}, fmt.Errorf("chaos: unknown algorithm %q", c.Algo)
}

// Label names c briefly, for lanes and tables: "etag 5s", "native 15s",
// "baseline", "etcd 5s"; a library follower's retry interval is added when
// it is not the default ("etag 5s/1s").
func (c Contender) Label() string {
	t, err := c.timings()
	if err != nil {
		return c.Algo + "?"
	}
	switch c.Algo {
	case AlgoBaseline:
		return "baseline"
	case AlgoEtcd:
		return "etcd " + t.LeaseDuration.String()
	}
	l := string(t.Kind) + " " + t.LeaseDuration.String()
	if c.RetryInterval != 0 && c.RetryInterval != leaderelection.DefaultRetryInterval {
		l += "/" + c.RetryInterval.String()
	}
	return l
}

// etcd reports whether the fleet runs against etcd; a fleet cannot mix
// etcd with the Azure algorithms, which need Azurite.
func etcdFleet(fleet []Contender) (bool, error) {
	n := 0
	for _, c := range fleet {
		if c.Algo == AlgoEtcd {
			n++
		}
	}
	if n != 0 && n != len(fleet) {
		return false, errors.New("chaos: a fleet cannot mix etcd with contenders that need Azurite")
	}
	return n > 0, nil
}

// TimingsOf returns the timings a fleet's run is judged by: the longest
// lease and retry interval of its contenders, so that the liveness bound
// holds whichever of them led.
func TimingsOf(fleet []Contender) (Timings, error) {
	t := Timings{Slack: 5 * time.Second}
	var detect time.Duration
	for _, c := range fleet {
		lt, err := c.timings()
		if err != nil {
			return Timings{}, err
		}
		t.LeaseDuration = max(t.LeaseDuration, lt.LeaseDuration)
		t.RetryInterval = max(t.RetryInterval, lt.RetryInterval)
		// A leader learns that storage forgot its lease at its next
		// renewal; the library's may take a request timeout to fail.
		detect = max(detect, lt.RenewInterval+lt.RequestTimeout)
	}
	if len(fleet) == 0 {
		return TimingsOf([]Contender{{}})
	}
	t.Detect = detect + t.Slack
	return t, nil
}

// ParseFleet builds a fleet of n lanes from comma-separated lists, each
// cycled over the lanes: lane i runs algos[i%len], with lease[i%len] and so
// on, so that "-lease 3s,5s,15s" mixes ETag and native leases. An empty
// list leaves that field at its default.
func ParseFleet(n int, algos, lease, renew, retry, margin, timeout string) ([]Contender, error) {
	lists := map[string][]time.Duration{}
	for name, spec := range map[string]string{"lease": lease, "renew": renew, "retry": retry, "stop-margin": margin, "request-timeout": timeout} {
		if spec == "" {
			continue
		}
		for _, f := range strings.Split(spec, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil {
				return nil, fmt.Errorf("chaos: -%s: %w", name, err)
			}
			lists[name] = append(lists[name], d)
		}
	}
	pick := func(name string, i int) time.Duration {
		if l := lists[name]; len(l) > 0 {
			return l[i%len(l)]
		}
		return 0
	}
	as := strings.Split(algos, ",")
	fleet := make([]Contender, n)
	for i := range fleet {
		fleet[i] = Contender{Algo: strings.TrimSpace(as[i%len(as)]), LeaseDuration: pick("lease", i), RenewInterval: pick("renew", i),
			RetryInterval: pick("retry", i), StopMargin: pick("stop-margin", i), RequestTimeout: pick("request-timeout", i)}
		if _, err := fleet[i].timings(); err != nil {
			return nil, fmt.Errorf("lane %d: %w", i+1, err)
		}
	}
	return fleet, nil
}
